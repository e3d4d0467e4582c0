"""End-host priority policies (docs/protocol.md, section 9).

The switch's `esa` policy lets a chunk preempt a slot held by a lower-priority chunk, so
what a worker writes in the DATA `priority` field decides who gets aggregator memory
under contention. A policy sees the job's reductions as they are submitted and answers
the priority of a chunk when it is (re)sent. The workers of a job need not agree exactly
(they submit at slightly different times): the switch keeps the highest priority a slot's
contributions asked for.
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

MAX_PRIORITY = 255


@runtime_checkable
class PriorityPolicy(Protocol):
    """What the engine asks: the 0..255 priority of a chunk queued at `queued_at`, sent at `now`."""

    def observe(self, nbytes: int, now: float) -> None:
        """A reduction of `nbytes` bytes was submitted at `now`."""
        ...

    def priority(self, queued_at: float, now: float) -> int:
        """The priority to put in a DATA packet sent at `now` for a chunk queued at `queued_at`."""
        ...


class FixedPriority:
    """One level for every chunk: for jobs whose priority the operator sets by hand."""

    __slots__ = ("level",)

    def __init__(self, level: int = 0) -> None:
        if not 0 <= level <= MAX_PRIORITY:
            raise ValueError(f"priority must be in 0..{MAX_PRIORITY}, got {level}")
        self.level = level

    def observe(self, nbytes: int, now: float) -> None:
        pass

    def priority(self, queued_at: float, now: float) -> int:
        return self.level


class IntensityPriority:
    """ESA's default: favour communication-intensive jobs, and age waiting chunks so none starves.

    base = `levels_per_doubling * log2(1 + rate / reference_rate)`, where `rate` is the
    job's recent bytes per second of reductions: an exponentially weighted moving average
    over `time_constant` seconds (a byte counter that decays by e every `time_constant`).
    The logarithm keeps jobs whose rates differ by orders of magnitude apart without
    saturating. Each full `age_step` a chunk has waited in the send queue adds one level.
    The sum is capped at 255 (and by the switch at the job's `priority_cap`).
    """

    __slots__ = ("reference_rate", "levels_per_doubling", "time_constant", "age_step", "_bytes", "_at")

    def __init__(
        self,
        *,
        reference_rate: float = 1e6,
        levels_per_doubling: float = 16.0,
        time_constant: float = 2.0,
        age_step: float = 0.05,
    ) -> None:
        if reference_rate <= 0 or levels_per_doubling < 0 or time_constant <= 0 or age_step <= 0:
            raise ValueError("reference_rate, time_constant and age_step must be positive, levels_per_doubling >= 0")
        self.reference_rate = reference_rate
        self.levels_per_doubling = levels_per_doubling
        self.time_constant = time_constant
        self.age_step = age_step
        self._bytes = 0.0
        self._at = 0.0

    def _decayed(self, now: float) -> float:
        return self._bytes * math.exp(-max(now - self._at, 0.0) / self.time_constant)

    def observe(self, nbytes: int, now: float) -> None:
        self._bytes = self._decayed(now) + nbytes
        self._at = max(now, self._at)

    def rate(self, now: float) -> float:
        """Recent bytes per second of reductions."""
        return self._decayed(now) / self.time_constant

    def base(self, now: float) -> int:
        """The job's priority before ageing."""
        return int(self.levels_per_doubling * math.log2(1 + self.rate(now) / self.reference_rate))

    def priority(self, queued_at: float, now: float) -> int:
        aged = int(max(now - queued_at, 0.0) / self.age_step)
        return min(self.base(now) + aged, MAX_PRIORITY)


class AttainedServicePriority:
    """Least attained service (Tiresias's LAS, without knowing a job's size): the fewer bytes a job has reduced
    so far, the higher its priority, so that under contention a short or newly arrived job passes a long one.

    The intensity rule ranks a job by its recent rate, so the largest job, which has the most left to do, wins
    the slots and every shorter one waits behind it: the opposite of shortest-remaining-first, which minimizes
    mean JCT (testbed/README.md, "ESA, measured fairly"). Here base = trunc(`top` - `levels_per_doubling` *
    log2(1 + attained / `reference_bytes`)), never below 0: `top` 63 with 8 levels a doubling spreads jobs over
    the switch's egress queues (eight levels a queue). Each full `age_step` a chunk has waited adds one level.
    """

    __slots__ = ("top", "reference_bytes", "levels_per_doubling", "age_step", "attained")

    def __init__(self, *, top: int = 63, reference_bytes: float = 65536.0, levels_per_doubling: float = 8.0,
                 age_step: float = 0.05) -> None:  # fmt: skip
        if not 0 <= top <= MAX_PRIORITY or reference_bytes <= 0 or levels_per_doubling < 0 or age_step <= 0:
            raise ValueError(f"top must be in 0..{MAX_PRIORITY}, reference_bytes and age_step positive, levels_per_doubling >= 0")
        self.top = top
        self.reference_bytes = reference_bytes
        self.levels_per_doubling = levels_per_doubling
        self.age_step = age_step
        self.attained = 0.0

    def observe(self, nbytes: int, now: float) -> None:
        self.attained += nbytes

    def ranked_bytes(self) -> float:
        """The bytes the rank falls with: those attained."""
        return self.attained

    def base(self, now: float) -> int:
        """The job's priority before ageing."""
        return max(int(self.top - self.levels_per_doubling * math.log2(1 + self.ranked_bytes() / self.reference_bytes)), 0)

    def priority(self, queued_at: float, now: float) -> int:
        aged = int(max(now - queued_at, 0.0) / self.age_step)
        return min(self.base(now) + aged, MAX_PRIORITY)


class RemainingWorkPriority(AttainedServicePriority):
    """Least remaining work (shortest-remaining-first, which minimizes mean JCT): the fewer bytes a job has left
    to reduce of `total_bytes`, the higher its priority, so under contention the job nearest its end passes.

    A training job knows its work in advance (its steps times the bytes of a step's reductions), which LAS
    cannot assume. LAS ranks a job down as it progresses, so jobs of one size take turns and all finish late;
    here a job's priority rises as it progresses, so the one ahead stays ahead and finishes, and the pool
    goes to the next. base = trunc(`top` - `levels_per_doubling` * log2(1 + remaining / `reference_bytes`)),
    never below 0; each full `age_step` a chunk has waited adds one level (testbed/README.md, "ESA, measured
    fairly", measures it against the intensity rule).
    """

    __slots__ = ("total_bytes",)

    def __init__(self, total_bytes: float, *, top: int = 63, reference_bytes: float = 65536.0, levels_per_doubling: float = 8.0,
                 age_step: float = 0.05) -> None:  # fmt: skip
        if not total_bytes > 0:
            raise ValueError(f"total_bytes must be positive (the bytes the job will reduce over its life), got {total_bytes}")
        super().__init__(top=top, reference_bytes=reference_bytes, levels_per_doubling=levels_per_doubling, age_step=age_step)
        self.total_bytes = float(total_bytes)

    def remaining(self) -> float:
        """The bytes the job has still to reduce (0 once it has reduced `total_bytes` or more)."""
        return max(self.total_bytes - self.attained, 0.0)

    ranked_bytes = remaining


POLICIES = {"intensity": IntensityPriority, "las": AttainedServicePriority, "remaining": RemainingWorkPriority}
"""The built-in end-host priority policies by name (the testbed's `jobs[].priority_policy`; `remaining` needs the
job's `total_bytes`)."""
