"""Racks: one racked THC job three ways on one network: two levels, one switch at the spine's place, the collective.

    sudo python -m benchmarks.racks [testbed/racks.yaml] [--variants two_level,one_switch,collective] [--seed S]
                                    [--out DIR] [--docs docs/racks.md]
    python -m benchmarks.racks --from DIR [--docs docs/racks.md]     # the table again, from a finished run

Why one `ina testbed` run: the run file's first switch job becomes one job per variant, each a phase of its own
(so nothing else crosses the uplinks while it trains), on the same network, links, hosts, seed and steps; the
variants differ in how the job aggregates alone: `two_level` (each rack's leaf sums its workers and sends one
stream up, the spine sums the leaves), `one_switch` (every worker sends to the spine, its only switch:
jobs[].levels 1) and `collective` (THC over gloo, no switch). The table gives each variant's median step time,
the bytes a step each uplink carried up and down (the mean over the racks, ina.testbed.uplinks), two levels' up
and down bytes over one switch's, and the SHA-256 of the final parameters, which every variant must share.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.publish import write_docs
from ina.testbed import spec

VARIANTS = {"two_level": {"transport": "switch", "levels": 2}, "one_switch": {"transport": "switch", "levels": 1},
            "collective": {"transport": "collective"}}  # fmt: skip
"""How each variant's job differs from the run file's switch job."""


def variants_run(document: dict[str, Any], variants: list[str], seed: int | None) -> dict[str, Any]:
    """The run file's document with its first switch job once per variant, a phase each, in `variants`' order."""
    jobs = [job for job in document["jobs"] if job.get("transport") == "switch" and job.get("hook", "thc") == "thc"]
    if not jobs or not document.get("topology", {}).get("racks"):
        raise SystemExit("the run file needs topology.racks and a THC job with transport switch (testbed/racks.yaml)")
    job = {k: v for k, v in jobs[0].items() if k not in ("name", "levels", "phase", "start")} | ({"seed": seed} if seed is not None else {})
    made = [job | VARIANTS[name] | {"name": name, "phase": phase} for phase, name in enumerate(variants)]
    return document | {"name": f"{document.get('name', 'racks')}-variants", "jobs": made}


def run_testbed(document: dict[str, Any], out: Path) -> None:
    """One `ina testbed` run of `document` (validated first), into `out`/run."""
    path = out / "variants.json"
    path.write_text(json.dumps(document, indent=2))
    spec.load(path)  # a bad document stops here, naming the field
    command = [sys.executable, "-m", "ina.cli", "testbed", str(path), "--out", str(out / "run")]
    print("$", " ".join(command[1:]), flush=True)
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ)
    (out / "testbed.log").write_text(done.stdout)
    if done.returncode != 0:
        raise SystemExit(f"the testbed run failed ({done.returncode}):\n{done.stdout[-3000:]}")


def table(results: dict[str, Any]) -> list[str]:
    """The side-by-side table of the variants (markdown), and per rack what each uplink carried."""
    rows = {row["job"]: row for row in results["jobs"]}
    base = rows.get("one_switch")
    digests = {row["params_sha256"] for row in rows.values()}
    lines = ["| variant | s/step (median) | up B/step per uplink | down B/step per uplink | up, down vs one switch | parameters (SHA-256) |",
             "|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for name, row in rows.items():
        up, down = (row["uplink_up_bytes_per_step"], row["uplink_down_bytes_per_step"])
        versus = f"{up / base['uplink_up_bytes_per_step']:.2f}, {down / base['uplink_down_bytes_per_step']:.2f}" if base else "-"
        lines.append(f"| {name} | {row['step_time_median']:.3f} | {up:,.0f} | {down:,.0f} | {versus} | {row['params_sha256'][:12]} |")
    lines.append("")
    lines.append("Per rack, bytes a step up / down its uplink: " + "; ".join(
        f"{name}: " + ", ".join(f"rack {u['rack']} {u['up']:,} / {u['down']:,}" for u in row["uplinks"]) for name, row in rows.items()))  # fmt: skip
    lines.append("")
    lines.append("Every variant ended with the same parameters, bit for bit." if len(digests) == 1 else
                 f"**The variants' parameters differ** ({len(digests)} digests).")  # fmt: skip
    return lines


def describe(run: spec.Run, load: str) -> str:
    """The setting the table was measured in, for the docs."""
    job = run.jobs[0]
    return (f"`{run.name}`: racks {[list(r) for r in run.racks]}, host links {run.link.bw:g} Mbit/s, uplinks {run.uplink_link.bw:g} Mbit/s, "
            f"{run.link.loss:g}% loss; {job.workers} workers, MLP {list(job.hidden)}, {job.steps} steps (median over the steps after "
            f"warm-up), seed {job.seed}, pool {run.switch.pool}, K = {run.switch.words}; {load}")  # fmt: skip


def publish(lines: list[str], out: Path, docs: str | None) -> None:
    """Print the table, keep it beside the run (table.md) and, with `docs`, between that file's markers."""
    text = "\n".join(lines)
    print(text)
    (out / "table.md").write_text(text + "\n")
    if docs:
        write_docs(Path(docs), lines)


def measure(args: argparse.Namespace) -> Path:
    """Run the variants the arguments name; the run's folder (its load as it began in load.txt, for the docs)."""
    import yaml

    variants = args.variants.split(",")
    if any(v not in VARIANTS for v in variants) or len(set(variants)) != len(variants):
        raise SystemExit(f"--variants {args.variants}: name distinct ones of {list(VARIANTS)}")
    document = variants_run(yaml.safe_load(Path(args.run_file).read_text()), variants, args.seed)
    out = Path(args.out or f"testbed-results/racks-{document['name']}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "load.txt").write_text(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores as the run began\n")
    run_testbed(document, out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_file", nargs="?", default="testbed/racks.yaml")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, in phase order (default %(default)s)")
    parser.add_argument("--seed", type=int, help="override the job's seed")
    parser.add_argument("--out", help="results folder (default testbed-results/racks-NAME-UTCTIME)")
    parser.add_argument("--from", dest="done", help="tabulate a finished run's folder instead of running")
    parser.add_argument("--docs", help="put the table between the markers of this file (e.g. docs/racks.md)")
    args = parser.parse_args()
    out = Path(args.done) if args.done else measure(args)
    run = spec.load(out / "variants.json")
    publish([describe(run, (out / "load.txt").read_text().strip()), "", *table(json.loads((out / "run" / "results.json").read_text()))],
            out, args.docs)


if __name__ == "__main__":
    main()
