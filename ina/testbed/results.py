"""What a run leaves for its reader, beside each process's log and JSON lines:

- ``steps.csv``: one row per job, policy and step: wall time, step time, rank 0's loss, test
  accuracy (a language model's test loss) where evaluated, bytes sent and received per worker (the mean over the ranks, as
  their interfaces counted them), bytes the hook handed to its transport and where its reductions
  went at the step's end (switch, ps, collective);
- ``jobs.csv`` and ``results.json``: one row per job and policy: the method, median step time
  once compression is on, bytes per worker per step, final loss and accuracy, JCT, the SHA-256 of
  the final parameters, the target and when it was first met (``time_to_target``, ``steps_to_target``), and the stretches of steps on each path (switch, ps, collective); ``results.json`` adds the switch's and the PS's counters per policy and
  the packets the link loss dropped (and where links duplicate or reorder, those they sent twice and those their
  slow queues held back);
- ``loss_vs_time.png`` (loss against wall time per job and method), ``jct.png`` (JCT per job and
  policy), ``step_time.png`` (median step time per job) and, for jobs with a target,
  ``time_to_target.png``, when matplotlib is installed (the ``testbed`` extra).
"""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any, Iterable

from ina.testbed import uplinks
from ina.testbed.spec import Job, Run

STEP_COLUMNS = ("policy", "job", "method", "step", "wall", "step_time", "loss", "accuracy", "test_loss",
                "tx_bytes_per_worker", "rx_bytes_per_worker", "hook_bytes_per_worker", "path")  # fmt: skip
JOB_COLUMNS = ("policy", "job", "method", "workers", "phase", "steps", "parameters", "step_time_median", "tx_bytes_per_worker_step",
               "hook_bytes_per_worker_step", "final_loss", "accuracy", "start", "jct", "params_sha256",
               "test_loss", "target", "time_to_target", "steps_to_target",
               "levels", "uplink_up_bytes_per_step", "uplink_down_bytes_per_step")  # fmt: skip
UPLINK_COLUMNS = ("policy", "job", "method", "levels", "step", "rack", "up_bytes", "down_bytes")

SWITCH_COUNTERS = ("aggregated", "completed", "preempted", "collision", "redirected", "flushed", "resend_forwarded")
LEVEL_COUNTERS = ("sent_up", "descended")
"""A leaf's, where its switch counts them (docs/protocol.md, section 10)."""
LINK_COUNTERS = {"link_loss_drops": "the loss rules dropped {} packets", "link_queue_drops": "full link queues dropped {} packets",
                 "link_socket_drops": "full UDP socket buffers dropped {} packets",
                 "link_duplicated": "the duplication rules sent {} packets twice",
                 "link_reordered": "the reorder rules held back {} packets in the slow queues"}  # fmt: skip
"""How the summary tells each of the links' counters in results.json (packets, summed over the interfaces)."""
PS_COUNTERS = ("pieces", "completed", "duplicate", "results_replayed", "status_sent", "flush_sent")
"""The counters the summary prints (results.json has all of them)."""
METRICS = "metrics.jsonl"
"""Each round's scrapes of the switch's and the PS's /metrics (ina.testbed.scrape)."""
HELD = 'ina_switch_job_held{job="'
"""The samples of the slots each job holds at the switch."""


def read_steps(job_dir: Path, workers: int) -> list[list[dict[str, Any]]]:
    """Each rank's step records (what it wrote so far)."""
    ranks = []
    for rank in range(workers):
        path = job_dir / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        ranks.append([json.loads(line) for line in lines if line.endswith("}")])
    return ranks


def progress(job_dir: Path, job: Job) -> str:
    """One line on a running job, from rank 0's records."""
    steps = read_steps(job_dir, 1)[0]
    if not steps:
        return "starting"
    last = steps[-1]
    recent = [s["step_time"] for s in steps[-10:]]
    return f"step {last['step'] + 1}/{job.steps}, loss {last['loss']:.3f}, {statistics.median(recent):.2f} s/step"


def measured_from(job: Job) -> int:
    """The first step whose time counts: after plain-allreduce warm-up and one step more (first-use costs)."""
    first = job.warm_up + 1 if job.hook in ("thc", "powersgd", "topk") else 1
    return min(first, job.steps - 1)


