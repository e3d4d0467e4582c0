"""A job over racks (docs/protocol.md, section 10) in real worker processes: each rank sends to its rack's leaf,
the leaves send their sums to the spine, and every rank receives exactly the collective's sums. Loopback, a
PS, a spine and one leaf a rack (`ina.launch.LocalRacks`)."""

import pytest
import torch
import torch.distributed as dist

from ina.compression import THCCodec, THCConfig
from ina.launch import LocalRacks, run_workers
from ina.switch.server import Faults
from ina.transport.udp import SwitchTransport
from ina.transport.collective import CollectiveTransport

RACKS = [[0, 3], [1, 4, 5], [2, 6]]  # ranks interleaved over the racks


def _sums(rank: int, workers: int, options: dict[int, dict[str, str]]) -> tuple[list, list, dict]:
    """Every bucket's sums and every norm's maximum, through the racks and through the collective."""
    codec = THCCodec(THCConfig(bits=4, granularity=30))
    generator = torch.Generator().manual_seed(rank)
    buckets = [torch.randint(0, 16, (size,), dtype=torch.uint8, generator=generator) for size in (5000, 1, 777)]
    norms = [torch.rand((), generator=generator) * 10**exponent for exponent in (-3, 0, 6)]
    results = []
    racked = SwitchTransport(**options[rank], peer_timeout=20.0)
    for transport in (racked, CollectiveTransport(None)):
        if transport is racked:
            transport.attach(codec, dist.group.WORLD)
        sums = [transport.table_sum(codec.table_values(b), codec, workers, bucket=i).wait() for i, b in enumerate(buckets)]
        maxima = [transport.norm_max(m, bucket=i).wait() for i, m in enumerate(norms)]
        results.append((sums, maxima))
    counters = racked.counters
    dist.barrier()
    racked.close()
    return results[0], results[1], counters


@pytest.mark.parametrize("loss", [0.0, 0.01], ids=["lossless", "1% loss, duplication, reordering"])
def test_a_job_over_three_racks_sums_exactly_what_the_collective_does(loss):
    faults = Faults(drop=loss, duplicate=loss, reorder=loss, seed=3)
    workers = sum(map(len, RACKS))
    with LocalRacks(RACKS, words=64, pool=64, faults=faults, path="python") as racks:
        options = {rank: racks.options(rank) for rank in range(workers)}
        outcomes = run_workers(_sums, workers, options, timeout=120)
        leaves = [leaf.core.counters() for leaf in racks.leaves]
        spine = racks.spine.core.counters()
    for (sums, maxima), (want_sums, want_maxima), _ in outcomes:
        assert all(torch.equal(got, want) for got, want in zip(sums, want_sums))
        assert all(torch.equal(got, want) for got, want in zip(maxima, want_maxima))
    assert all(c["sent_up"] > 0 for c in leaves)  # sums completed at both levels
    assert spine["completed"] > 0
    assert all(c["descended"] > 0 for c in leaves)
    if not loss:  # every chunk completes at both levels: a rack's uplink carries one DATA a chunk, not one a worker
        chunks = spine["completed"]
        assert [c["sent_up"] for c in leaves] == [chunks] * len(RACKS)
        assert spine["claimed"] + spine["aggregated"] == len(RACKS) * chunks
        assert [c["claimed"] + c["aggregated"] for c in leaves] == [len(ranks) * chunks for ranks in RACKS]


def _leaf(port: int):
    from ina.transport.udp_setup import Aggregator

    return Aggregator("switch", ("127.0.0.1", port))


def test_racks_are_numbered_by_their_first_rank_and_places_by_rank():
    from ina.transport.racks import RackPlan

    plan = RackPlan.of([_leaf(p) for p in (7, 5, 7, 9, 5, 5)])
    assert (plan.racks, plan.sizes, plan.rack_of, plan.place) == (3, (2, 3, 1), (0, 1, 0, 2, 1, 1), (0, 0, 1, 0, 1, 2))
    assert plan.ranks_in(1) == [1, 4, 5]


