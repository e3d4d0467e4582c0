"""Time to accuracy on the testbed: every compressor on a convnet and a transformer, two link speeds, several seeds.

    sudo python -m benchmarks.time_to_accuracy [--workloads convnet transformer] [--links 100 1000]
                                               [--seeds 0 1] [--out DIR] [--docs docs/time_to_accuracy.md]
    python -m benchmarks.time_to_accuracy --tables-from DIR [DIR ...] [--docs ...]   # the tables again, run nothing

Each (workload, link, seed) is one `ina testbed` run of testbed/tta_WORKLOAD.yaml with the link's bandwidth
replaced: one job per compressor, each in a phase of its own. `--jobs` runs some of the file's jobs only (say fp32
with them: the speed-ups are over fp32 of the same study); tables from several studies take each job's rows from
the last study that ran it, and say which command gave which rows. The table per workload gives per method and
link the mean over the seeds of the time its test accuracy (the transformer: its test loss) first met the
file's target, that time relative to fp32's, the final accuracy (loss), the bytes each worker's interface
sent per step and the median step time; the plot, the times to target side by side per link. `--docs`
replaces the tables between the markers of that file, so that the docs hold this command's numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional, Sequence

from benchmarks.esa_study import run_testbed
from benchmarks.publish import write_docs
from ina.testbed import spec



COMMAND = "command.txt"
"""A study folder's file holding the command that ran it, for the tables' footnote."""


def run_file(workload: str, bw: float, out: Path, jobs: Sequence[str] = ()) -> Path:
    """testbed/tta_WORKLOAD.yaml with every link at `bw` Mbit/s and only the `jobs` named (none: all), written (as
    JSON, which YAML reads) under `out`."""
    import yaml

    document = yaml.safe_load(Path(f"testbed/tta_{workload}.yaml").read_text())
    document.setdefault("topology", {}).setdefault("link", {})["bw"] = bw
    if jobs:
        unknown = set(jobs) - {job["name"] for job in document["jobs"]}
        if unknown:
            raise SystemExit(f"--jobs: testbed/tta_{workload}.yaml has no job {sorted(unknown)}; its jobs: "
                             + ", ".join(job["name"] for job in document["jobs"]))  # fmt: skip
        document["jobs"] = [job for job in document["jobs"] if job["name"] in jobs]
    spec.parse(document)  # refuse a bad file before any run
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"tta_{workload}_{bw:g}M.yaml"
    path.write_text(json.dumps(document, indent=1))
    return path


def rows_of(folder: Path) -> list[dict[str, Any]]:
    """Every job row of every run under `folder` (its results.json files), each with the run's link speed and seed."""
    rows = []
    for path in sorted(folder.glob("**/results.json")):
        run = json.loads((path.parent / "run.json").read_text())
        for row in json.loads(path.read_text())["jobs"]:
            rows.append({**row, "bw": run["link"]["bw"], "seed": run["jobs"][0]["seed"], "workload": run["name"]})
    return rows


