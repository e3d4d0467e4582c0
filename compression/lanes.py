"""Integer widths for sums of table values, chosen so that no sum can overflow silently.

The reference lets n * g wrap in 8-bit lanes past 8 workers; here the width follows from the
largest possible sum, workers * max_value (DESIGN.md, "THC", step 7).
"""
from __future__ import annotations

import torch

from .table import _require_int

LANE_WIDTHS = (8, 16, 32)
INT32_MAX = 2**31 - 1


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


def collective_sum_dtype(workers: int, max_value: int) -> torch.dtype:
    """uint8 when the sum fits in 8 bits, else int32: gloo rejects int16 and NCCL has no 16-bit int."""
    largest = _largest_sum(workers, max_value)
    if largest <= 255:
        return torch.uint8
    if largest <= INT32_MAX:
        return torch.int32
    raise ValueError(
        f"workers * max_value = {workers} * {max_value} = {largest} exceeds int32 (2**31 - 1); "
        f"use fewer workers or a smaller granularity"
    )
