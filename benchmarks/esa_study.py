"""ESA's ablation on the testbed: pool policy (esa, fcfs, atp, static) x egress queues (priority, fifo), several seeds.

    sudo python -m benchmarks.esa_study [testbed/esa_stragglers.yaml] [--seeds 0 1 2] [--queues priority fifo]
                                        [--policy esa,fcfs,atp,static] [--target software|bmv2] [--pool P]
                                        [--no-result-copies] [--priority-policy intensity|las|remaining] [--out DIR]

Each (seed, queues) pair is one `ina testbed` run of the run file, whose rounds are the policies: every policy
gets the same network, queues, windows, jobs and seed, so a row differs from another in its policy alone, and a
column pair in its queues alone; the rounds' order rotates by the seed (seed s starts with the run file's policy s
mod their number), so no policy always runs first and a seed's rounds run in one order however a study groups them.
The table gives per policy and queues the mean over the seeds of: the mean JCT, the JCT of the top-priority job (the
one the jobs' priority rule ranks first: under ESA's intensity rule the most reduction bytes per second of compute,
under least remaining work the least work), the PS's received packets (its load), the switch's preemptions and
collisions; then each baseline's mean JCT over esa's, seed by seed. Every job must end with the same parameters (sha256)
under every policy and queue setting of a seed: the study stops with the mismatch otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ina.switch.config import POLICIES, QUEUES
from ina.testbed import spec
from ina.transport.priority import POLICIES as PRIORITY_POLICIES


@dataclass(frozen=True)
class Round:
    """One policy's round of one run: its jobs' JCTs and what the switch and the PS counted."""

    seed: int
    queues: str
    policy: str
    jct: dict[str, float]
    params: dict[str, str]
    ps_rx: int
    preempted: int
    collisions: int

    @property
    def mean_jct(self) -> float:
        return statistics.mean(self.jct.values())


def top_job(run: spec.Run, results: dict[str, Any]) -> str:
    """The job the jobs' priority rule ranks first: under ESA's intensity rule the most gradient bytes per second of
    its own compute; under least remaining work (or attained service, as the jobs start) the least work."""
    parameters = {row["job"]: row["parameters"] for row in results["jobs"]}
    if all(job.priority_policy in ("remaining", "las") for job in run.jobs if job.uses_switch):
        return min(run.jobs, key=lambda job: parameters[job.name] * job.steps).name
    return max(run.jobs, key=lambda job: parameters[job.name] / max(job.compute, 1e-3)).name


def rounds_of(results: dict[str, Any], seed: int, queues: str) -> list[Round]:
    """The rounds of one testbed run, from its results.json."""
    rounds = []
    for policy in results["rounds"]:
        rows = [row for row in results["jobs"] if row["policy"] == policy]
        counters = results["counters"][policy]
        switch, ps = counters.get("switch", {}), counters.get("ps", {})
        rounds.append(Round(seed, queues, policy, {r["job"]: r["jct"] for r in rows}, {r["job"]: r["params_sha256"] for r in rows},
                            ps.get("rx", 0), switch.get("preempted", 0), switch.get("collision", 0)))  # fmt: skip
    return rounds


def run_testbed(run_file: str, out: Path, seed: int, queues: str, **overrides: Any) -> dict[str, Any]:
    """One `ina testbed` run (its rounds: the policies) with the study's overrides, `ina testbed`'s options by name
    (`pool=64`, `result_copies=False`; None or "": the run file's); its results.json."""
    command = [sys.executable, "-m", "ina.cli", "testbed", run_file, "--out", str(out), "--seed", str(seed), "--queues", queues]
    for option, value in overrides.items():
        flag = option.replace("_", "-")
        if isinstance(value, bool):
            command.append(f"--{flag}" if value else f"--no-{flag}")
        elif value not in (None, ""):
            command += [f"--{flag}", str(value)]
    print("$", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "testbed.log").write_text(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"the testbed run failed ({done.returncode}):\n{done.stdout[-3000:]}")
    return json.loads((out / "results.json").read_text())


def in_turn(policies: tuple[str, ...], turn: int) -> str:
    """The policies rotated by `turn`, comma-separated: each run of a study starts with another policy, so that no
    policy always has the first round (a fresh machine) or the last."""
    shift = turn % len(policies)
    return ",".join(policies[shift:] + policies[:shift])


def check_exact(rounds: list[Round]) -> None:
    """Every job of a seed ends with the same parameters under every policy and queue setting."""
    for seed in sorted({r.seed for r in rounds}):
        digests: dict[str, set[str]] = {}
        for r in (r for r in rounds if r.seed == seed):
            for job, digest in r.params.items():
                digests.setdefault(job, set()).add(digest)
        differing = {job: sorted(d) for job, d in digests.items() if len(d) > 1}
        if differing:
            raise SystemExit(f"seed {seed}: jobs ended with different parameters across policies or queues: {differing}")


def table(rounds: list[Round], top: str) -> list[str]:
    """The ablation table: means over seeds per (queues, policy), and each baseline's JCT over esa's."""
    policies = [policy for policy in POLICIES if any(r.policy == policy for r in rounds)]  # esa first, whichever ran first
    lines = [f"{'queues':8} {'policy':7} {'mean JCT s':>10} {f'{top} JCT s':>14} {'PS rx pkts':>11} {'preempted':>10} "
             f"{'collisions':>10} {'/esa mean':>10} {'/esa top':>9}  per seed (mean JCT / esa's)"]  # fmt: skip
    for queues in dict.fromkeys(r.queues for r in rounds):
        for policy in policies:
            mine = [r for r in rounds if (r.queues, r.policy) == (queues, policy)]
            esa = {r.seed: r for r in rounds if (r.queues, r.policy) == (queues, "esa")}
            ratios = [m.mean_jct / esa[m.seed].mean_jct for m in mine if m.seed in esa]
            top_ratios = [m.jct[top] / esa[m.seed].jct[top] for m in mine if m.seed in esa]
            mean = lambda values: statistics.mean(values) if values else float("nan")  # noqa: E731
            lines.append(f"{queues:8} {policy:7} {mean([m.mean_jct for m in mine]):10.2f} {mean([m.jct[top] for m in mine]):14.2f} "
                         f"{mean([m.ps_rx for m in mine]):11.0f} {mean([m.preempted for m in mine]):10.0f} "
                         f"{mean([m.collisions for m in mine]):10.0f} {mean(ratios):10.2f} {mean(top_ratios):9.2f}  "
                         + " ".join(f"{r:.2f}" for r in ratios))  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_file", nargs="?", default="testbed/esa_stragglers.yaml")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--queues", nargs="+", choices=QUEUES, default=list(QUEUES))
    parser.add_argument("--policy", default="", help="the policies, comma-separated (default: the run file's)")
    parser.add_argument("--target", choices=("software", "bmv2"), help="override the run file's switch.target")
    parser.add_argument("--pool", type=int, help="override the run file's switch.pool (larger than every window: no contention)")
    parser.add_argument("--result-copies", action=argparse.BooleanOptionalAction, help="override the run file's switch.result_copies")
    parser.add_argument("--priority-policy", choices=tuple(PRIORITY_POLICIES), help="override the jobs' end-host priority policy")
    parser.add_argument("--out", help="results folder (default testbed-results/study-NAME-UTCTIME)")
    args = parser.parse_args()
    plan = spec.overridden(spec.load(args.run_file), policy=args.policy or None, pool=args.pool, result_copies=args.result_copies,
                           priority_policy=args.priority_policy)  # fmt: skip
    out = Path(args.out or f"testbed-results/study-{plan.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    rounds: list[Round] = []
    top = ""
    started = time.monotonic()
    for seed in args.seeds:
        for queues in args.queues:
            results = run_testbed(args.run_file, out / f"seed{seed}-{queues}", seed, queues, policy=in_turn(plan.switch.policies, seed), target=args.target,
                                  pool=args.pool, result_copies=args.result_copies, priority_policy=args.priority_policy)  # fmt: skip
            top = top or top_job(plan, results)
            rounds += rounds_of(results, seed, queues)
    check_exact(rounds)
    print(f"\n{plan.name}: {len(args.seeds)} seeds x {len(args.queues)} queue settings x {len(plan.switch.policies)} policies "
          f"on {args.target or plan.switch.target}, pool {plan.switch.pool}, {'' if plan.switch.result_copies else 'no '}result "
          f"copies, in {time.monotonic() - started:.0f} s; every job bit-identical across them")  # fmt: skip
    lines = table(rounds, top)
    print("\n".join(lines))
    (out / "study.txt").write_text("\n".join(lines) + "\n")
    (out / "study.json").write_text(json.dumps([r.__dict__ for r in rounds], indent=1))


if __name__ == "__main__":
    main()