def write(out: Path, run: Run, rounds: Iterable[str], outcomes: list[dict[str, Any]], counters: dict[str, Any]) -> dict[str, Any]:
    jobs = {j.name: j for j in run.jobs}
    step_rows, job_rows, uplink_rows = [], [], []
    for outcome in outcomes:
        job, job_dir = jobs[outcome["job"]], Path(outcome["dir"])
        ranks = read_steps(job_dir, job.workers)
        summary = json.loads((job_dir / "summary.json").read_text())
        for step, record in enumerate(ranks[0]):
            each = [r[step] for r in ranks if len(r) > step]
            step_rows.append({"policy": outcome["policy"], "job": job.name, "method": job.method, "step": step,
                              "wall": record["wall"], "step_time": record["step_time"], "loss": record["loss"],
                              "accuracy": record.get("accuracy", ""), "test_loss": record.get("test_loss", ""),
                              "tx_bytes_per_worker": statistics.mean(r["tx_bytes"] for r in each),
                              "rx_bytes_per_worker": statistics.mean(r["rx_bytes"] for r in each),
                              "hook_bytes_per_worker": statistics.mean(r.get("hook_bytes", 0) for r in each),
                              "path": record.get("path") or ""})  # fmt: skip
        first = measured_from(job)
        measured = [r[first:] for r in ranks]
        job_rows.append({
            "policy": outcome["policy"], "job": job.name, "method": job.method, "workers": job.workers, "phase": job.phase,
            "steps": job.steps, "parameters": summary["parameters"],
            "step_time_median": statistics.median(s["step_time"] for s in measured[0]),
            "tx_bytes_per_worker_step": statistics.mean(statistics.mean(s["tx_bytes"] for s in r) for r in measured),
            "hook_bytes_per_worker_step": statistics.mean(statistics.mean(s.get("hook_bytes", 0) for s in r) for r in measured),
            "final_loss": summary["final_loss"], "accuracy": summary["accuracy"], "start": job.start, "jct": outcome["jct"],
            "params_sha256": summary["params_sha256"], "test_loss": summary.get("test_loss"),
            **time_to_target(job, ranks[0]),
            "paths": path_segments(ranks[0]),
        })  # fmt: skip
        if run.racks:
            job_rows[-1] |= uplink_fields(run, job, job_dir, ranks[0], first)
            uplink_rows += [{"policy": outcome["policy"], "job": job.name, "method": job.method, "levels": job_rows[-1]["levels"],
                             "step": step, "rack": each["rack"], "up_bytes": round(each["up"]), "down_bytes": round(each["down"])}
                            for step, racks in enumerate(job_rows[-1].pop("uplinks_per_step")) for each in racks]  # fmt: skip
    _csv(out / "steps.csv", STEP_COLUMNS, step_rows)
    _csv(out / "jobs.csv", JOB_COLUMNS, job_rows)
    if run.racks:
        _csv(out / "uplinks.csv", UPLINK_COLUMNS, uplink_rows)
    result = {"run": run.name, "rounds": list(rounds), "jobs": job_rows, "counters": counters}
    (out / "results.json").write_text(json.dumps(result, indent=2))
    names = {(o["policy"], json.loads((Path(o["dir"]) / "summary.json").read_text()).get("job_id")): o["job"] for o in outcomes}
    result["plots"] = plot(out, step_rows, job_rows) + plot_occupancy(out, list(rounds), names)
    return result


def uplink_fields(run: Run, job: Job, job_dir: Path, steps: list[dict[str, Any]], first: int) -> dict[str, Any]:
    """A racked run's job: how it aggregated (`levels`: 2 or 1 for a switch job), the bytes per measured step that each
    rack's uplink carried up and down (`uplinks`), their mean over the racks its hosts are in, and `uplinks_per_step`
    (per step, per rack) for uplinks.csv; nothing where the round has no samples (ina.testbed.uplinks)."""
    samples = uplinks.load(job_dir.parent / uplinks.SAMPLES)
    fields: dict[str, Any] = {"levels": job.levels if job.uses_switch else None, "uplinks": [], "uplinks_per_step": []}
    if len(samples) < 2 or not steps[first:]:
        return fields
    began = uplinks.began(job_dir, job.phase, job.start)
    fields["uplinks"] = [{k: round(v) for k, v in rack.items()} for rack in uplinks.per_measured_step(samples, began, steps[first:])]
    fields["uplinks_per_step"] = uplinks.per_step(samples, began, steps)
    used = [fields["uplinks"][r] for r in sorted({run.rack_of(host) for host in job.hosts})]
    for way in ("up", "down"):
        fields[f"uplink_{way}_bytes_per_step"] = statistics.mean(rack[way] for rack in used)
    return fields


