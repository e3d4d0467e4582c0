"""Links: bandwidth, latency and seeded fault injection for one host's attachment.

Every host hangs off a non-blocking fabric by one full-duplex link. A packet crosses the
sender's uplink, then the receiver's downlink; each direction is a FIFO that serializes
packets at the link's bandwidth, then delays them by its latency.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Faults:
    """Per-packet fault rates on one link direction; reordered or duplicated copies wait up to `max_delay` more."""

    drop: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    max_delay: float = 1e-3

    def __post_init__(self) -> None:
        for name in ("drop", "duplicate", "reorder"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} rate must be in [0, 1], got {getattr(self, name)}")
        if self.max_delay < 0:
            raise ValueError(f"max_delay must be >= 0, got {self.max_delay}")

    def apply(self, rng: random.Random) -> list[float]:
        """The extra delay of each copy that survives: [] dropped, [d] once, [d1, d2] duplicated."""
        if self.drop and rng.random() < self.drop:
            return []
        copies = 2 if self.duplicate and rng.random() < self.duplicate else 1
        return [rng.uniform(0.0, self.max_delay) if self.reorder and rng.random() < self.reorder else 0.0 for _ in range(copies)]


@dataclass(frozen=True, slots=True)
class Link:
    """A host's attachment: `bandwidth` in bytes/s (None: no serialization delay), one-way `latency` in s."""

    bandwidth: float | None = None
    latency: float = 0.0
    faults: Faults | None = None

    def __post_init__(self) -> None:
        if self.bandwidth is not None and self.bandwidth <= 0:
            raise ValueError(f"bandwidth must be positive or None, got {self.bandwidth}")
        if self.latency < 0:
            raise ValueError(f"latency must be >= 0, got {self.latency}")


@dataclass(slots=True)
class Port:
    """One direction of a link at run time: its FIFO, its random stream and its counters."""

    link: Link
    rng: random.Random
    free_at: float = 0.0
    packets: int = 0
    bytes: int = 0
    dropped: int = 0
    duplicated: int = 0
    delayed: int = 0
    busy: float = 0.0

    def transmit(self, size: int, now: float) -> list[float]:
        """Queue a `size`-byte packet at `now`; the times its copies reach the far end."""
        bandwidth = self.link.bandwidth
        if bandwidth is None:
            done = now
        else:
            service = size / bandwidth
            done = max(now, self.free_at) + service
            self.free_at = done
            self.busy += service
        self.packets += 1
        self.bytes += size
        faults = self.link.faults
        delays = [0.0] if faults is None else faults.apply(self.rng)
        if not delays:
            self.dropped += 1
        self.duplicated += len(delays) > 1
        self.delayed += sum(d > 0 for d in delays)
        return [done + self.link.latency + d for d in delays]

    def stats(self) -> dict[str, float]:
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "dropped": self.dropped,
            "duplicated": self.duplicated,
            "delayed": self.delayed,
            "busy_s": self.busy,
        }
