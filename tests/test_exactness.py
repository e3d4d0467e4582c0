"""End to end: worker engines, the software switch and the PS in the simulator deliver, to every
worker, exactly the sums a collective all_reduce gives, whatever the path and the faults.

Faults are on every link, both ways: the workers', the PS's and the switch's, so DATA,
RESULTs and their copies to the PS, PARTIALs, FLUSHes, STATUS and FETCH are all dropped,
duplicated and reordered. A RESULT lost by a worker and by the PS is fetched from another
worker (tests/test_exactness_fetch.py makes that case exact).
"""

from __future__ import annotations

import numpy as np
import pytest
from exactness_support import THC_TABLE, Reduction, assert_exact, collect, indices, lanes, norms, submit_all, packet_path  # noqa: F401 (each test on both paths)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.protocol import pack_fields, unpack_fields
from ina.sim import Faults, Link
from ina.sim.cluster import Cluster, Hosts
from ina.transport.priority import FixedPriority, IntensityPriority

K = 8


def cluster(*, policy: str = "esa", pool: int = 4, drop: float = 0.0, duplicate: float = 0.0, reorder: float = 0.0,
            seed: int = 0, switch: bool = True, peer_timeout: float = 1.0, result_copies: bool = True) -> Cluster:
    """100 MB/s links of 10 us, every one with the same faults; the switch and the PS take what
    arrives within 20 us as one batch."""
    faults = Faults(drop=drop, duplicate=duplicate, reorder=reorder, max_delay=5e-5)
    return Cluster(
        words=K, pool=pool, policy=policy, seed=seed, switch=switch, result_copies=result_copies,
        workers=Hosts(Link(bandwidth=1e8, latency=1e-5, faults=faults)),
        ps_host=Hosts(Link(bandwidth=1e8, latency=1e-5, faults=faults), coalesce=2e-5),
        switch_host=Hosts(Link(faults=faults), coalesce=2e-5),
        engine=dict(min_rto=2e-4, initial_rto=5e-4, max_rto=5e-3, peer_timeout=peer_timeout),
        ps_options=dict(flush_delay=5e-4),
    )


@pytest.mark.parametrize("policy", ["esa", "fcfs", "atp"])
@pytest.mark.parametrize("drop", [0.0, 0.01, 0.1])
def test_three_jobs_contending_for_four_slots_get_exact_sums(policy, drop):
    three_jobs_contending_for_four_slots(cluster(policy=policy, drop=drop, duplicate=0.02, reorder=0.05, seed=int(drop * 100)))


@pytest.mark.parametrize("drop", [0.01, 0.1])
def test_without_result_copies_a_lost_result_is_fetched_and_every_sum_is_exact(drop):
    net = cluster(drop=drop, duplicate=0.02, reorder=0.05, seed=int(drop * 100), result_copies=False)
    three_jobs_contending_for_four_slots(net)
    assert net.ps.counters()["result_copies"] == 0 and net.ps.counters()["fetch_sent"] > 0


def three_jobs_contending_for_four_slots(net: Cluster) -> None:
    """Three jobs of fixed priorities, windows 2-4, on `net`'s pool of 4: every worker gets the exact sums, some
    chunks complete in the switch and some meet another job's chunk."""
    rng = np.random.default_rng(7)
    plan = {}
    for job, workers, window, level in ((10, 3, 2, 200), (11, 2, 3, 100), (12, 4, 4, 0)):
        net.add_job(job, workers, window, policy=lambda level=level: FixedPriority(level))
        plan[job] = [norms(rng, workers), lanes(rng, workers, 4 * K * 5 + 3), norms(rng, workers), lanes(rng, workers, 40)]
    submit_all(net, plan)
    assert_exact(collect(net, plan, timeout=5.0), plan)
    counters = net.switch_core.counters()
    assert counters["completed"] > 0 and counters["collision"] + counters["preempted"] > 0


@pytest.mark.parametrize("drop", [0.0, 0.01, 0.1])
def test_ps_only_indices_are_looked_up_and_summed_exactly(drop):
    net = cluster(switch=False, drop=drop, duplicate=0.02, reorder=0.05, seed=3)
    rng = np.random.default_rng(11)
    plan = {}
    for job, workers in ((1, 4), (2, 8)):
        net.add_job(job, workers, window=4, index_bits=4, table=THC_TABLE)
        plan[job] = [norms(rng, workers), indices(rng, workers, chunks=5, words=K), indices(rng, workers, chunks=1, words=K)]
    submit_all(net, plan)
    assert_exact(collect(net, plan, timeout=5.0), plan)
    assert net.ps.counters()["fetch_sent"] == 0  # PS-only workers keep no results, and need not