def time_to_target(job: Job, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The target, and the wall time (since training began) and number of steps at the end of the first step
    whose evaluation met it; None for both where no evaluation did (or the job has no target)."""
    for record in steps:
        if job.metric in record and job.reached(record[job.metric]):
            return {"target": job.target, "time_to_target": record["wall"], "steps_to_target": record["step"] + 1}
    return {"target": job.target, "time_to_target": None, "steps_to_target": None}


def path_segments(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rank 0's steps cut where the path of its reductions changed (switch, ps, collective): each
    stretch's first step, length, median step time, and its first step's time (what the change cost)."""
    segments: list[dict[str, Any]] = []
    for record in steps:
        path = record.get("path")
        if path is None:
            continue
        if not segments or segments[-1]["path"] != path:
            segments.append({"path": path, "from_step": record["step"], "times": []})
        segments[-1]["times"].append(record["step_time"])
    return [{"path": s["path"], "from_step": s["from_step"], "steps": len(s["times"]), "step_time_median": statistics.median(s["times"]),
             "first_step_time": s["times"][0]} for s in segments]  # fmt: skip


def occupancy(path: Path) -> dict[int, list[tuple[float, float]]]:
    """Per job id, (seconds since the round's services started, slots it held at the switch or the spine) at each scrape."""
    series: dict[int, list[tuple[float, float]]] = {}
    if not path.exists():
        return series
    for line in path.read_text().splitlines():
        scrape = json.loads(line)
        if scrape.get("role") not in ("switch", "spine"):  # a racked run's: the spine's slots
            continue
        for name, value in scrape["samples"].items():
            if name.startswith(HELD):
                series.setdefault(int(name[len(HELD) :].split('"', 1)[0]), []).append((scrape["t"], value))
    return series


def plot_occupancy(out: Path, rounds: list[str], names: dict[tuple[str, int | None], str]) -> list[str]:
    """Slots held per job against time, one panel per switch policy side by side (none without scrapes or
    matplotlib). A panel says so when no scrape caught a job registered: a short job can fit between two."""
    if not any((out / policy / METRICS).exists() for policy in rounds):
        return []
    held = {policy: occupancy(out / policy / METRICS) for policy in rounds}
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    figure, axes = plt.subplots(1, len(rounds), figsize=(6 * len(rounds), 4.5), sharey=True, squeeze=False)
    for ax, policy in zip(axes[0], rounds):
        for job, points in sorted(held[policy].items()):
            ax.step([t for t, _ in points], [v for _, v in points], where="post", label=names.get((policy, job), f"job {job}"))
        ax.set(xlabel="seconds since the switch started", title=f"{policy}: slots held per job")
        if held[policy]:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, "no scrape caught a job registered", transform=ax.transAxes, ha="center")
    axes[0][0].set_ylabel("aggregator slots held (sampled)")
    return [_save(figure, out / "slot_occupancy.png")]


def table(result: dict[str, Any]) -> list[str]:
    """The summary the CLI prints."""
    lines = [f"{'policy':7} {'job':14} {'method':16} {'s/step':>7} {'tx B/worker/step':>17} {'loss':>7} {'acc':>6} {'start s':>7} {'JCT s':>7}"
             f" {'target s':>8}"]  # fmt: skip
    for row in result["jobs"]:
        accuracy = f"{row['accuracy']:.1%}" if row["accuracy"] is not None else "-"
        if row.get("test_loss") is not None:
            accuracy = f"{row['test_loss']:.3f}"  # a language model's test loss
        reached = "-" if row.get("time_to_target") is None else f"{row['time_to_target']:.2f}"
        lines.append(f"{row['policy']:7} {row['job']:14} {row['method']:16} {row['step_time_median']:7.3f} "
                     f"{row['tx_bytes_per_worker_step']:17,.0f} {row['final_loss']:7.3f} {accuracy:>6} {row['start']:7.1f} {row['jct']:7.2f}"
                     f" {reached:>8}")  # fmt: skip
    for policy, services in result["counters"].items():
        if policy.startswith("link_"):
            lines.append(LINK_COUNTERS.get(policy, policy + ": {} packets").format(sum(services.values())))
            continue
        for name, values in services.items():
            keys = PS_COUNTERS if name == "ps" else SWITCH_COUNTERS + tuple(k for k in LEVEL_COUNTERS if k in values)
            if values and "." not in name:  # an instance a fault stopped (switch.1) is in results.json
                lines.append(f"[{policy}] {name}: " + ", ".join(f"{k} {values.get(k, 0)}" for k in keys))
    for row in result["jobs"]:
        if row.get("uplinks"):
            lines.append(f"[{row['policy']}] {row['job']} ({_levels(row['levels'])}) bytes a step on each rack's uplink, up/down: "
                         + ", ".join(f"rack {u['rack']} {u['up']:,}/{u['down']:,}" for u in row["uplinks"]))  # fmt: skip
    for row in result["jobs"]:
        if len(row.get("paths", [])) > 1:  # the job changed paths: what each cost
            lines.append(f"[{row['policy']}] {row['job']} paths: " + "; ".join(
                f"{s['path']} from step {s['from_step']} ({s['steps']} steps, {s['step_time_median']:.3f} s/step, "
                f"first {s['first_step_time']:.2f} s)" for s in row["paths"]))  # fmt: skip
    for policy in result["rounds"]:
        rows = [r for r in result["jobs"] if r["policy"] == policy]
        lines.append(f"[{policy}] mean JCT {statistics.mean(r['jct'] for r in rows):.2f} s, longest "
                     f"{max(r['jct'] for r in rows):.2f} s over {len(rows)} jobs")  # fmt: skip
    if result.get("plots"):
        lines.append("plots: " + ", ".join(result["plots"]))
    return lines


