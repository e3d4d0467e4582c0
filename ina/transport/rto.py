"""Retransmission timeout: the smoothed-RTT estimator of RFC 6298, bounded for aggregation.

An aggregation RTT includes waiting for the slowest peer's contribution, so the estimate
adapts to worker skew as well as to the network; `min_rto` keeps skew jitter from
triggering resends (each of which flushes the chunk's slot to the PS).
"""

from __future__ import annotations


class RttEstimator:
    """srtt + 4 * rttvar, clamped to [min_rto, max_rto]; `initial` until the first sample. The least RTT sampled
    bounds the short timeout from below: the network's own round trip, which no late peer lengthens."""

    __slots__ = ("min_rto", "max_rto", "srtt", "rttvar", "least", "_initial")

    def __init__(self, initial: float, min_rto: float, max_rto: float) -> None:
        if not 0 < min_rto <= max_rto:
            raise ValueError(f"need 0 < min_rto <= max_rto, got {min_rto}, {max_rto}")
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.least = float("inf")
        self._initial = initial

    def sample(self, rtt: float) -> None:
        """Fold in one RTT measured on a chunk that was sent once (Karn's rule is the caller's)."""
        self.least = min(self.least, rtt)
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    @property
    def rto(self) -> float:
        raw = self._initial if self.srtt is None else self.srtt + 4 * self.rttvar
        return min(max(raw, self.min_rto), self.max_rto)

    @property
    def short_rto(self) -> float:
        """The timeout of a chunk only a loss can hold: max(min_rto, twice the least RTT), at most the estimate,
        which also holds the waits for late peers (the estimate itself before any sample)."""
        if self.srtt is None:
            return self.rto
        return min(max(self.min_rto, 2 * self.least), self.rto)

    def backoff(self, retries: int, short: bool = False) -> float:
        """The timeout for a chunk's `retries`-th retransmission: doubled each time, capped; `short`, from
        `short_rto` rather than from the estimate."""
        return min((self.short_rto if short else self.rto) * (1 << min(retries, 30)), self.max_rto)