def test_the_switch_and_ps_only_paths_agree_bit_for_bit():
    """The same table values through the switch (lanes) and as indices to the PS give the same sums."""
    rng = np.random.default_rng(5)
    workers, chunks = 4, 3
    reduction = indices(rng, workers, chunks, K)
    table = np.array(THC_TABLE, dtype=np.uint32)
    per_chunk = K * 8
    values = [table[unpack_fields(w, 4, chunks * per_chunk)] for w in reduction.words]
    as_lanes = [np.concatenate([pack_fields(v[c * per_chunk:(c + 1) * per_chunk], 8) for c in range(chunks)])
                for v in values]
    results = {}
    for switch in (True, False):
        net = cluster(switch=switch, drop=0.05, seed=1)
        net.add_job(1, workers, window=2, **({} if switch else dict(index_bits=4, table=THC_TABLE)))
        words = tuple(as_lanes) if switch else reduction.words
        plan = {1: [Reduction("sum", words, reduction.expected, index_bits=0 if switch else 4)]}
        submit_all(net, plan)
        results[switch] = collect(net, plan, timeout=5.0)
        assert_exact(results[switch], plan)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(results[True].values(), results[False].values()))


def test_sequence_numbers_wrap_without_losing_a_chunk():
    net = cluster(drop=0.05, seed=2)
    rng = np.random.default_rng(2)
    net.add_job(1, 3, window=4, first_seq=2**32 - 5)
    plan = {1: [lanes(rng, 3, 4 * K * 12)]}
    submit_all(net, plan)
    assert_exact(collect(net, plan, timeout=5.0), plan)


jobs = st.lists(
    st.tuples(
        st.integers(1, 4),                               # workers
        st.integers(1, 4),                               # window (<= pool, clipped below)
        st.one_of(st.none(), st.integers(0, 255)),       # fixed priority, or None: the default policy
        st.lists(st.sampled_from(["max", "small", "large"]), min_size=1, max_size=3),
        st.floats(0.0, 2e-4),                            # how much later than the first this job starts
    ),
    min_size=1, max_size=3,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    jobs=jobs,
    policy=st.sampled_from(["esa", "fcfs", "atp"]),
    pool=st.sampled_from([1, 2, 4, 8]),
    drop=st.sampled_from([0.0, 0.01, 0.1, 0.2]),
    duplicate=st.sampled_from([0.0, 0.05]),
    reorder=st.sampled_from([0.0, 0.2]),
    seed=st.integers(0, 2**16),
)
def test_any_schedule_of_contending_jobs_gives_every_worker_the_exact_sums(jobs, policy, pool, drop, duplicate, reorder, seed):
    net = cluster(policy=policy, pool=pool, drop=drop, duplicate=duplicate, reorder=reorder, seed=seed)
    rng = np.random.default_rng(seed)
    plan, start = {}, {}
    for number, (workers, window, level, kinds, delay) in enumerate(jobs):
        job = 100 + number
        policy_factory = (lambda: IntensityPriority(time_constant=1e-3, age_step=1e-4)) if level is None else (lambda level=level: FixedPriority(level))
        net.add_job(job, workers, min(window, pool), policy=policy_factory)
        sizes = {"small": K + 1, "large": 4 * K * 3}
        plan[job] = [norms(rng, workers) if kind == "max" else lanes(rng, workers, sizes[kind]) for kind in kinds]
        start.update({(job, rank): delay + float(rng.uniform(0, 5e-5)) for rank in range(workers)})
    submit_all(net, plan, start)
    assert_exact(collect(net, plan, timeout=10.0), plan)


@settings(max_examples=400, deadline=None)
@given(
    workers=st.integers(1, 8),
    window=st.integers(1, 4),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    drop=st.sampled_from([0.0, 0.01, 0.1, 0.2]),
    reorder=st.sampled_from([0.0, 0.2]),
    seed=st.integers(0, 2**16),
)
def test_any_ps_only_schedule_gives_exact_sums(workers, window, chunks, drop, reorder, seed):
    net = cluster(switch=False, drop=drop, duplicate=0.05, reorder=reorder, seed=seed)
    rng = np.random.default_rng(seed)
    net.add_job(1, workers, window, index_bits=4, table=THC_TABLE)
    plan = {1: [norms(rng, workers)] + [indices(rng, workers, c, K) for c in chunks]}
    submit_all(net, plan, {(1, r): float(rng.uniform(0, 1e-4)) for r in range(workers)})
    assert_exact(collect(net, plan, timeout=10.0), plan)
    # PS-only workers keep no results: the PS's ring answers every resend (protocol section 8).
    assert net.ps.counters()["fetch_sent"] == 0
