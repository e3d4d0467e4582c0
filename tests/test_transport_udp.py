"""The switch and PS transports in real worker processes: exact sums, DDP training, failures.

A software switch and a PS run on loopback (``LocalAggregators``, in the test process or in
rank 0); workers are gloo processes on this machine.
"""
import math
import os
import time

import pytest
import torch
import torch.distributed as dist
from conftest import UDP_TRANSPORTS, loss_on, mlp, regression_problem, shard, thc_state, train, train_until_an_aggregator_dies
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.compression import THCCodec, THCConfig, sum_lane_bits
from ina.launch import run_workers
from ina.net.native import DISABLE
from ina.transport import create_transport
from ina.transport.collective import CollectiveTransport
from ina.transport.errors import TransportError
from ina.transport.native import native_module

# (workers, bits, granularity): 8-bit lanes, odd index widths (3 and 5 bits: 10 and 6 per word),
# and 16-bit lanes. 32-bit lanes need workers * granularity > 65535, beyond THC's 32 x 255:
# tests/test_transport_udp_engine.py sums them through the engine.
SUM_CASES = [(4, 4, 30), (3, 3, 7), (2, 8, 255), (4, 5, 100)]


def _sums(rank: int, workers: int, options: dict[str, dict[str, str]]) -> list[tuple]:
    """For each case, on a group of its first ranks: every transport's sums and max next to the collective's."""
    outcomes = []
    for n, bits, granularity in SUM_CASES:
        group = dist.new_group(list(range(n)))
        if rank >= n:
            continue
        codec = THCCodec(THCConfig(bits=bits, granularity=granularity))
        generator = torch.Generator().manual_seed(100 * rank + bits)
        buckets = [torch.randint(0, 2**bits, (size,), dtype=torch.uint8, generator=generator) for size in (5000, 1, 777)]
        norms = [torch.rand((), generator=generator) * 10**exponent for exponent in (-3, 0, 6)]
        # Non-finite verdicts: +inf from rank 1, a NaN with its sign bit set from the last rank.
        norms += [torch.tensor(math.inf if rank == 1 else 2.0), torch.tensor(-math.nan if rank == n - 1 else 0.0)]
        transports = {"collective": CollectiveTransport(group)}
        for name in UDP_TRANSPORTS:
            transports[name] = create_transport(name, group, **options[name])
            transports[name].attach(codec, group)
        results = {
            name: ([t.table_sum(codec.table_values(b) if t.takes_values else b, codec, n, bucket=i).wait()
                    for i, b in enumerate(buckets)],
                   [t.norm_max(m, bucket=i).wait() for i, m in enumerate(norms)])
            for name, t in transports.items()
        }  # fmt: skip
        for name in UDP_TRANSPORTS:
            transports[name].close()
        outcomes.append(((n, bits, granularity), results))
    return outcomes


@pytest.fixture(params=["python", "native"])
def worker_engine(request, monkeypatch) -> str:
    """The engine the worker processes serve: with INA_NATIVE_PACKETS=0 they take the Python one.
    (The module's aggregators are up before this runs, so they keep their own path.)"""
    if request.param == "python":
        monkeypatch.setenv(DISABLE, "0")
    elif native_module() is None:
        pytest.skip("ina.transport._native is not built")
    return request.param


def test_switch_and_ps_sums_are_bit_identical_to_the_collective(transport_options, worker_engine):
    widths = set()
    for case, results in run_workers(_sums, 4, transport_options)[0]:
        n, _, granularity = case
        widths.add(sum_lane_bits(n, granularity))
        expected_sums, expected_max = results["collective"]
        for name in UDP_TRANSPORTS:
            sums, maxima = results[name]
            for got, want in zip(sums, expected_sums):
                assert got.dtype == want.dtype and torch.equal(got, want), (name, case)
            for got, want in zip(maxima, expected_max):  # bit patterns: NaN != NaN
                assert got.shape == () and torch.equal(got.view(torch.int32), want.view(torch.int32)), (name, case)
        for name in ("collective", *UDP_TRANSPORTS):
            assert all(bool(m.isnan()) for m in results[name][1][3:]), (name, case)  # the verdict, everywhere
    assert widths == {8, 16}


def _losses(rank: int, workers: int, options: dict[str, dict[str, str]]) -> dict[str, object]:
    """The same training with each transport: final loss, compressed bytes sent per step and chunks resent."""
    data = regression_problem()
    outcome = {}
    for name in ("collective", *UDP_TRANSPORTS):
        model = mlp()
        state = thc_state(name, options, start_iter=2)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        train(ddp, data, range(20), lr=0.2)
        with torch.no_grad():
            resent = getattr(state.transport, "counters", {}).get("resent", 0)
            outcome[name] = (loss_on(model, *data).item(), state.transport.bytes_sent / 18, resent)
        dist.barrier()
        state.transport.close()
    return outcome


