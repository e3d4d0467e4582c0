"""Average job completion time (JCT) of three jobs contending for the switch's aggregators: esa, fcfs, atp and static.

    python -m benchmarks.contention [--seeds 3] [--pool 16] [--workers 8] [--jitter 0.1] [--priority intensity|las|remaining]
                                    [--switch-pps 0 2e7 5e6]

Three training jobs (compute, then one reduction, per iteration) share one switch whose
pool holds one window while the jobs' windows add up to three. Everything is simulated at
the packet level (ina.sim) with the real switch, PS and worker engines. Every policy runs
with the same parameters, seeds and priorities from one end-host policy (`--priority`); only the
switch's pool policy differs, and under `static` (SwitchML's fixed partitions) each job's window
is its partition: the largest power of two that gives every job an equal share of the pool.
docs/simulator.md, "Contention", explains the choices.
"""

from __future__ import annotations

import argparse
import os
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, fields, replace
from typing import Callable

import numpy as np

from ina.sim.cluster import PS_ADDR, Cluster, Hosts
from ina.sim.link import Link
from ina.sim.workload import TrainingLoop
from ina.transport.priority import AttainedServicePriority, IntensityPriority, PriorityPolicy, RemainingWorkPriority

GBPS = 1e9 / 8
"""Bytes per second in one Gb/s."""


@dataclass(frozen=True)
class Job:
    """A training job: `chunks` packets per reduction (its model), `compute` seconds per iteration."""

    name: str
    chunks: int
    compute: float
    iterations: int


@dataclass(frozen=True)
class Setup:
    """The deployment, the same for both policies (units: seconds, bytes, packets)."""

    link_gbps: float = 10.0        # every worker's link and the PS's link
    latency: float = 1e-6          # one way, host to switch
    frame_overhead: int = 66       # Ethernet + IP + UDP headers, preamble, gap
    words: int = 64                # K: Tofino's 64 words per pass
    pool: int = 16                 # aggregator slots: one window's worth
    window: int = 16               # per job: the bandwidth-delay product (4.4 us / 274 ns)
    workers: int = 8               # per job
    widths: tuple[int, ...] = ()   # workers of each job in turn, where they differ (else `workers` each)
    ps_pps: float = 5e6            # a DPDK-class software PS
    switch_pps: float = 0.0        # packets the switch handles a second; 0: line rate (a Tofino)
    coalesce: float = 0.5e-6       # receive batching at every host and the switch
    jitter: float = 0.1            # per-iteration compute time varies +-10%
    min_rto: float = 200e-6        # about 50 base RTTs
    initial_rto: float = 500e-6
    max_rto: float = 10e-3
    flush_delay: float = 200e-6    # the PS's FLUSH timer, scaled like min_rto
    time_constant: float = 1e-3    # the priority policy's rate window: a few iterations
    age_step: float = 100e-6       # +1 priority level per 100 us queued
    priority: str = "intensity"    # the end-host policy: intensity (ESA's), las (least attained service) or remaining (least work left)


JOBS = (
    # comm/compute at line rate: 2.2 (VGG-16-like), 0.8 (BERT-base-like), 0.36 (ResNet-50-like)
    Job("comm-heavy", chunks=400, compute=50e-6, iterations=10),
    Job("balanced", chunks=300, compute=100e-6, iterations=10),
    Job("compute-heavy", chunks=200, compute=150e-6, iterations=10),
)


@dataclass(frozen=True)
class Outcome:
    """One simulated run: each job's completion time and what the switch and the PS did."""

    jct: dict[str, float]
    events: dict[str, int]


POLICIES = ("esa", "fcfs", "atp", "static")
BASELINES = POLICIES[1:]
"""Each is shown as its JCT over esa's."""


