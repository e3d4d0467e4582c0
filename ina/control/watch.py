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
from collections.abc import Callable, Mapping, Sequence
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
    among the job's chunks in flight, and the bitmap of ranks that have contributed: a row of 32-bit
    words (rank r at bit r % 32 of word r // 32), as many as the widest job needs. A switch's jobs
    have at most 32 ranks, one word (a 1-D array is taken as that); a PS's racked job up to 32 x 32."""

    job: np.ndarray
    chunk: np.ndarray
    present: np.ndarray

    def __post_init__(self) -> None:
        if self.present.ndim == 1:
            object.__setattr__(self, "present", self.present.reshape(-1, 1))

    @classmethod
    def empty(cls) -> Waiting:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint32))

    def bitmaps(self) -> list[int]:
        """Each chunk's ranks present, as an integer."""
        return [int.from_bytes(row.astype("<u4").tobytes(), "little") for row in self.present]

    def ranks(self, rows: np.ndarray, count: int) -> np.ndarray:
        """Whether each of ranks 0..count-1 is present, for chunks `rows`: booleans, a row a chunk."""
        words = np.ascontiguousarray(self.present[rows], dtype="<u4")
        bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little").astype(bool)
        if bits.shape[1] < count:  # ranks beyond the widest bitmap given: none present
            bits = np.pad(bits, ((0, 0), (0, count - bits.shape[1])))
        return bits[:, :count]


def words_of(bitmaps: Sequence[int], width: int) -> np.ndarray:
    """Integer bitmaps as `Waiting.present` rows of `width` 32-bit words."""
    data = b"".join(bitmap.to_bytes(4 * width, "little") for bitmap in bitmaps)
    return np.frombuffer(data, dtype="<u4").reshape(len(bitmaps), width).astype(np.uint32)


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
            seen: dict[tuple[int, int], float] = {}
            for job, state in self._jobs.items():
                rows = np.flatnonzero(waiting.job == job)
                chunks = waiting.chunk[rows].tolist()
                since = np.array([self._first_seen.get((job, chunk), now) for chunk in chunks], dtype=float)
                seen.update(zip(((job, chunk) for chunk in chunks), since.tolist()))
                state.held = len(chunks)
                present = waiting.ranks(rows, state.fanin)
                missing = ~present & present.any(axis=1, keepdims=True)  # a chunk nobody has sent to waits for nobody yet
                ages = np.where(missing, (now - since)[:, None], 0.0)
                for rank, count, oldest in zip(state.ranks, missing.sum(axis=0).tolist(), ages.max(axis=0, initial=0.0).tolist()):
                    rank.waiting, rank.oldest = count, oldest
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
