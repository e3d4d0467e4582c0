"""The collective fallback: a job whose switch and PS stop answering goes on over torch.distributed,
bit for bit, in real gloo worker processes (rank 0 hosts the aggregators and stops them)."""

import contextlib
import threading
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from conftest import loss_on, mlp, regression_problem, shard
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.launch import LocalAggregators, run_workers
from ina.switch.server import Faults
from ina.transport import create_transport
from ina.transport.errors import TransportError
from ina.transport.fallback import checked_fallback

STEPS = 24


def _restart(local: LocalAggregators, name: str, addresses: tuple) -> None:
    """Start `name` ("switch" or "ps") again on its `addresses` (data, control), knowing no jobs."""
    from ina.ps.native import ps_core
    from ina.ps.server import PSServer
    from ina.switch import SwitchConfig
    from ina.switch.server import SwitchServer

    started = PSServer(ps_core(64), *addresses) if name == "ps" else SwitchServer(SwitchConfig(pool=64, words=64), *addresses)
    setattr(local, name, started.start())


def _train(rank: int, workers: int, transport: str, events: dict[int, list[tuple[str, str]]], options: dict,
           faults: Faults = Faults()) -> dict:  # fmt: skip
    """THC training over the collective, then through `transport` (with its `options`) while rank 0
    stops and starts the aggregators as `events` say before those steps (the switch with `faults`);
    the final parameters of both, and what the second run saw."""
    local = LocalAggregators(faults=faults) if rank == 0 else None
    box = [local.options(transport) if local else None]
    addresses = {name: (server.address, server.control_address) for name, server in (("ps", local.ps), ("switch", local.switch))} \
        if local else {}  # fmt: skip
    dist.broadcast_object_list(box, src=0)
    x, y = regression_problem()
    final, seen = {}, {}
    for name in ("collective", transport):
        torch.manual_seed(0)
        model = mlp()
        chosen = "collective" if name == "collective" else \
            create_transport(name, None, peer_timeout=20.0, failover=0.3, **options, **box[0])  # fmt: skip
        state = THCState(start_iter=2, error_feedback=True, transport=chosen)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(STEPS):
            for action, service in events.get(step, []) if name != "collective" and local is not None else []:
                getattr(local, service).close() if action == "stop" else _restart(local, service, addresses[service])
            batch = shard(step, rank, workers)
            optimizer.zero_grad()
            loss_on(ddp, x[batch], y[batch]).backward()
            optimizer.step()
            if name != "collective" and any(action == "start" for s in events if s <= step for action, _ in events[s]):
                time.sleep(0.1)  # time for the fail-back to come due
        final[name] = [p.detach().clone() for p in model.parameters()]
        if name != "collective":
            seen = {"paths": state.paths, "counters": getattr(state.transport, "counters", {}), "path": state.transport.path}
        dist.barrier()
        state.transport.close()
    if local is not None:
        local.close()
    return {"final": final, **seen}


def _same(result: dict, transport: str) -> bool:
    return all(torch.equal(a, b) for a, b in zip(result["final"]["collective"], result["final"][transport]))


def test_a_ps_only_job_whose_ps_dies_goes_on_over_the_collective_bit_for_bit():
    for result in run_workers(_train, 3, "ps", {8: [("stop", "ps")]}, {}, timeout=120):
        assert _same(result, "ps")
        assert result["path"] == "collective" and [p for _, p in result["paths"]] == ["ps", "collective"], result["paths"]
        assert result["paths"][1][0] >= 8  # not before the PS died
        counters = result["counters"]
        assert counters["collective_fallbacks"] == 1 and counters["collective_reductions"] > 0, counters


def test_a_switch_job_falls_over_to_the_ps_then_to_the_collective_bit_for_bit():
    for result in run_workers(_train, 2, "switch", {6: [("stop", "switch")], 14: [("stop", "ps")]}, {}, timeout=120):
        assert _same(result, "switch")
        assert [p for _, p in result["paths"]] == ["switch", "ps", "collective"], result["paths"]
        counters = result["counters"]
        assert counters["failovers"] >= 1 and counters["collective_fallbacks"] == 1, counters


def test_through_a_switch_that_loses_duplicates_and_reorders_the_fallbacks_stay_exact():
    events = {4: [("stop", "switch")], 10: [("stop", "ps")]}
    faults = Faults(drop=0.02, duplicate=0.02, reorder=0.05, seed=3)
    for result in run_workers(_train, 3, "switch", events, {}, faults, timeout=180):
        assert _same(result, "switch")
        assert [p for _, p in result["paths"]] == ["switch", "ps", "collective"], result["paths"]
        assert result["counters"]["resent"] > 0  # the faults cost resends before the switch died


def _hang(rank: int, workers: int) -> tuple[str, str, float]:
    """Rank 2 stops taking part at step 4 (its process lives on, its threads too); what the others meet, and when."""
    with LocalAggregators() if rank == 0 else contextlib.nullcontext() as local:
        box = [local.options("ps") if local else None]
        dist.broadcast_object_list(box, src=0)
        x, y = regression_problem()
        ddp = DistributedDataParallel(mlp())
        state = THCState(start_iter=1, transport=create_transport("ps", None, peer_timeout=2.0, failover=0.3, **box[0]))
        ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        hung = time.monotonic()
        try:
            for step in range(12):
                if step == 4:
                    hung = time.monotonic()
                    if rank == 2:
                        time.sleep(12.0)
                        return "hung", "", 0.0
                batch = shard(step, rank, workers)
                optimizer.zero_grad()
                loss_on(ddp, x[batch], y[batch]).backward()
                optimizer.step()
        except TransportError as error:
            return type(error).__name__, str(error), time.monotonic() - hung
        return "no error", "", time.monotonic() - hung


