"""Integer widths for sums of table values, chosen so that no sum can overflow silently.

The reference lets n * g wrap in 8-bit lanes past 8 workers; here the width follows from the
largest possible sum, workers * max_value (DESIGN.md, "THC", step 7).

A switch adds lanes of 8, 16 or 32 bits (:func:`sum_lane_bits`). A torch.distributed collective
adds whole integers, and gloo has no int16 sum nor NCCL any 16-bit integer one, so a sum that
outgrows a byte would take an int32 each. Instead :func:`collective_packing` packs several
``b``-bit lanes into one int32 or int64 word: as no lane's sum exceeds ``2**b - 1``, adding the
words adds every lane with no carry into its neighbour (e.g. 8-bit THC, 4 workers: sums up to
1020 take 10 bits, three lanes an int32, 1.33 bytes a coordinate instead of 4).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import torch

from .table import _require_int

LANE_WIDTHS = (8, 16, 32)
USABLE_BITS = {torch.uint8: 8, torch.int32: 31, torch.int64: 63}
"""Bits a collective's word offers its lanes: a signed word keeps its sums below the sign bit."""
WORDS = (torch.int32, torch.int64)
"""The words that carry several lanes, narrower first."""


def _largest_sum(workers: int, max_value: int) -> int:
    """workers * max_value after checking both are sensible integers."""
    return _require_int("workers", workers, 1) * _require_int("max_value", max_value, 0)


def sum_lane_bits(workers: int, max_value: int) -> int:
    """The narrowest lane (8, 16 or 32 unsigned bits) that holds a sum of ``workers`` values <= max_value."""
    largest = _largest_sum(workers, max_value)
    for width in LANE_WIDTHS:
        if largest <= 2**width - 1:
            return width
    raise ValueError(
        f"workers * max_value = {workers} * {max_value} = {largest} exceeds 32-bit lanes "
        f"(2**32 - 1); use fewer workers or a smaller granularity"
    )


@dataclass(frozen=True)
class SumPacking:
    """``lanes`` sums of ``lane_bits`` bits in each ``word`` of a collective's SUM.

    :meth:`pack` turns each worker's values into words, the collective adds the words, and
    :meth:`unpack` turns the summed words into the sums: exact while every sum fits its lane.
    """

    lane_bits: int
    lanes: int
    word: torch.dtype

    def __post_init__(self) -> None:
        usable = USABLE_BITS.get(self.word, 0)
        if min(self.lane_bits, self.lanes) < 1 or self.lane_bits * self.lanes > usable:
            raise ValueError(f"{self.lanes} lanes of {self.lane_bits} bits do not fit a {self.word} word")

    @property
    def bytes_per_coordinate(self) -> Fraction:
        """What one sum costs on the wire: the word's bytes over its lanes (exact, so ties compare equal)."""
        return Fraction(self.word.itemsize, self.lanes)

    @property
    def sum_dtype(self) -> torch.dtype:
        """The dtype of :meth:`unpack`'s sums: uint8 up to 8 bits, else int32 (int64 past 31), as decode takes them."""
        return next(dtype for dtype, bits in USABLE_BITS.items() if self.lane_bits <= bits)

    def word_count(self, length: int) -> int:
        """Words that carry ``length`` sums: the last one padded with zero lanes."""
        return -(-length // self.lanes)

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """Words of ``values`` (1-D non-negative integers, each sum of them fitting a lane), on their device.

        One lane a word returns ``values`` itself when it has the word's dtype already."""
        _check_vector("values", values)
        if self.lanes == 1:
            return values.to(self.word)
        columns = _padded(values, self.word_count(values.numel()) * self.lanes).view(-1, self.lanes)
        return (columns << self._shifts(values.device)).sum(1, dtype=self.word)  # lanes share no bit: + is |

    def unpack(self, words: torch.Tensor, length: int) -> torch.Tensor:
        """The first ``length`` lane sums of ``words`` (packed by :meth:`pack`, then summed), in :attr:`sum_dtype`."""
        _check_vector("words", words)
        if words.dtype != self.word or words.numel() != self.word_count(length):
            raise ValueError(f"{length} sums take {self.word_count(length)} {self.word} words, "
                             f"got {words.numel()} {words.dtype}")  # fmt: skip
        if self.lanes == 1:
            return words.to(self.sum_dtype)
        lanes = (words.unsqueeze(1) >> self._shifts(words.device)).bitwise_and_(2**self.lane_bits - 1)
        return lanes.view(-1)[:length].to(self.sum_dtype)

    def _shifts(self, device: torch.device) -> torch.Tensor:
        """Each lane's offset in its word, lowest lane first."""
        return torch.arange(self.lanes, dtype=self.word, device=device) * self.lane_bits


def collective_packing(workers: int, max_value: int) -> SumPacking:
    """The packing with the fewest bytes a sum of ``workers`` values <= max_value (ties: the narrower word).

    A byte a sum while the sum fits 8 bits, or ``b``-bit lanes (``b`` the largest sum's bit length),
    floor(31/b) of them an int32 or floor(63/b) an int64: gloo and NCCL sum all three dtypes.
    """
    largest = _largest_sum(workers, max_value)
    bits = max(1, largest.bit_length())
    candidates = [SumPacking(8, 1, torch.uint8)] if bits <= 8 else []
    candidates += [SumPacking(bits, USABLE_BITS[word] // bits, word) for word in WORDS if bits <= USABLE_BITS[word]]
    if not candidates:
        raise ValueError(
            f"workers * max_value = {workers} * {max_value} = {largest} exceeds int64 (2**63 - 1); "
            f"use fewer workers or a smaller granularity"
        )
    return min(candidates, key=lambda packing: packing.bytes_per_coordinate)  # min keeps the first of a tie


def _check_vector(name: str, tensor: torch.Tensor) -> None:
    if tensor.dim() != 1 or tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ValueError(f"{name} must be a 1-D integer tensor, got shape {tuple(tensor.shape)} {tensor.dtype}")


def _padded(values: torch.Tensor, length: int) -> torch.Tensor:
    """``values`` followed by zeros up to ``length``; ``values`` itself when it is that long."""
    if values.numel() == length:
        return values
    padded = values.new_zeros(length)
    padded[: values.numel()] = values
    return padded
