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

RACKS = [[0, 3], [1, 4, 5], [2]]  # ranks interleaved over the racks, one rack of one worker


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
