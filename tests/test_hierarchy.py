"""Two-level reductions (ina.transport.hierarchy): nodes emulated on this machine, bit-identical to flat.

Each worker process gets its node from torchrun's variables (GROUP_RANK, LOCAL_WORLD_SIZE), set
before its THCState is built; the software switch and PS run in the test process.
"""
import os

import pytest
import torch
import torch.distributed as dist
from conftest import FakeGroup, loss_on, mlp, regression_problem, shard, thc_state, train_until_an_aggregator_dies
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.compression import THCCodec, THCConfig
from ina.launch import run_workers
from ina.transport.errors import TransportError
from ina.transport.hierarchy import HierarchicalTransport, Layout, node_name, sums_by_node
from ina.transport.udp import PSTransport, SwitchTransport

# (transport, hierarchy): the flat collective is the reference every other run must equal.
RUNS = [("collective", "flat"), ("collective", "auto"), ("switch", "node"), ("ps", "node")]
STEPS = 6
THC_OPTIONS = {"error_feedback": True, "start_iter": 2, "min_compression_elements": 60}


def test_ranks_with_the_same_node_name_share_a_node_led_by_their_lowest_rank():
    layout = Layout.from_names(["b", "a", "b", "c", "a"])
    assert layout.nodes == ((0, 2), (1, 4), (3,))
    assert layout.leaders == (0, 1, 3) and layout.node_of(4) == (1, 4) and layout.ranks == 5
    with pytest.raises(ValueError, match="split the ranks"):
        Layout.of([[0, 1], [3]])


def test_a_node_is_named_by_ina_node_then_torchruns_group_rank_then_the_host():
    assert node_name({"INA_NODE": "rack1-a", "GROUP_RANK": "3"}) == "INA_NODE=rack1-a"
    assert node_name({"GROUP_RANK": "3"}) == "GROUP_RANK=3"
    assert node_name({}).startswith("host=")


@pytest.mark.parametrize(
    "hierarchy, workers, environment, expected",
    [
        ("auto", 8, {"LOCAL_WORLD_SIZE": "4"}, True),  # torchrun: 2 nodes of 4
        ("auto", 4, {"LOCAL_WORLD_SIZE": "4"}, False),  # one node: nothing crosses between nodes
        ("auto", 8, {"LOCAL_WORLD_SIZE": "1"}, False),
        ("auto", 8, {}, False),  # not torchrun
        ("node", 4, {}, True),
        ("flat", 8, {"LOCAL_WORLD_SIZE": "4"}, False),
    ],
)
def test_auto_sums_by_node_when_torchrun_runs_several_ranks_on_each_of_several_nodes(hierarchy, workers, environment, expected):
    assert sums_by_node(hierarchy, workers, environment) is expected


def test_an_unknown_hierarchy_is_refused():
    with pytest.raises(ValueError, match=r"hierarchy must be one of \('auto', 'node', 'flat'\)"):
        THCState(process_group=FakeGroup(4), hierarchy="rack")


@pytest.mark.parametrize("transport", [SwitchTransport, PSTransport])
def test_more_nodes_than_the_protocol_takes_are_refused_at_start_saying_what_to_do(transport):
    codec = THCCodec(THCConfig())
    nodes = [[2 * n, 2 * n + 1] for n in range(33)]
    with pytest.raises(TransportError) as refused:
        HierarchicalTransport(transport(), nodes=nodes).attach(codec, FakeGroup(66))
    assert str(refused.value).startswith("33 nodes: the switch and the PS take at most 32 workers per job")
    assert "Put more ranks on each node (at most 32 nodes, of any number of ranks), or use transport='collective'" in str(refused.value)
    with pytest.raises(TransportError) as flat:
        THCState(process_group=FakeGroup(40), transport=transport(), hierarchy="flat")
    assert str(flat.value).startswith("40 workers: the switch and the PS take at most 32 per job")
    assert "THCState(hierarchy='node')" in str(flat.value)


