"""Exact power-of-two rescaling: the codec's fp32 arithmetic stays in range for every finite input.

THC's arithmetic divides by the shared norm M (``sqrt(d) / M``), multiplies by it
(``M * step``), sums squares (the norm itself) and adds up to a block of coordinates (the
transform's butterflies). In fp32 these overflow or lose precision to denormals when the
values are far from 1: ``sqrt(d) / M`` overflows for M below about 2**-112, squares overflow
for norms from 2**64 and vanish below 2**-75, the butterflies overflow near the top of the
range. Multiplying by a power of two is exact in fp32 (short of overflow and denormals) and
commutes with every rounding the codec does, so the codec moves values outside
``[2**-40, 2**40]`` (``EXACT``) near 1 first, computes there, and moves the result back:
the outcome is the one exact arithmetic would give (bit for bit the in-range result, scaled),
and norms inside the range are not touched at all.
"""
from __future__ import annotations

import math

import numpy as np
import torch

EXACT = (2.0**-40, 2.0**40)
_LIMIT = 126  # 2**-126 and 2**126 are fp32 normals, so the factors themselves are exact


def exponent(value: float) -> int:
    """e with ``value * 2**-e`` in [1, 2), clamped to [-126, 126] (0 for 0): a finite ``value`` moved near 1."""
    if value == 0:
        return 0
    return max(-_LIMIT, min(_LIMIT, math.frexp(value)[1] - 1))


def rescaling(value: float) -> int:
    """The exponent the codec rescales by: 0 inside ``EXACT`` (and for 0), else :func:`exponent`."""
    return 0 if value == 0 or EXACT[0] <= value <= EXACT[1] else exponent(value)


def scaled(tensor: torch.Tensor, e: int) -> torch.Tensor:
    """``tensor * 2**e`` (exact, short of overflow and denormals); ``tensor`` itself when e == 0."""
    return tensor if e == 0 else tensor * 2.0**e


def vector_norm(x: torch.Tensor) -> float:
    """||x||_2 rounded to fp32 for any finite fp32 ``x``; NaN when x holds inf or NaN or ||x|| exceeds fp32.

    One fp32 reduction when the result lies in ``EXACT`` (its squares neither overflow nor lose
    anything that matters); otherwise, the norm of x scaled by the power of two that brings its
    largest magnitude near 1, scaled back (two more passes, on such buckets only).
    """
    value = float(torch.linalg.vector_norm(x))
    if EXACT[0] <= value <= EXACT[1]:
        return value
    peak = float(x.abs().amax()) if x.numel() else 0.0  # amax propagates NaN
    if not math.isfinite(peak):
        return math.nan
    if peak == 0:
        return 0.0
    e = exponent(peak)
    with np.errstate(over="ignore"):
        value = np.float32(float(torch.linalg.vector_norm(scaled(x, -e))) * 2.0**e)
    return float(value) if np.isfinite(value) else math.nan
