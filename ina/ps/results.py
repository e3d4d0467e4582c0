"""The bounded ring of a job's recent results (docs/protocol.md, section 6).

The switch frees a slot as soon as its chunk completes, so the PS's copy is the only
place a worker that lost its RESULT can get it back. The ring keeps the packets as sent,
so a replay is one dictionary lookup and no re-encoding.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple


class StoredResult(NamedTuple):
    is_max: bool
    packet: bytes


class ResultRing:
    """The last `capacity` results of one job by sequence number; the oldest stored is evicted first."""

    __slots__ = ("capacity", "_results")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"a result ring holds at least 1 result, got {capacity}")
        self.capacity = capacity
        self._results: OrderedDict[int, StoredResult] = OrderedDict()

    def __len__(self) -> int:
        return len(self._results)

    def get(self, seq: int) -> StoredResult | None:
        return self._results.get(seq)

    def put(self, seq: int, is_max: bool, packet: bytes) -> bool:
        """Store a RESULT packet; False (and nothing changes) if `seq` is already stored."""
        if seq in self._results:
            return False
        self._results[seq] = StoredResult(is_max, packet)
        if len(self._results) > self.capacity:
            self._results.popitem(last=False)
        return True