def _emulate_nodes(rank: int, per_node: int, interleaved: bool, workers: int) -> None:
    """torchrun's variables for this rank's emulated node: contiguous ranks, or every n-th rank."""
    nodes = workers // per_node
    os.environ["GROUP_RANK"] = str(rank % nodes if interleaved else rank // per_node)
    os.environ["LOCAL_WORLD_SIZE"] = str(per_node)


def _model() -> torch.nn.Module:
    return mlp(seed=3)


def _train(rank: int, workers: int, per_node: int, interleaved: bool, options: dict, runs: list) -> dict:
    """Each run's parameters, this rank's bytes off the node per step, its layout and THC bucket sizes."""
    _emulate_nodes(rank, per_node, interleaved, workers)
    data = regression_problem()
    outcome = {}
    for transport, hierarchy in runs:
        model = _model()
        # Small buckets: several of them, each compressed (min_compression_elements is below them).
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.0002)
        state = thc_state(transport, options, hierarchy=hierarchy, **THC_OPTIONS)
        buckets = set()

        def hook(state, bucket, buckets=buckets):
            if state.iteration >= state.start_iter and bucket.buffer().numel() >= state.min_compression_elements:
                buckets.add(bucket.index())  # compressed
            return thc_hook(state, bucket)

        ddp.register_comm_hook(state, hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.2)
        for step in range(STEPS):
            batch = shard(step, rank, workers)
            optimizer.zero_grad()
            loss_on(ddp, data[0][batch], data[1][batch]).backward()
            optimizer.step()
        layout = state.transport.layout.nodes if isinstance(state.transport, HierarchicalTransport) else None
        outcome[transport, hierarchy] = ([p.detach().clone() for p in model.parameters()],
                                         state.transport.bytes_sent / (STEPS - 2), layout, sorted(buckets))  # fmt: skip
        dist.barrier()
        state.transport.close()
    return outcome


@pytest.mark.parametrize("per_node, interleaved, workers", [(4, False, 8), (3, True, 9)], ids=["2x4", "3x3-interleaved"])
def test_two_level_training_through_every_transport_is_bit_identical_to_the_flat_collective(
    aggregators, transport_options, per_node, interleaved, workers
):
    results = run_workers(_train, workers, per_node, interleaved, transport_options, RUNS, timeout=300)
    nodes = workers // per_node
    expected_nodes = tuple(tuple(range(n, workers, nodes)) if interleaved else tuple(range(n * per_node, (n + 1) * per_node))
                           for n in range(nodes))  # fmt: skip
    for rank, outcome in enumerate(results):
        reference, flat_bytes, flat_layout, buckets = outcome["collective", "flat"]
        assert flat_layout is None and len(buckets) == 3, buckets  # several compressed buckets
        for run in RUNS[1:]:
            params, sent, layout, _ = outcome[run]
            assert layout == expected_nodes, (run, layout)
            assert all(torch.equal(p, q) for p, q in zip(params, reference)), (rank, run)
            leader = any(rank == node[0] for node in expected_nodes)
            if not leader:
                assert sent == 0, (rank, run, sent)  # nothing leaves the node but through its leader
            elif run[0] == "collective":
                assert sent == flat_bytes > 0, (rank, sent, flat_bytes)  # one rank's bytes for the whole node
            else:
                assert sent > 0, (rank, run)
    assert aggregators.switch.jobs() == [] and aggregators.ps.jobs() == []  # the leaders' rank 0 deregistered


def _train_until_the_switch_dies(rank: int, workers: int) -> tuple[str, str, float]:
    """2 nodes of 2 ranks without failover to the PS; rank 0 hosts the switch and PS and stops the switch at step 4."""
    _emulate_nodes(rank, 2, False, workers)
    return train_until_an_aggregator_dies(rank, workers, "switch", 8, 4, "switch", hierarchy="node")


def test_a_dead_switch_stops_every_rank_of_every_node_with_a_transport_error():
    outcomes = run_workers(_train_until_the_switch_dies, 4, timeout=120)
    for rank, (kind, message, _) in enumerate(outcomes):
        assert kind == "TransportError", (rank, message)
        if rank in (0, 2):  # the leaders: the engine's own error
            assert "got no result within peer_timeout=1.0s from the switch at 127.0.0.1:" in message, message
        else:
            assert message.startswith(f"rank {rank - 1}, the leader of this rank's node, could not complete the reduction "
                                      "through SwitchTransport"), message  # fmt: skip


@pytest.mark.skipif(not os.environ.get("INA_SLOW"), reason="40 worker processes take minutes on a small machine: INA_SLOW=1 runs it")
def test_forty_ranks_on_five_nodes_train_through_the_switch_and_the_ps_bit_identical_to_the_flat_collective(
    aggregators, transport_options
):
    runs = [("collective", "flat"), ("switch", "node"), ("ps", "node")]
    results = run_workers(_train, 40, 8, False, transport_options, runs, timeout=1800)
    for rank, outcome in enumerate(results):
        reference = outcome["collective", "flat"][0]
        for run in runs[1:]:
            params, sent, layout, _ = outcome[run]
            assert len(layout) == 5 and all(torch.equal(p, q) for p, q in zip(params, reference)), (rank, run)
            assert (sent > 0) == (rank % 8 == 0), (rank, run, sent)
