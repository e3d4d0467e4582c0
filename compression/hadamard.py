"""Randomized Hadamard transform in torch (the CUDA path and the CPU fallback).

A random +-1 diagonal followed by a normalized block Walsh-Hadamard transform makes any vector's
coordinates look Gaussian, which is what the THC table is optimal for. The butterfly order here
(stage h = 1, 2, 4, ...; pairs (j, j + h) -> (a + b, a - b); scale after the last stage) is the
one _native.c follows, so both produce bit-identical fp32 results.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .rng import Key, signs


def block_length(n: int, block_size: int) -> int:
    """The transform block for a length-n vector: block_size, or the next power of two >= n if smaller."""
    return min(block_size, 1 << max(n - 1, 0).bit_length())


def padded_length(n: int, block_size: int) -> int:
    """n rounded up to a whole number of blocks."""
    block = block_length(n, block_size)
    return -(-n // block) * block


def inverse_sqrt(block: int) -> float:
    """fp32 value of 1/sqrt(block), the normalization both paths multiply by."""
    return float(np.float32(1.0 / math.sqrt(block)))


def fwht(x: torch.Tensor, block: int) -> torch.Tensor:
    """Normalized Walsh-Hadamard transform of each consecutive ``block`` elements of fp32 ``x``."""
    h = 1
    while h < block:
        pairs = x.view(-1, 2, h)
        low, high = pairs[:, 0], pairs[:, 1]
        x = torch.stack((low + high, low - high), dim=1)
        h *= 2
    return x.reshape(-1) * inverse_sqrt(block)


def rotate(x: torch.Tensor, padded: int, block: int, key: Key) -> torch.Tensor:
    """Zero-pad fp32 ``x`` to ``padded``, flip signs by the key's stream, transform each block."""
    y = torch.zeros(padded, dtype=torch.float32, device=x.device)
    y[: x.numel()] = x
    return fwht(y * signs(padded, key, x.device), block)


def unrotate(y: torch.Tensor, block: int, key: Key, length: int) -> torch.Tensor:
    """Inverse of :func:`rotate` for fp32 ``y``: transform each block, flip signs, keep ``length``."""
    return (fwht(y, block) * signs(y.numel(), key, y.device))[:length]
