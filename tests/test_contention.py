"""The packet simulator's contention benchmark (benchmarks/contention.py): without contention the pool policy
changes nothing, and jobs of different widths run with their own workers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from benchmarks.contention import Job, Setup, run, workers_of

JOBS = (Job("long", chunks=64, compute=50e-6, iterations=3), Job("short", chunks=16, compute=80e-6, iterations=2))


def test_without_contention_esa_and_fcfs_run_the_same_packets_to_the_same_time():
    roomy = replace(Setup(), pool=64, window=16, workers=3, jitter=0.5, priority="remaining")  # windows of 32 in 64 slots
    esa, fcfs = (run(policy, roomy, JOBS, seed=1) for policy in ("esa", "fcfs"))
    assert esa.events["preempted"] == esa.events["collisions"] == fcfs.events["collisions"] == 0
    assert esa.events["completed at PS"] == fcfs.events["completed at PS"] == 0
    assert esa.jct == fcfs.jct


def test_under_contention_esa_preempts_and_fcfs_collides():
    tight = replace(Setup(), pool=8, window=8, workers=3, jitter=0.5, priority="remaining")  # windows of 16 in 8 slots
    esa, fcfs = (run(policy, tight, JOBS, seed=1) for policy in ("esa", "fcfs"))
    assert esa.events["preempted"] > 0 and fcfs.events["preempted"] == 0 and fcfs.events["collisions"] > 0
    assert esa.jct["short"] < fcfs.jct["short"]  # the job with less work left ranks first and gains


@pytest.mark.parametrize("widths", [(2, 5), (5, 2)])
def test_jobs_of_different_widths(widths):
    setup = replace(Setup(), widths=widths)
    assert [workers_of(setup, number) for number in range(2)] == list(widths)
    outcome = run("esa", replace(setup, pool=64), JOBS, seed=0)
    assert set(outcome.jct) == {"long", "short"} and all(t > 0 for t in outcome.jct.values())