def latest_rows(studies: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows of several studies of one workload, in the first's order of jobs, each tagged with its study's index and
    whether a later study ran its job again (`superseded`: not shown, but its fp32 is the speed-ups' base in its study)."""
    rows = []
    for index, study in enumerate(studies):
        later = {row["job"] for again in studies[index + 1 :] for row in again}
        rows += [{**row, "study": index, "superseded": row["job"] in later} for row in study]
    order = list(dict.fromkeys(row["job"] for row in rows))
    return sorted(rows, key=lambda row: order.index(row["job"]))


def shown(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows a table shows: none that a later study superseded."""
    return [row for row in rows if not row.get("superseded")]


def mean(values: list[float]) -> Optional[float]:
    return statistics.mean(values) if values else None


def summarize(rows: list[dict[str, Any]]) -> dict[tuple[str, float], dict[str, Any]]:
    """Per (method, link), a method being a job of the run file (PowerSGD's ranks are two): the seeds' mean time to
    target (of those that met it, with how many did), the final metric, bytes sent per worker per step and median
    step time, and fp32's mean time to target over this one's, fp32's of the same study (latest_rows): ratios side by
    side in one run."""
    cells: dict[tuple[str, float], dict[str, Any]] = {}
    visible = shown(rows)
    for method, bw in dict.fromkeys((r["job"], r["bw"]) for r in visible):
        mine = [r for r in visible if (r["job"], r["bw"]) == (method, bw)]
        reached = [r["time_to_target"] for r in mine if r["time_to_target"] is not None]
        final = [r["test_loss"] if r.get("test_loss") is not None else r["accuracy"] for r in mine]
        cells[(method, bw)] = {"tta": mean(reached), "reached": len(reached), "runs": len(mine), "final": mean(final),
                               "mb_per_step": mean([r["tx_bytes_per_worker_step"] / 1e6 for r in mine]),
                               "step_time": mean([r["step_time_median"] for r in mine]), "loss_metric": mine[0].get("test_loss") is not None,
                               "study": mine[0].get("study", 0)}  # fmt: skip
    for (method, bw), cell in cells.items():
        base = mean([r["time_to_target"] for r in rows if (r["job"], r["bw"], r.get("study", 0)) == ("fp32", bw, cell["study"])
                     and r["time_to_target"] is not None])  # fmt: skip
        cell["speedup"] = base / cell["tta"] if base and cell["tta"] and cell["reached"] == cell["runs"] else None
    return cells


def table(workload: str, target: float, rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of one workload: a row per method, a group of columns per link speed."""
    cells = summarize(rows)
    links = sorted({bw for _, bw in cells})
    methods = list(dict.fromkeys(method for method, _ in cells))  # the shown rows' jobs, in their order
    loss = next(iter(cells.values()))["loss_metric"]
    final = "loss" if loss else "accuracy"
    seeds = sorted({r["seed"] for r in rows})
    lines = [f"**{workload}** (target: test {final} {'<=' if loss else '>='} {target:g}; seeds {', '.join(map(str, seeds))}; "
             "times in s from the start of training, the mean over the seeds that reached the target; speed-up: fp32's time over "
             "this one's)", "",
             "| method | " + " | ".join(f"{bw:g} Mbit/s: to target | speed-up | test {final} | MB/step | s/step" for bw in links) + " |",
             "|---|" + "---:|---:|---:|---:|---:|" * len(links)]  # fmt: skip
    for method in methods:
        parts = []
        for bw in links:
            c = cells.get((method, bw))
            if c is None:
                parts.append("- | - | - | - | -")
                continue
            tta = "not reached" if c["tta"] is None else f"{c['tta']:.1f}" + ("" if c["reached"] == c["runs"] else f" ({c['reached']}/{c['runs']})")
            speedup = "-" if c["speedup"] is None else f"{c['speedup']:.2f}"
            value = f"{c['final']:.3f}" if loss else f"{c['final']:.1%}"
            parts.append(f"{tta} | {speedup} | {value} | {c['mb_per_step']:.2f} | {c['step_time']:.3f}")
        lines.append(f"| {method} | " + " | ".join(parts) + " |")
    return lines


def plot(workload: str, rows: list[dict[str, Any]], path: Path) -> None:
    """Time to target, the final test accuracy (loss) and the bytes sent per step, per method, a bar per link speed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = summarize(rows)
    links = sorted({bw for _, bw in cells})
    methods = list(dict.fromkeys(method for method, _ in cells))  # the shown rows' jobs, in their order
    final = "test loss" if next(iter(cells.values()))["loss_metric"] else "test accuracy"
    panels = (("tta", "time to target (s; no bar: not reached)"), ("final", f"final {final}"), ("mb_per_step", "MB sent per worker per step"))
    figure, axes = plt.subplots(1, len(panels), figsize=(16, 4.5))
    width = 0.8 / len(links)
    for ax, (key, label) in zip(axes, panels):
        for i, bw in enumerate(links):
            values = [(cells.get((m, bw)) or {}).get(key) or 0 for m in methods]
            ax.bar([n + i * width for n in range(len(methods))], values, width, label=f"{bw:g} Mbit/s")
        ax.set_xticks([n + width * (len(links) - 1) / 2 for n in range(len(methods))], methods, rotation=30, ha="right")
        ax.set(ylabel=label, title=f"{workload}: {label.split(' (')[0]}")
    if final == "test accuracy":
        axes[1].set_ylim(0.9, 1.0)
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def tabulate(studies: list[Path], workloads: list[str], plots: Path) -> list[str]:
    """The tables of every workload studied under the `studies` folders (a job's rows from the last that ran it), their
    plots under `plots`, and the commands that made them."""
    lines: list[str] = []
    studied = []
    for workload in workloads:
        rows = latest_rows([rows_of(out / workload) for out in studies])
        if not rows:
            continue
        studied.append(workload)
        target = spec.load(f"testbed/tta_{workload}.yaml").jobs[0].target
        lines += table(workload, target, rows) + [""]
        plots.mkdir(parents=True, exist_ok=True)
        plot(workload, rows, plots / f"tta_{workload}.png")
    loads = [json.loads(p.read_text())[0] for out in studies for w in studied for p in (out / w).glob("*/load.json")]
    if loads:
        lines.append(f"The machine's 1-minute load average as each run began: {min(loads):.1f} to {max(loads):.1f} (2 cores).")
    commands = [f"`{(out / COMMAND).read_text().strip()}`" for out in studies]
    again = "".join(f"; the rows of the jobs it ran again from {c}" for c in commands[1:])
    return lines + ["From " + commands[0] + again + (" (each speed-up over fp32 of the study that measured the row)." if again else ".")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["convnet", "transformer"], choices=("convnet", "transformer"))
    parser.add_argument("--links", type=float, nargs="+", default=[100, 1000], help="link speeds, Mbit/s")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--out", help="results folder (default testbed-results/tta-UTCTIME)")
    parser.add_argument("--jobs", nargs="+", default=[], help="only these jobs of the run files (default: all)")
    parser.add_argument("--tables-from", nargs="+", default=[],
                        help="make the tables from these finished studies' folders (a job's rows from the last); run nothing")
    parser.add_argument("--docs", help="put the tables between the markers of this file (e.g. docs/time_to_accuracy.md)")
    parser.add_argument("--plots", default="testbed/plots", help="where the plots go")
    args = parser.parse_args()
    studies = [Path(folder) for folder in args.tables_from]
    if not studies:
        out = Path(args.out or f"testbed-results/tta-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        out.mkdir(parents=True, exist_ok=True)
        (out / COMMAND).write_text(" ".join(["sudo python -m benchmarks.time_to_accuracy", *sys.argv[1:]]) + "\n")
        studies = [out]
        for workload in args.workloads:
            for bw in args.links:
                for seed in args.seeds:
                    folder = out / workload / f"{bw:g}M-seed{seed}"
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / "load.json").write_text(json.dumps(os.getloadavg()))  # what else ran on the machine
                    run_testbed(str(run_file(workload, bw, out / "runs", args.jobs)), folder, seed, "priority")
    lines = tabulate(studies, args.workloads, Path(args.plots))
    print("\n".join(lines))
    (studies[-1] / "tables.md").write_text("\n".join(lines) + "\n")
    if args.docs:
        write_docs(Path(args.docs), lines)


if __name__ == "__main__":
    main()
