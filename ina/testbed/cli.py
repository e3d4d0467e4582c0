"""`ina testbed RUN.yaml`: run DDP jobs on a Mininet network through BMv2 or the software switch.

Registering the subcommand imports neither torch nor Mininet.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ina.transport.priority import POLICIES as PRIORITY_POLICIES

SOFTWARE_ONLY = ("max_pps", "latency")
"""Run file settings of the software switch alone, dropped when --target names another."""
DESCRIPTION = ("Run the jobs of a run file (testbed/*.yaml) on an emulated network (Mininet, no Open vSwitch): worker hosts, "
               "a PS host and a switch node (software or BMv2) on shaped links. Needs root. Writes CSV, JSON and PNG results.")  # fmt: skip


def register(subcommands: Any) -> None:
    parser = subcommands.add_parser("testbed", help="run DDP jobs on a Mininet network (root)", description=DESCRIPTION)
    parser.add_argument("run_file", metavar="RUN.yaml", help="the run: topology, links, switch, jobs (testbed/README.md)")
    parser.add_argument("--out", help="results folder (default testbed-results/NAME-UTCTIME)")
    parser.add_argument("--target", choices=("software", "bmv2"), help="override the run file's switch.target")
    parser.add_argument("--policy", help="override the run file's switch.policy: one policy, or several separated by commas")
    parser.add_argument("--queues", choices=("priority", "fifo"), help="override the run file's switch.queues")
    parser.add_argument("--pool", type=int, help="override the run file's switch.pool")
    parser.add_argument("--result-copies", action=argparse.BooleanOptionalAction, help="override the run file's switch.result_copies")
    parser.add_argument("--seed", type=int, help="override every job's seed (repeated runs of one run file)")
    parser.add_argument("--levels", type=int, choices=(1, 2),
                        help="override every switch job's levels in a racked run: 2 (leaves, then the spine) or 1 (the spine alone)")
    parser.add_argument("--priority-policy", choices=tuple(PRIORITY_POLICIES),
                        help="override every thc switch or PS job's jobs[].priority_policy (a fixed jobs[].priority still wins)")
    parser.add_argument("--check", action="store_true", help="validate the run file and the machine, run nothing")
    parser.set_defaults(run=run)


class _Stop(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP: stop the run, cleaning up."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    from ina.testbed import spec
    from ina.testbed.network import TestbedUnavailable, why_not

    try:
        plan = spec.load(args.run_file)
        if args.target:
            dropped = [name for name in SOFTWARE_ONLY if getattr(plan.switch, name) and args.target != "software"]
            for name in dropped:
                print(f"ina testbed: --target {args.target}: switch.{name} is the software switch's alone; running without it",
                      file=sys.stderr)  # fmt: skip
            plan = dataclasses.replace(plan, switch=dataclasses.replace(plan.switch, target=args.target, **dict.fromkeys(dropped, 0.0)))
        plan = spec.overridden(plan, policy=args.policy, queues=args.queues, pool=args.pool, result_copies=args.result_copies,
                               seed=args.seed, levels=args.levels, priority_policy=args.priority_policy)  # fmt: skip
    except spec.SpecError as error:
        print(f"ina testbed: {error}", file=sys.stderr)
        return 2
    reason = why_not(plan)
    if reason:
        print(f"ina testbed: cannot run {args.run_file}: {reason}", file=sys.stderr)
        return 2
    if args.check:
        print(f"ina testbed: {args.run_file} is valid and this machine can run it")
        return 0
    from ina.testbed.orchestrate import execute

    out = Path(args.out or f"testbed-results/{plan.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    # SIGINT too: a run started in the background (where SIGINT is ignored) still stops on it.
    previous = {s: signal.signal(s, _raise_stop) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        execute(plan, out)
    except KeyboardInterrupt as stop:
        print(f"ina testbed: stopped ({stop}); every process and interface of the run was removed", file=sys.stderr)
        return 130
    except TestbedUnavailable as error:
        print(f"ina testbed: {error}", file=sys.stderr)
        return 2
    except RuntimeError as error:  # a process that failed, the run's timeout, the network
        print(f"ina testbed: run failed: {error}\n(everything the run created was removed; logs in {out})", file=sys.stderr)
        return 1
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    print(f"ina testbed: results in {out}")
    return 0
