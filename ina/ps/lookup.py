"""PS-only mode: packed b-bit THC indices to packed w-bit lanes of table values.

Workers without a switch send indices (b bits, half the uplink of 8-bit lanes for
b = 4); the PS looks them up in the job's table so the rest of the path (exact cover,
sums, RESULT) is the same as for lanes. Whole batches go through one vectorized
unpack-gather-pack, because per-coordinate Python would cap the PS at a few packets per
millisecond.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ina.protocol import result_words
from ina.protocol.packing import fields_per_word


class IndexTable:
    """One job's table with the shapes of its chunks precomputed."""

    __slots__ = ("index_bits", "lane_bits", "_table", "_index_shifts", "_index_mask", "_lane_shifts", "_coordinates", "_out_words")

    def __init__(self, table: Sequence[int], index_bits: int, lane_bits: int, words: int) -> None:
        if len(table) != 1 << index_bits:
            raise ValueError(f"{index_bits}-bit indices need a table of {1 << index_bits} levels, got {len(table)}")
        self.index_bits = index_bits
        self.lane_bits = lane_bits
        self._table = np.asarray(table, dtype=np.uint32)
        self._index_shifts = np.arange(fields_per_word(index_bits), dtype=np.uint32) * np.uint32(index_bits)
        self._index_mask = np.uint32((1 << index_bits) - 1)
        self._lane_shifts = np.arange(fields_per_word(lane_bits), dtype=np.uint32) * np.uint32(lane_bits)
        self._coordinates = words * fields_per_word(index_bits)
        self._out_words = result_words(words, index_bits, lane_bits)

    def lanes(self, payloads: np.ndarray) -> np.ndarray:
        """Rows of K index words (native uint32) to rows of `result_words` lane words of table values."""
        rows = payloads.shape[0]
        indices = (payloads[:, :, None] >> self._index_shifts) & self._index_mask
        values = np.zeros((rows, self._out_words * len(self._lane_shifts)), dtype=np.uint32)
        values[:, : self._coordinates] = self._table[indices.reshape(rows, self._coordinates)]
        shifted = values.reshape(rows, self._out_words, len(self._lane_shifts)) << self._lane_shifts
        return np.bitwise_or.reduce(shifted, axis=2)