def test_a_rank_that_stops_taking_part_ends_training_with_a_transport_error_within_twice_the_peer_timeout():
    """The engine gives up after peer_timeout (the PS says which rank is missing), the job falls back,
    and the collective waits for that rank at most peer_timeout (gloo's timeout): bounded, not hung."""
    results = run_workers(_hang, 3, timeout=120)
    assert results[2][0] == "hung"
    for kind, message, after in results[:2]:
        assert kind == "TransportError", message
        assert "collective fallback" in message and "the PS holds no contribution from ranks [2]" in message, message
        assert after < 2 * 2.0 + 3.0, after  # two peer timeouts, a beat, and a loaded machine's slack


def _one_of_two_jobs(rank: int, workers: int, options: dict, meet: str) -> tuple[bool, list]:
    """Over the collective, then through the switch once the other job is there too: equal parameters,
    and the paths the second run took."""
    x, y = regression_problem()
    final = []
    for name in ("collective", "switch"):
        torch.manual_seed(workers)
        model = mlp()
        chosen = "collective" if name == "collective" else create_transport("switch", None, peer_timeout=20.0, failover=0.3, **options)
        state = THCState(start_iter=2, transport=chosen)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        if name == "switch":
            _meet(Path(meet), workers, rank)
        for step in range(100):
            batch = shard(step, rank, workers)
            optimizer.zero_grad()
            loss_on(ddp, x[batch], y[batch]).backward()
            optimizer.step()
            time.sleep(0.03 if name == "switch" else 0)  # still training when the aggregators die
        final.append([p.detach().clone() for p in model.parameters()])
        dist.barrier()
        state.transport.close()
    return all(torch.equal(a, b) for a, b in zip(*final)), [path for _, path in state.paths]


def _meet(folder: Path, workers: int, rank: int) -> None:
    """Both jobs wait until each has its switch transport attached."""
    (folder / f"{workers}-{rank}").touch()
    deadline = time.monotonic() + 60
    while len(list(folder.iterdir())) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    dist.barrier()


def test_two_jobs_at_once_lose_the_switch_and_the_ps_and_both_end_exactly_on_the_collective(tmp_path):
    with LocalAggregators() as local:
        options = local.options("switch")
        runs = [_in_background(run_workers, _one_of_two_jobs, workers, options, str(tmp_path), timeout=180) for workers in (2, 3)]
        deadline = time.monotonic() + 120
        while len(list(tmp_path.iterdir())) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)  # a few steps through the switch
        assert len(local.switch.jobs()) == 2, local.switch.jobs()
        local.switch.close()
        time.sleep(1.0)  # both jobs on the PS
        local.ps.close()
        for thread, out in runs:
            thread.join()
            assert out and all(same and paths == ["switch", "ps", "collective"] for same, paths in out[0]), out


def _in_background(fn, *args, **kwargs) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
    thread.start()
    return thread, out


def _train_in_two_nodes(rank: int, workers: int, *args) -> dict:
    from test_hierarchy import _emulate_nodes

    _emulate_nodes(rank, 2, False, workers)  # THCState's hierarchy "auto" sums inside them first
    return _train(rank, workers, *args)


def test_the_leaders_of_a_two_level_job_fall_back_to_the_collective_and_every_rank_stays_exact():
    for rank, result in enumerate(run_workers(_train_in_two_nodes, 4, "ps", {6: [("stop", "ps")]}, {}, timeout=180)):
        assert _same(result, "ps")
        leader = rank in (0, 2)
        assert [p for _, p in result["paths"]] == (["ps", "collective"] if leader else []), (rank, result["paths"])


def test_a_ps_back_after_the_fallback_takes_the_job_again_bit_for_bit():
    events = {6: [("stop", "ps")], 12: [("start", "ps")]}
    for result in run_workers(_train, 2, "ps", events, {"failback": 1.0}, timeout=120):
        assert _same(result, "ps")
        assert [p for _, p in result["paths"]] == ["ps", "collective", "ps"], result["paths"]
        counters = result["counters"]
        assert counters["collective_fallbacks"] == 1 and counters["collective_failbacks"] == 1, counters
        assert counters["delivered"] > 0


def test_a_switch_job_returns_from_the_collective_when_both_aggregators_are_back_bit_for_bit():
    events = {5: [("stop", "switch"), ("stop", "ps")], 11: [("start", "ps"), ("start", "switch")]}
    for result in run_workers(_train, 2, "switch", events, {"failback": 1.0}, timeout=120):
        assert _same(result, "switch")
        assert [p for _, p in result["paths"]][-1] == "switch" and "collective" in dict(map(reversed, result["paths"])), result
        assert result["counters"]["collective_failbacks"] == 1, result["counters"]


@pytest.mark.parametrize("chain", [("ps",), ("collective",), (), ("ps", "collective"), ["ps", "collective"]])
def test_the_fallback_chain_is_checked(chain):
    assert checked_fallback(chain) == tuple(chain)


@pytest.mark.parametrize("chain", [("collective", "ps"), ("ps", "ps"), ("switch",), "nowhere"])
def test_a_fallback_chain_out_of_order_or_unknown_is_refused_saying_what_is_allowed(chain):
    with pytest.raises(ValueError, match=r"fallback must list stages of \('ps', 'collective'\) in that order"):
        checked_fallback(chain)