@pytest.mark.parametrize("leaves, message", [
    ([_leaf(1000 + r) for r in range(33)], "33 leaves"),
    ([_leaf(1)] * 33 + [_leaf(2)], r"\[33, 1\] workers"),
])  # fmt: skip
def test_a_job_beyond_32_racks_of_32_is_refused_with_what_to_change(leaves, message):
    from ina.transport.errors import TransportError
    from ina.transport.racks import RackPlan

    with pytest.raises(TransportError, match=f"{message}.*at most 32 racks of 32 workers.*fewer, fuller racks"):
        RackPlan.of(leaves)


def _attach(rank: int, workers: int, options: dict[int, dict[str, str]]) -> str:
    from ina.transport.errors import TransportError

    try:
        SwitchTransport(**options[rank]).attach(THCCodec(THCConfig(bits=4, granularity=30)), dist.group.WORLD)
    except TransportError as error:
        return str(error)
    return "attached"


def test_a_leaf_of_another_pool_stops_every_rank_and_leaves_no_registration():
    from ina.switch import SwitchConfig
    from ina.switch.server import SwitchServer

    with LocalRacks([[0], [1]], pool=64, path="python") as racks:
        odd = SwitchServer(SwitchConfig(pool=32), ("127.0.0.1", 0), ("127.0.0.1", 0), path="python").start()
        try:
            options = {rank: racks.options(rank) for rank in range(2)}
            options[1] |= {"switch": "%s:%d" % odd.address, "switch_control": "%s:%d" % odd.control_address}
            messages = run_workers(_attach, 2, options, timeout=60)
        finally:
            odd.close()
        assert all("same --words and --pool" in m for m in messages), messages
        assert racks.ps.core.jobs() == [] and racks.spine.core.jobs() == []


def test_a_leaf_that_refuses_the_job_leaves_it_registered_nowhere():
    from ina.control import Endpoint, JobSpec

    with LocalRacks([[0], [1]], path="python") as racks:
        racks.leaves[1].core.register(JobSpec(77, (Endpoint("127.0.0.1", 9),), 1, ps=Endpoint("127.0.0.1", 10)))
        options = {rank: racks.options(rank) | {"job": 77} for rank in range(2)}
        messages = run_workers(_attach, 2, options, timeout=60)
        assert all("job 77 is already registered" in m for m in messages), messages
        assert [s.core.jobs() for s in (racks.ps, racks.spine, racks.leaves[0])] == [[], [], []]


