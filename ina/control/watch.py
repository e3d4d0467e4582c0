"""Who holds each job back: a sampler of the chunks an aggregator holds partially (docs/protocol.md, section 7, "Watching").

A switch's slots and a PS's pieces record, for every chunk that waits, which ranks have
contributed. Sampling them every `period` seconds and charging each sample's `period` to every
rank missing from a chunk that waits gives, per job and rank, an unbiased estimate of the time
chunks spent waiting for that rank after its first contribution arrived (a chunk that waits D
seconds for rank r is seen about D / period times). The estimate works the same on every target:
the software switch, the PS and a P4 switch whose registers the control plane reads.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

logger = logging.getLogger("ina.control")

HALF_LIFE = 10.0
"""Seconds over which a rank's recent waiting halves: what `ina top` calls recent."""
STALL_AFTER = 2.0
"""A rank missing from a chunk that has waited this long is reported as stalled (well under a worker's peer_timeout)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """The chunks an aggregator holds partially at one moment: per chunk its job, a key unique
    among the job's chunks in flight, and the bitmap of ranks that have contributed."""

    job: np.ndarray
    chunk: np.ndarray
    present: np.ndarray

    @classmethod
    def empty(cls) -> Waiting:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint32))


@dataclass(slots=True)
class _Rank:
    wait_seconds: float = 0.0  # chunk-seconds spent waiting for it
    recent: float = 0.0  # chunks waiting for it, on average over the last half-life or so
    waiting: int = 0  # chunks waiting for it now
    oldest: float = 0.0  # the longest any of them has waited (since the watch first saw it)


@dataclass(slots=True)
class _Job:
    fanin: int
    ranks: list[_Rank] = field(default_factory=list)
    held: int = 0

    def __post_init__(self) -> None:
        self.ranks = [_Rank() for _ in range(self.fanin)]


class Lateness:
    """Per job and rank: the chunk-seconds spent waiting for it (a counter), on average recently,
    now, and the longest current wait; fed one `Waiting` snapshot at a time."""

    def __init__(self, half_life: float = HALF_LIFE, stall_after: float = STALL_AFTER) -> None:
        self.half_life = half_life
        self.stall_after = stall_after
        self._jobs: dict[int, _Job] = {}
        self._first_seen: dict[tuple[int, int], float] = {}
        self._last: float | None = None
        self._lock = threading.Lock()

    def observe(self, now: float, fanins: Mapping[int, int], waiting: Waiting) -> None:
        """One sample: `fanins` the registered jobs' rank counts, `waiting` what the aggregator holds."""
        with self._lock:
            period = 0.0 if self._last is None else max(now - self._last, 0.0)
            self._last = now
            decay = math.exp(-period * math.log(2) / self.half_life)
            self._jobs = {job: self._jobs[job] if job in self._jobs and self._jobs[job].fanin == n else _Job(n)
                          for job, n in fanins.items()}  # fmt: skip
            for state in self._jobs.values():
                state.held = 0
                for rank in state.ranks:
                    rank.waiting, rank.oldest = 0, 0.0
            seen: dict[tuple[int, int], float] = {}
            for job, chunk, present in zip(waiting.job.tolist(), waiting.chunk.tolist(), waiting.present.tolist()):
                state = self._jobs.get(job)
                if state is None:
                    continue
                since = seen[job, chunk] = self._first_seen.get((job, chunk), now)
                state.held += 1
                missing = ((1 << state.fanin) - 1) & ~present
                if not present:
                    continue  # nobody to wait for yet
                for r in range(state.fanin):
                    if missing >> r & 1:
                        rank = state.ranks[r]
                        rank.waiting += 1
                        rank.oldest = max(rank.oldest, now - since)
            for state in self._jobs.values():
                for rank in state.ranks:
                    rank.wait_seconds += period * rank.waiting
                    rank.recent = rank.recent * decay + rank.waiting * (1 - decay)
            self._first_seen = seen

    def report(self, job: int) -> dict[str, Any] | None:
        """Per rank what `observe` measured, the slowest rank (most waited for recently, None if none)
        and the stalled ones; None for a job it does not know."""
        with self._lock:
            state = self._jobs.get(job)
            if state is None:
                return None
            ranks = [{"rank": r, "wait_seconds": round(s.wait_seconds, 6), "waited_on": round(s.recent, 6),
                      "waiting_chunks": s.waiting, "oldest_wait": round(s.oldest, 6)} for r, s in enumerate(state.ranks)]  # fmt: skip
            recent = [s.recent for s in state.ranks]
            slowest = int(np.argmax(recent)) if recent and max(recent) > 0 else None
            stalled = [r for r, s in enumerate(state.ranks) if s.oldest >= self.stall_after]
            return {"held": state.held, "slowest_rank": slowest, "stalled_ranks": stalled, "ranks": ranks}


class Watch:
    """Samples `waiting()` every `period` seconds on a daemon thread into a `Lateness` until `close()`."""

    def __init__(self, waiting: Callable[[], Waiting], fanins: Callable[[], Mapping[int, int]], period: float = 0.1,
                 lateness: Lateness | None = None) -> None:  # fmt: skip
        if period <= 0:
            raise ValueError(f"the watch period must be positive, got {period}")
        self.lateness = lateness or Lateness()
        self.period = period
        self._waiting, self._fanins = waiting, fanins
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ina-watch", daemon=True)
        self._thread.start()

    def sample(self) -> None:
        fanins = self._fanins()  # first: a job registered meanwhile is simply not charged this time
        self.lateness.observe(time.monotonic(), fanins, self._waiting())

    def _run(self) -> None:
        while not self._stopped.wait(self.period):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a target that cannot be read now (a BMv2 restarting) is retried
                logger.debug("watch: sample failed", exc_info=True)

    def close(self) -> None:
        self._stopped.set()
        self._thread.join()