def test_ddp_training_through_the_switch_and_the_ps_ends_at_the_collective_loss(aggregators, transport_options, worker_engine):
    results = run_workers(_losses, 4, transport_options, timeout=60)
    losses = {name: loss for name, (loss, _, _) in results[0].items()}
    # Same seeds, same exact integer sums, the same decoding: the same bits, not just close.
    assert losses["switch"] == losses["collective"] and losses["ps"] == losses["collective"], losses
    for result in results:
        assert {name: loss for name, (loss, _, _) in result.items()} == losses
        # One 2,372-element bucket pads to 3,072 coordinates: 12 switch chunks of 256 in 8-bit lanes (K = 64),
        # or one PS chunk of 384 words of 4-bit indices (K: a datagram's worth), plus a one-word MAX chunk; each
        # packet a 20-byte header and its words: what the wire carries, resends aside.
        wire = {"switch": 12 * (20 + 4 * 64) + 24, "ps": 20 + 4 * 3072 // 8 + 24}
        for name, least in wire.items():
            sent, resent = result[name][1:]
            assert sent == least or (sent > least and resent), (name, result)
    assert aggregators.switch.counters()["unregistered"] == 0
    assert aggregators.switch.jobs() == [] and aggregators.ps.jobs() == []  # rank 0 deregistered on close


def _train_until_the_aggregator_dies(rank: int, workers: int, transport: str) -> tuple[str, str, float]:
    """Rank 0 hosts the switch and the PS and stops the one the transport sends to at step 5; every rank reports its error."""
    return train_until_an_aggregator_dies(rank, workers, transport, 10, 5, "switch" if transport == "switch" else "ps")


@pytest.mark.parametrize("transport", UDP_TRANSPORTS)
def test_without_failover_a_dead_aggregator_stops_training_with_the_engines_error_within_the_peer_timeout(transport):
    destination = "switch" if transport == "switch" else "PS"
    for kind, message, after in run_workers(_train_until_the_aggregator_dies, 2, transport, timeout=60):
        assert kind == "TransportError", message
        assert f"got no result within peer_timeout=1.0s from the {destination} at 127.0.0.1:" in message
        assert after < 1.0 + 3.0, after  # the peer timeout, plus a step's work and a loaded machine's slack


def _start_without_aggregators(rank: int, workers: int, transport: str, environment: dict[str, str]) -> tuple[str, float]:
    os.environ.update(environment)
    started = time.monotonic()
    try:
        THCState(transport=transport)
    except TransportError as error:
        return str(error), time.monotonic() - started
    return "no error", 0.0


@pytest.mark.parametrize("transport", UDP_TRANSPORTS)
def test_a_missing_aggregator_stops_every_worker_at_start_saying_what_to_set(transport):
    environment = {"INA_SWITCH_CONTROL": "127.0.0.1:9", "INA_PS_CONTROL": "127.0.0.1:9"}  # nothing listens there
    variable = f"INA_{transport.upper()}"
    for message, took in run_workers(_start_without_aggregators, 2, transport, environment, timeout=30):
        assert message.startswith(f"no {transport} control API answers at 127.0.0.1:9 "), message
        assert f"Start `ina {transport}` there" in message and f"set {variable}=host:port" in message, message
        assert took < 5


def _train_through_a_switch_that_dies_and_comes_back(rank: int, workers: int, state_file: str) -> dict:
    """The same training over the collective, then through a switch that rank 0 kills at step 6 and
    starts again (on the same ports, from its state file: the job is still registered) at step 12."""
    from ina.control.registry import JobStore, Registry
    from ina.ps.native import ps_core
    from ina.ps.server import PSServer
    from ina.switch import SwitchConfig
    from ina.switch.server import SwitchServer

    x, y = regression_problem()
    final = {}
    registry, loopback, config = Registry(store=JobStore(state_file)), ("127.0.0.1", 0), SwitchConfig(pool=64, words=64)
    ps = PSServer(ps_core(64), loopback, loopback).start() if rank == 0 else None
    switch = SwitchServer(config, loopback, loopback, registry=registry).start() if rank == 0 else None
    box = [None if ps is None else {"ps": "%s:%d" % ps.address, "ps_control": "%s:%d" % ps.control_address,
                                    "switch": "%s:%d" % switch.address, "switch_control": "%s:%d" % switch.control_address}]  # fmt: skip
    dist.broadcast_object_list(box, src=0)
    for name in ("collective", "switch"):
        torch.manual_seed(0)
        model = mlp()
        transport = "collective" if name == "collective" else create_transport("switch", None, failover=0.3, failback=1.5, peer_timeout=20.0, **box[0])
        state = THCState(start_iter=1, error_feedback=False, transport=transport)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(30):
            if name == "switch" and rank == 0 and step == 6:
                addresses = (switch.address, switch.control_address)
                switch.close()
            if name == "switch" and rank == 0 and step == 12:
                switch = SwitchServer(config, *addresses, registry=registry).start()
            batch = shard(step, rank, workers)
            optimizer.zero_grad()
            loss_on(ddp, x[batch], y[batch]).backward()
            optimizer.step()
            if name == "switch" and step >= 12:
                time.sleep(0.1)  # time for the fail-back to come due
        final[name] = [p.detach().clone() for p in model.parameters()]
        counters = state.transport.counters if name == "switch" else {}
        path = state.transport.path if name == "switch" else None
        dist.barrier()
        state.transport.close()
    completed = switch.counters()["completed"] if switch else None
    for server in (switch, ps):
        if server is not None:
            server.close()
    return {"final": final, "failovers": counters["failovers"], "failbacks": counters["failbacks"], "completed": completed,
            "path": path}


def test_training_fails_over_from_a_dead_switch_to_the_ps_and_back_bit_for_bit(tmp_path):
    results = run_workers(_train_through_a_switch_that_dies_and_comes_back, 2, str(tmp_path / "switch.json"), timeout=120)
    for result in results:
        assert result["failovers"] >= 1 and result["failbacks"] >= 1 and result["path"] == "switch", result
        for a, b in zip(result["final"]["collective"], result["final"]["switch"]):
            assert torch.equal(a, b)
    assert results[0]["completed"] > 0  # the restarted switch aggregated again after the fail-back