def _node_sums(rank: int, workers: int, options: dict[int, dict[str, str]], nodes: list[list[int]]) -> tuple[list, list]:
    """A bucket's sums through nodes' leaders under racks (HierarchicalTransport), and through the collective."""
    from ina.transport.hierarchy import HierarchicalTransport

    codec = THCCodec(THCConfig(bits=4, granularity=30))
    bucket = torch.randint(0, 16, (3000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(rank))
    racked = HierarchicalTransport(SwitchTransport(**options[rank]), nodes=nodes)
    racked.attach(codec, dist.group.WORLD)
    got = racked.table_sum(codec.table_values(bucket), codec, workers, bucket=0).wait()
    want = CollectiveTransport(None).table_sum(codec.table_values(bucket), codec, workers, bucket=0).wait()
    dist.barrier()
    racked.close()
    return got, want


def test_nodes_leaders_aggregate_over_racks_as_the_flat_collective():
    nodes = [[0, 1], [2, 3], [4, 5]]
    with LocalRacks([[0, 1], [2, 3, 4, 5]], path="python") as racks:  # nodes 0 under one leaf, nodes 1 and 2 under the other
        outcomes = run_workers(_node_sums, 6, {rank: racks.options(rank) for rank in range(6)}, nodes, timeout=120)
        assert [c["sent_up"] > 0 for c in (leaf.core.counters() for leaf in racks.leaves)] == [True, True]
    assert all(torch.equal(got, want) for got, want in outcomes)


def _train_while_the_spine_dies_and_comes_back(rank: int, workers: int, racks: list[list[int]], state_file: str) -> dict:
    """The same training over the collective, then over racks whose spine rank 0 stops at step 6 and starts again
    from its state file at step 12 (rank 0 serves the racks)."""
    from conftest import mlp, regression_problem, train
    from torch.nn.parallel import DistributedDataParallel

    from ina import THCState, thc_hook

    local = LocalRacks(racks, path="python", spine_state=state_file) if rank == 0 else None
    box = [None if local is None else {r: local.options(r) for r in range(workers)}]
    dist.broadcast_object_list(box, src=0)
    x, y = regression_problem()
    final, counters = {}, {}
    for name in ("collective", "racks"):
        torch.manual_seed(0)
        model = mlp()
        transport = CollectiveTransport(None) if name == "collective" else \
            SwitchTransport(**box[0][rank], failover=0.3, failback=1.5, peer_timeout=20.0)  # fmt: skip
        state = THCState(start_iter=1, error_feedback=False, transport=transport)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        if name == "collective":
            train(ddp, (x, y), range(30))
        else:  # rank 0 stops the spine before step 6 and starts it before step 12; then time for the fail-back to come due
            for steps, change in ((range(6), "stop_spine"), (range(6, 12), "start_spine"), (range(12, 30), None)):
                train(ddp, (x, y), steps, pause=0.1 if change is None else 0.0)
                if change and local is not None:
                    getattr(local, change)()
        final[name] = [p.detach().clone() for p in model.parameters()]
        if name == "racks":
            counters = dict(state.transport.counters, path=state.transport.path)
        dist.barrier()
        state.transport.close()
    completed = local.spine.core.counters()["completed"] if local else None
    if local is not None:
        local.close()
    return {"final": final, "counters": counters, "completed": completed}


def test_training_goes_on_through_the_ps_while_the_spine_is_down_and_returns_to_two_levels_bit_for_bit(tmp_path):
    racks = [[0, 1], [2], [3]]
    results = run_workers(_train_while_the_spine_dies_and_comes_back, 4, racks, str(tmp_path / "spine.json"), timeout=180)
    for result in results:
        counters = result["counters"]
        assert counters["path"] == "switch", counters  # back on its leaf: the outage cost resends, a failover or the collective
        assert all(torch.equal(a, b) for a, b in zip(result["final"]["collective"], result["final"]["racks"]))
    assert results[0]["completed"] > 0  # the restarted spine summed racks again after the fail-back


def _two_jobs(rank: int, workers: int, options: dict[int, dict[str, str]]) -> list[bool]:
    """Two racked jobs at once, a high-priority and a low-priority one, each summing buckets over the same switches:
    whether each bucket's sums are the collective's."""
    from ina.transport.priority import FixedPriority

    codec = THCCodec(THCConfig(bits=4, granularity=30))
    generator = torch.Generator().manual_seed(rank)
    buckets = [torch.randint(0, 16, (4000,), dtype=torch.uint8, generator=generator) for _ in range(16)]
    jobs = [SwitchTransport(**options[rank], job=100 + level, policy=FixedPriority(level), peer_timeout=30.0) for level in (200, 10)]
    for transport in jobs:
        transport.attach(codec, dist.group.WORLD)
    pending = [(t.table_sum(codec.table_values(b), codec, workers, bucket=i), b) for i, b in enumerate(buckets) for t in jobs]
    got = [future.wait() for future, _ in pending]
    collective = CollectiveTransport(None)
    want = [collective.table_sum(codec.table_values(b), codec, workers, bucket=0).wait() for _, b in pending]
    dist.barrier()
    for transport in jobs:
        transport.close()
    return [torch.equal(a, b) for a, b in zip(got, want)]


def test_two_racked_jobs_contending_for_both_levels_pools_under_esa_stay_exact_with_preemptions_at_both():
    with LocalRacks([[0, 1, 2], [3, 4]], pool=2, path="python") as racks:
        outcomes = run_workers(_two_jobs, 5, {rank: racks.options(rank) for rank in range(5)}, timeout=180)
        preempted = [s.core.counters()["preempted"] for s in (racks.spine, *racks.leaves)]
    assert all(all(equal) for equal in outcomes)
    assert preempted[0] > 0 and any(preempted[1:]), preempted