def window(policy: str, setup: Setup, jobs: int) -> int:
    """A job's window: `setup.window`, or under `static` its equal partition of the pool (a power of two)."""
    if policy != "static":
        return setup.window
    share = min(setup.window, setup.pool // jobs)
    if share < 1:
        raise ValueError(f"a static pool of {setup.pool} slots cannot give {jobs} jobs a slot each")
    return 1 << (share.bit_length() - 1)


def run(policy: str, setup: Setup, jobs: tuple[Job, ...], seed: int) -> Outcome:
    """Run the jobs to completion (all start at 0) under the switch policy `policy`."""
    link = Link(bandwidth=setup.link_gbps * GBPS, latency=setup.latency)
    cluster = Cluster(
        words=setup.words, pool=setup.pool, policy=policy, seed=seed, frame_overhead=setup.frame_overhead,
        workers=Hosts(link, coalesce=setup.coalesce),
        ps_host=Hosts(link, processing=1 / setup.ps_pps, coalesce=setup.coalesce),
        switch_host=Hosts(processing=1 / setup.switch_pps if setup.switch_pps else 0.0, coalesce=setup.coalesce),
        engine=dict(min_rto=setup.min_rto, initial_rto=setup.initial_rto, max_rto=setup.max_rto, peer_timeout=1.0),
        ps_options=dict(flush_delay=setup.flush_delay),
    )
    loops: dict[str, list[TrainingLoop]] = {}
    for number, job in enumerate(jobs):
        width = workers_of(setup, number)
        rngs = iter(np.random.default_rng([seed, number, rank]) for rank in range(width))

        def loop(engine, job=job, rngs=rngs) -> TrainingLoop:
            return TrainingLoop(engine, iterations=job.iterations, compute=job.compute,
                                words=job.chunks * setup.words, jitter=setup.jitter, rng=next(rngs))

        cluster.add_job(number + 1, width, window(policy, setup, len(jobs)), wrap=loop, policy=lambda job=job: priority_policy(setup, job))
        loops[job.name] = [cluster.net.node(cluster.address(number, rank)) for rank in range(width)]
    every = [loop for group in loops.values() for loop in group]
    if not cluster.net.run_until(lambda: all(loop.finished or loop.engine.error for loop in every), timeout=10.0):
        raise RuntimeError("the jobs did not finish within 10 simulated seconds")
    for loop in every:
        if loop.engine.error is not None:
            raise loop.engine.error
    switch, ps = cluster.switch_core.counters(), cluster.ps.counters()
    resent = sum((Counter(loop.engine.counters) for loop in every), Counter())["resent"]
    offered = cluster.net.stats()[PS_ADDR]["down"]["busy_s"] / cluster.net.now  # > 1: a queue outlives the run
    events = {"preempted": switch["preempted"], "collisions": switch["collision"], "completed at PS": ps["completed"],
              "resent": resent, "PS downlink load %": round(100 * offered)}
    return Outcome({name: max(loop.finished_at for loop in group) for name, group in loops.items()}, events)


def workers_of(setup: Setup, number: int) -> int:
    """The workers of job `number` (from 0)."""
    return setup.widths[number] if setup.widths else setup.workers


def priority_policy(setup: Setup, job: Job) -> PriorityPolicy:
    """A worker's end-host priority policy for `job`, its time scales the simulation's."""
    if setup.priority == "las":
        return AttainedServicePriority(age_step=setup.age_step)
    if setup.priority == "remaining":  # the job's work: every iteration's reduction, 4 bytes a word
        return RemainingWorkPriority(total_bytes=job.iterations * job.chunks * setup.words * 4, age_step=setup.age_step)
    return IntensityPriority(time_constant=setup.time_constant, age_step=setup.age_step)


def _run(args: tuple[str, Setup, int]) -> tuple[str, Setup, int, Outcome]:
    policy, setup, seed = args
    return policy, setup, seed, run(policy, setup, JOBS, seed)


def wire_bytes(setup: Setup) -> int:
    """A full DATA on the wire: K words, ina's 20-byte header and the framing."""
    return setup.words * 4 + 20 + setup.frame_overhead


def offered_pps(setup: Setup, jobs: int) -> float:
    """DATA packets a second that every job's workers send at line rate together: what a switch must keep up with."""
    return sum(workers_of(setup, number) for number in range(jobs)) * setup.link_gbps * GBPS / wire_bytes(setup)


def print_jct_table(outcomes: list[tuple[str, Setup, int, Outcome]], seeds: int) -> None:
    """Each job's JCT under each policy (mean over the seeds), and the ratios to esa."""

    header = "".join(f"{p + ' JCT (us)':>16}" for p in POLICIES)
    print(f"{'job (mean of %d seeds)' % seeds:<26}{header}" + "".join(f"{p + '/esa':>11}" for p in BASELINES))
    rows = [(job.name, {p: mean_over(outcomes, p, lambda o, name=job.name: o.jct[name]) for p in POLICIES}) for job in JOBS]
    rows.append(("average", {p: sum(row[p] for _, row in rows) / len(rows) for p in POLICIES}))
    for name, row in rows:
        print(f"{name:<26}" + "".join(f"{row[p] * 1e6:>16.0f}" for p in POLICIES) + "".join(f"{row[p] / row['esa']:>11.2f}" for p in BASELINES))
    print("\nper run:")
    for policy, _, seed, outcome in outcomes:
        avg = sum(outcome.jct.values()) / len(outcome.jct)
        print(f"  {policy} seed {seed}: average JCT {avg * 1e6:.0f} us; " + ", ".join(f"{k} {v}" for k, v in outcome.events.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="runs per policy (seeds 0..n-1), averaged")
    for f in fields(Setup):
        if f.name in ("pool", "window", "workers", "jitter", "link_gbps", "min_rto"):
            parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    parser.add_argument("--widths", type=lambda text: tuple(int(w) for w in text.split(",")), default=(),
                        help="workers of each job, comma-separated (e.g. 6,4,2): jobs of different widths")
    parser.add_argument("--priority", choices=("intensity", "las", "remaining"), default=Setup.priority, help="the end-host priority rule")
    parser.add_argument("--switch-pps", type=float, nargs="+", default=[Setup.switch_pps],
                        help="packets a second the switch handles (0: line rate); several: one table per speed and a summary")
    parser.add_argument("--processes", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    if args.widths and len(args.widths) != len(JOBS):
        parser.error(f"--widths names {len(args.widths)} jobs' workers: give one for each of the {len(JOBS)} jobs")
    base = replace(Setup(), pool=args.pool, window=args.window, workers=args.workers, widths=args.widths, jitter=args.jitter,
                   link_gbps=args.link_gbps, min_rto=args.min_rto, priority=args.priority)
    setups = [replace(base, switch_pps=pps) for pps in args.switch_pps]
    print("setup:", ", ".join(f"{k}={v}" for k, v in asdict(base).items() if k != "switch_pps"))
    for number, job in enumerate(JOBS):
        comm = job.chunks * wire_bytes(base) / (base.link_gbps * GBPS)
        print(f"job {job.name}: {job.chunks} chunks per reduction ({comm * 1e6:.0f} us at line rate), "
              f"compute {job.compute * 1e6:.0f} us, {job.iterations} iterations, {workers_of(base, number)} workers")
    print(f"static: a partition of {window('static', base, len(JOBS))} slots per job (the window under static)")
    print(f"the workers at line rate offer the switch {offered_pps(base, len(JOBS)) / 1e6:.1f} Mpps")
    started = time.perf_counter()
    tasks = [(policy, setup, seed) for setup in setups for seed in range(args.seeds) for policy in POLICIES]
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        outcomes = list(pool.map(_run, tasks))
    print(f"simulated {len(tasks)} runs in {time.perf_counter() - started:.0f} s")
    by_setup = {setup: [o for o in outcomes if o[1] == setup] for setup in setups}
    for setup, runs in by_setup.items():
        print(f"\nswitch: {speed(setup)}")
        print_jct_table(runs, args.seeds)
    if len(setups) > 1:
        print_speed_summary(by_setup)


def speed(setup: Setup) -> str:
    """The switch's packet rate in words, and as a share of what the workers offer at line rate."""
    if not setup.switch_pps:
        return "line rate"
    return f"{setup.switch_pps / 1e6:g} Mpps ({setup.switch_pps / offered_pps(setup, len(JOBS)):.0%} of the offered rate)"


def mean_over(runs: list[tuple[str, Setup, int, Outcome]], policy: str, of: Callable[[Outcome], float]) -> float:
    """The mean of `of` over the runs of one policy."""
    values = [of(o) for p, _, _, o in runs if p == policy]
    return sum(values) / len(values)


def print_speed_summary(by_setup: dict[Setup, list[tuple[str, Setup, int, Outcome]]]) -> None:
    """Average JCT per policy at each switch speed: where ESA's gain holds and where the switch's own rate erases it."""
    print(f"\n{'switch':<40}" + "".join(f"{p + ' avg JCT (us)':>20}" for p in POLICIES)
          + "".join(f"{p + '/esa':>11}" for p in BASELINES) + f"{'esa preempted':>15}{'resent esa/fcfs':>17}")
    for setup, runs in by_setup.items():
        jct = {p: mean_over(runs, p, lambda o: sum(o.jct.values()) / len(o.jct)) for p in POLICIES}
        resent = "/".join(f"{mean_over(runs, p, lambda o: o.events['resent']):.0f}" for p in ("esa", "fcfs"))
        print(f"{speed(setup):<40}" + "".join(f"{jct[p] * 1e6:>20.0f}" for p in POLICIES)
              + "".join(f"{jct[p] / jct['esa']:>11.2f}" for p in BASELINES)
              + f"{mean_over(runs, 'esa', lambda o: o.events['preempted']):>15.0f}{resent:>17}")


if __name__ == "__main__":
    main()
