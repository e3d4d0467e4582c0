"""The `static` pool policy (docs/protocol.md, sections 4 and 5): a partition per job, chunks within
it, and a data plane that never sees two jobs in one slot."""

from __future__ import annotations

import numpy as np
import pytest
from control_support import spec
from switch_support import Rig, job_spec, path  # noqa: F401 (path: the fixture running a test on both cores)

from ina.sim.cluster import Cluster
from ina.switch.state import Jobs


def test_partitions_are_disjoint_aligned_powers_of_two_and_a_full_pool_says_what_is_free():
    table = Jobs(16, "static")
    placed = [(e.slot_base, e.span, e.slots) for e in (table.add(spec(job, window=w)) for job, w in [(1, 5), (2, 4), (3, 3)])]
    assert placed == [(0, 8, 8), (8, 4, 4), (12, 4, 4)]
    with pytest.raises(ValueError, match="no free partition of 2 slots.*0 of 16 slots are free.*deregister a job first"):
        table.add(spec(4, window=2))
    table.remove(2)
    with pytest.raises(ValueError, match="largest free partition holds 4: register a window of at most 4"):
        table.add(spec(4, window=5))
    assert table.add(spec(4, window=1)).slot_base == 8
    assert table.add(spec(5, window=2)).slot_base == 10
    assert [e.to_json()["span"] for e in table.entries.values()] == [8, 4, 1, 2]


@pytest.mark.parametrize("policy", ["esa", "fcfs"])
def test_a_shared_pool_gives_a_window_a_partition_while_one_is_free_and_else_the_whole_pool(policy):
    table = Jobs(16, policy)
    placed = [(e.slot_base, e.span, e.slots) for e in (table.add(spec(job, window=w)) for job, w in [(1, 5), (2, 4), (3, 3)])]
    assert placed == [(0, 8, 5), (8, 4, 4), (12, 4, 3)]  # windows that fit beside each other never meet
    crowded = table.add(spec(4, window=4))  # no free partition: it slides over the whole pool, where it overlaps least
    assert crowded.span is None and "span" not in crowded.to_json() and crowded.slots == 4
    table.remove(1)
    assert table.add(spec(5, window=2)).span is None  # a job over the whole pool leaves no partition free
    whole = Jobs(16, policy).add(spec(1, window=16))
    assert (whole.slot_base, whole.span) == (0, None)


def test_a_static_job_cycles_through_its_own_partition_and_slot_checks_use_its_span(path):
    rig = Rig(pool=16, words=4, policy="static", path=path)
    answers = [rig.core.register(job_spec(job, workers=2, window=4)) for job in (1, 2)]
    assert [(a["slot_base"], a["span"]) for a in answers] == [(0, 4), (4, 4)]
    rig.specs = {1: job_spec(1, workers=2, window=4), 2: job_spec(2, workers=2, window=4)}
    rig.bases = {1: 0, 2: 4}
    for seq in (0, 5, 2**32 - 1):  # seq 5 -> slot 1 of job 1's partition; across the wrap: slot 3
        for job in (1, 2):
            slot = answers[job - 1]["slot_base"] + seq % 4
            out = rig.send(*(rig.data(job, rank, seq, slot=slot, prio=200 * (job - 1)) for rank in (0, 1)))
            assert len(out) == 3, (job, seq)  # RESULT to both workers and the PS
    assert rig.send(rig.data(1, 0, 6, slot=6)) == []  # (0 + 6) mod 16 is job 2's, not (0 + 6 mod 4)
    counters = rig.core.counters()
    assert (counters["completed"], counters["bad_slot"], counters["collision"], counters["preempted"]) == (6, 1, 0, 0)


def test_three_jobs_under_static_never_collide_and_every_sum_is_exact():
    cluster = Cluster(words=4, pool=16, policy="static")
    for job in (1, 2, 3):
        cluster.add_job(job, workers=3, window=4)
    for index, (job, engines) in enumerate(cluster.jobs.items()):
        for rank, engine in enumerate(engines):
            words = np.arange(40, dtype=np.uint32) + job * 10 + rank  # 10 chunks

            def submit(now, engine=engine, words=words):
                engine.submit(words, lane_bits=8, now=now)
                return engine.tick(now)

            cluster.net.invoke(cluster.address(index, rank), submit)
    sums = {(job, rank): [] for job, engines in cluster.jobs.items() for rank in range(len(engines))}

    def finished() -> bool:
        for (job, rank), got in sums.items():
            got += [words.tolist() for _, words in cluster.jobs[job][rank].completed()]
        return all(sums.values())

    assert cluster.net.run_until(finished, timeout=1.0)
    for (job, rank), got in sums.items():
        assert got == [(3 * np.arange(40) + 3 * job * 10 + 3).tolist()]
    counters = cluster.switch_core.counters()
    assert (counters["collision"], counters["preempted"], counters["completed"]) == (0, 0, 30)
    assert cluster.ps.counters()["completed"] == 0
