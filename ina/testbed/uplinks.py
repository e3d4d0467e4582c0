"""The bytes each uplink of a racked run carried, each way, per step of a job.

Why this way: the uplinks are what a rack's workers share, and the point of aggregating at the leaves
is that a job sends one stream up each of them instead of one per worker. No process in the leaves
can count them per step (the workers, who know the steps, live in other namespaces), so a thread of
the orchestrator reads the leaf end of every uplink (``/proc/PID/net/dev`` of the leaf's shell shows
that namespace's counters: nothing is started in it) every `INTERVAL` seconds, on the machine's
monotonic clock, into the round's ``uplinks.jsonl``. The workers log when each step ended on the same
clock (their phase's go time, their ``start``, plus ``wall``), so the bytes of a stretch of steps are the
counters' growth between its ends, interpolated between the two samples around each end.

`up` is what the leaf sent to the spine (its end's tx), `down` what it received from it (rx): packets a
lossy uplink or a full queue dropped were never sent, so neither counts them. Whatever crossed an
uplink while a job trained counts for it, so read a job's bytes where it ran alone (a phase of its own).
"""

from __future__ import annotations

import json
import threading
import time
from bisect import bisect_left
from pathlib import Path
from typing import Any, Sequence

SAMPLES = "uplinks.jsonl"
INTERVAL = 0.05
"""Seconds between two readings of the counters."""
Sample = tuple[float, list[tuple[int, int]]]
"""(monotonic time, (up, down) bytes so far of each rack's uplink)."""


def interface_bytes(interface: str, pid: int | str = "self") -> tuple[int, int]:
    """(sent, received) bytes of `interface` in the network namespace of process `pid` (/proc/PID/net/dev; 0, 0 where the
    namespace has no such interface)."""
    with open(f"/proc/{pid}/net/dev") as f:
        for line in f:
            name, _, fields = line.partition(":")
            if name.strip() == interface:
                values = fields.split()
                return int(values[8]), int(values[0])
    return 0, 0


class Sampler:
    """Reads every uplink's counters into `path` until `stop()`: one JSON line {"t", "bytes": [[up, down], ...]} each time."""

    def __init__(self, leaves: Sequence[tuple[int, str]], path: Path, interval: float = INTERVAL) -> None:
        """`leaves`: per rack, the PID of a process in its leaf's namespace and the name of its uplink's interface there."""
        self.leaves, self.path, self.interval = list(leaves), path, interval
        self._stop = threading.Event()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._record, name="testbed-uplinks", daemon=True)
        self._thread.start()

    def _record(self) -> None:
        with self.path.open("w") as out:
            while not self._stop.is_set():
                now = time.monotonic()
                try:
                    readings = [interface_bytes(interface, pid) for pid, interface in self.leaves]
                except OSError:  # a leaf's shell is gone: the run is being taken down
                    return
                out.write(json.dumps({"t": now, "bytes": readings}) + "\n")
                self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def load(path: Path) -> list[Sample]:
    """A round's samples, in time order ([] where the round has none: a run without racks)."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    return [(row["t"], [tuple(pair) for pair in row["bytes"]]) for row in rows]


def at(samples: list[Sample], t: float) -> list[tuple[float, float]]:
    """Each uplink's (up, down) bytes so far at monotonic time `t`, interpolated between the samples around it."""
    times = [s[0] for s in samples]
    i = min(max(bisect_left(times, t), 1), len(samples) - 1)
    (t0, before), (t1, after) = samples[i - 1], samples[i]
    share = min(max((t - t0) / (t1 - t0), 0.0), 1.0) if t1 > t0 else 1.0
    return [(b[0] + share * (a[0] - b[0]), b[1] + share * (a[1] - b[1])) for b, a in zip(before, after)]


def carried(samples: list[Sample], start: float, end: float) -> list[dict[str, float]]:
    """Per rack, the bytes its uplink carried up and down between monotonic times `start` and `end`."""
    first, last = at(samples, start), at(samples, end)
    return [{"rack": r, "up": b[0] - a[0], "down": b[1] - a[1]} for r, (a, b) in enumerate(zip(first, last))]


def began(job_dir: Path, phase: int, start: float) -> float:
    """When the job began training on the monotonic clock: its phase's go time (the orchestrator wrote it) plus `start`."""
    return float((job_dir.parent / f"go.{phase}").read_text()) + start


def per_step(samples: list[Sample], began_at: float, steps: list[dict[str, Any]]) -> list[list[dict[str, float]]]:
    """Each of rank 0's `steps` (its JSON lines): per rack, what the uplink carried from the step's start to its end."""
    return [carried(samples, began_at + s["wall"] - s["step_time"], began_at + s["wall"]) for s in steps]


def per_measured_step(samples: list[Sample], began_at: float, measured: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per rack, the mean bytes up and down a step over the `measured` steps (from the first's start to the last's end:
    the counters' growth over the whole stretch, which the sampling interval blurs far less than a single step)."""
    whole = carried(samples, began_at + measured[0]["wall"] - measured[0]["step_time"], began_at + measured[-1]["wall"])
    return [{"rack": w["rack"], "up": w["up"] / len(measured), "down": w["down"] / len(measured)} for w in whole]
