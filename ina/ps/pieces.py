"""Exact-cover merging of one chunk's pieces (docs/protocol.md, section 6).

A piece is `(bitmap, sums)`: the contributions of the workers in `bitmap`, already
added (or maxed). Pieces may overlap when a worker's resend and a switch partial both
hold it, so the chunk completes only from pieces with pairwise disjoint bitmaps whose
union is the job's full bitmap: that is what keeps a worker from being counted twice.
"""

from __future__ import annotations

import numpy as np


class PieceSet:
    """The pieces of one incomplete chunk; `result` is set once an exact cover exists."""

    __slots__ = ("full", "is_max", "held", "result", "_pieces", "_disjoint")

    def __init__(self, full: int, is_max: bool) -> None:
        self.full = full
        self.is_max = is_max
        self.held = 0
        """Union of the bitmaps held: the workers the PS has heard from."""
        self.result: np.ndarray | None = None
        self._pieces: dict[int, np.ndarray] = {}
        self._disjoint = True

    def __len__(self) -> int:
        return len(self._pieces)

    def add(self, bitmap: int, sums: np.ndarray) -> bool:
        """Take a piece (`bitmap` non-zero, within `full`); False if one with this bitmap is held (a duplicate)."""
        if bitmap in self._pieces:
            return False
        self._pieces[bitmap] = sums
        overlaps = bool(bitmap & self.held)
        self.held |= bitmap
        self._disjoint &= not overlaps
        if self.held == self.full:
            chosen = list(self._pieces) if self._disjoint else self._cover_with(bitmap)
            if chosen is not None:
                self.result = self._combine(chosen)
        return True

    def _cover_with(self, bitmap: int) -> list[int] | None:
        """Pairwise disjoint bitmaps covering `full` that include `bitmap`, or None.

        Without the newest piece no cover existed (we would have completed), so every
        cover uses it. Depth-first search on the lowest uncovered worker, biggest pieces
        first, remembering unions that lead nowhere: pieces are few, so this is quick.
        """
        candidates = sorted((b for b in self._pieces if not b & bitmap), key=int.bit_count, reverse=True)
        dead_ends: set[int] = set()

        def search(covered: int) -> list[int] | None:
            if covered == self.full:
                return []
            if covered in dead_ends:
                return None
            missing = self.full & ~covered
            lowest = missing & -missing
            for candidate in candidates:
                if candidate & lowest and not candidate & covered:
                    rest = search(covered | candidate)
                    if rest is not None:
                        return [candidate, *rest]
            dead_ends.add(covered)
            return None

        rest = search(bitmap)
        return None if rest is None else [bitmap, *rest]

    def _combine(self, chosen: list[int]) -> np.ndarray:
        """32-bit wrapping sum (SUM) or unsigned maximum (MAX) of the chosen pieces."""
        stacked = np.array([self._pieces[b] for b in chosen], dtype=np.uint32)
        return stacked.max(axis=0) if self.is_max else stacked.sum(axis=0, dtype=np.uint32)
