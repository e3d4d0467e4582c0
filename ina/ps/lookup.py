"""PS-only mode: packed b-bit THC indices to packed w-bit lanes of table values.

Workers without a switch send indices (b bits, half the uplink of 8-bit lanes for
b = 4); the PS looks them up in the job's table so the rest of the path (exact cover,
sums, RESULT) is the same as for lanes.

Lanes of width w in {8, 16, 32} tile 32-bit words exactly, so a chunk's lanes are one
little-endian bit stream with coordinate i at bits [i*w, (i+1)*w). That makes the lookup
a single gather: each group of g consecutive indices of a word (g*b <= 16 bits) is an
entry of a precomputed table of the g lanes' bytes, and the gathered bytes, in order,
are the result words. Per-coordinate unpack, gather and pack would cost ~8x more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ina.protocol import result_words
from ina.protocol.packing import fields_per_word

_GROUP_BITS = 16
"""Largest group of indices looked up at once: 2**16 entries of at most 64 bytes."""


class IndexTable:
    """One job's table, precomputed for turning rows of index words into rows of lane words."""

    __slots__ = ("index_bits", "lane_bits", "_shifts", "_mask", "_groups")

    def __init__(self, table: Sequence[int], index_bits: int, lane_bits: int) -> None:
        if len(table) != 1 << index_bits:
            raise ValueError(f"{index_bits}-bit indices need a table of {1 << index_bits} levels, got {len(table)}")
        self.index_bits = index_bits
        self.lane_bits = lane_bits
        per_word = fields_per_word(index_bits)
        group = max(g for g in range(1, per_word + 1) if per_word % g == 0 and g * index_bits <= _GROUP_BITS)
        self._shifts = np.arange(per_word // group, dtype=np.uint32) * np.uint32(group * index_bits)
        self._mask = np.uint32((1 << group * index_bits) - 1)
        codes = np.arange(1 << group * index_bits, dtype=np.uint32)
        fields = (codes[:, None] >> np.arange(group, dtype=np.uint32) * np.uint32(index_bits)) & np.uint32((1 << index_bits) - 1)
        lanes = np.asarray(table, dtype=np.uint64)[fields].astype(f"<u{lane_bits // 8}")
        size = group * lane_bits // 8
        entry = np.dtype(f"<u{size}") if size in (1, 2, 4, 8) else np.dtype((np.void, size))  # integers gather faster
        self._groups = np.ascontiguousarray(lanes).view(np.uint8).reshape(len(codes), -1).view(entry).ravel()

    def lanes(self, payloads: np.ndarray) -> np.ndarray:
        """Rows of m index words (uint32; a chunk of any length) to rows of `result_words(m)` lane words (native uint32)."""
        rows, out_bytes = payloads.shape[0], 4 * result_words(payloads.shape[1], self.index_bits, self.lane_bits)
        codes = np.empty((rows, payloads.shape[1], len(self._shifts)), dtype=np.intp)
        for k, shift in enumerate(self._shifts):  # at most 5 groups; a broadcast over them is slower
            codes[:, :, k] = (payloads >> shift) & self._mask
        stream = np.take(self._groups, codes.reshape(rows, -1)).view(np.uint8).reshape(rows, -1)
        if stream.shape[1] < out_bytes:  # the last word's tail, e.g. 10 3-bit indices in 8-bit lanes
            stream = np.concatenate([stream, np.zeros((rows, out_bytes - stream.shape[1]), dtype=np.uint8)], axis=1)
        return stream.view("<u4").astype(np.uint32, copy=False)