def _levels(levels: int | None) -> str:
    return {2: "leaves, then the spine", 1: "the spine alone"}.get(levels or 0, "no switch")


def plot(out: Path, steps: list[dict[str, Any]], jobs: list[dict[str, Any]]) -> list[str]:
    """The PNG plots; none (and an empty list) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    figure, axes = plt.subplots(figsize=(8, 5))
    for key in dict.fromkeys((r["policy"], r["job"], r["method"]) for r in steps):
        rows = [r for r in steps if (r["policy"], r["job"], r["method"]) == key]
        losses = [r["loss"] for r in rows]
        smooth = [statistics.mean(losses[max(0, i - 9) : i + 1]) for i in range(len(losses))]
        axes.plot([r["wall"] for r in rows], smooth, label=f"{key[1]} ({key[2]}, {key[0]})")
    axes.set(xlabel="wall time since training began (s)", ylabel="training loss (rank 0, mean of 10 steps)",
             title="Loss against wall time")  # fmt: skip
    axes.legend(fontsize="small")
    made.append(_save(figure, out / "loss_vs_time.png"))
    policies = list(dict.fromkeys(r["policy"] for r in jobs))
    names = list(dict.fromkeys(r["job"] for r in jobs))
    figure, axes = plt.subplots(figsize=(8, 5))
    width = 0.8 / len(policies)
    for i, policy in enumerate(policies):
        by_job = {r["job"]: r["jct"] for r in jobs if r["policy"] == policy}
        axes.bar([n + i * width for n in range(len(names))], [by_job.get(n, 0) for n in names], width, label=policy)
    axes.set_xticks([n + width * (len(policies) - 1) / 2 for n in range(len(names))], names)
    axes.set(ylabel="job completion time (s)", title="JCT per job and switch policy")
    axes.legend()
    made.append(_save(figure, out / "jct.png"))
    figure, axes = plt.subplots(figsize=(8, 5))
    labels = [f"{r['job']}\n{r['method']}\n{r['policy']}" for r in jobs]
    axes.bar(range(len(jobs)), [r["step_time_median"] for r in jobs])
    axes.set_xticks(range(len(jobs)), labels, fontsize="small")
    axes.set(ylabel="median step time (s)", title="Step time per job")
    made.append(_save(figure, out / "step_time.png"))
    if any(r.get("target") is not None for r in jobs):
        made.append(plot_time_to_target(out, steps, jobs, plt))
    return made


def plot_time_to_target(out: Path, steps: list[dict[str, Any]], jobs: list[dict[str, Any]], plt: Any) -> str:
    """Left, each job's evaluations against wall time and its target; right, the time each reached it (none: not reached)."""
    figure, (curves, bars) = plt.subplots(1, 2, figsize=(13, 5))
    metric = "test_loss" if any(r.get("test_loss") is not None for r in jobs) else "accuracy"
    for row in jobs:
        points = [r for r in steps if (r["policy"], r["job"]) == (row["policy"], row["job"]) and r[metric] != ""]
        curves.plot([r["wall"] for r in points], [r[metric] for r in points], marker=".", label=f"{row['job']} ({row['method']})")
    for target in {r["target"] for r in jobs if r.get("target") is not None}:
        curves.axhline(target, color="black", linestyle="--", linewidth=0.8)
    curves.set(xlabel="wall time since training began (s)", ylabel=metric.replace("_", " "), title=f"Test {metric.replace('test_', '')} and the target")
    curves.legend(fontsize="small")
    labels = [f"{r['job']}\n{r['policy']}" for r in jobs]
    bars.bar(range(len(jobs)), [r["time_to_target"] or 0 for r in jobs])
    for i, row in enumerate(jobs):
        if row.get("time_to_target") is None:
            bars.text(i, 0, "not\nreached", ha="center", va="bottom", fontsize="small")
    bars.set_xticks(range(len(jobs)), labels, fontsize="small", rotation=45, ha="right")
    bars.set(ylabel="time to target (s)", title="Time to the target")
    return _save(figure, out / "time_to_target.png")


def _save(figure: Any, path: Path) -> str:
    import matplotlib.pyplot as plt

    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path.name


def _csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """The `columns` of `rows` (what does not fit a cell, such as a job's paths, is in results.json)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
