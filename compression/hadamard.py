"""Randomized Hadamard transform in torch (the CUDA path and the CPU fallback).

A random +-1 diagonal followed by a normalized block Walsh-Hadamard transform makes any vector's
coordinates look Gaussian with variance ||x||^2 / d, which is what the THC table and the shared
scale assume. Blocks are interleaved (block j takes every m-th element from j, m = padded / block)
rather than contiguous as in the reference: a bucket concatenates layers whose scales differ by
orders of magnitude, and a contiguous block holding a large layer would sit far above the shared
scale and be clipped. Interleaving spreads every layer over all blocks. The rotated vector holds
the transformed blocks one after another.

The butterfly order (stage h = 1, 2, 4, ...; pairs (a, b) -> (a + b, a - b); scale after the last
stage) is the one _native.c follows, so both produce bit-identical fp32 results.
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


def gather_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """Interleaved blocks made contiguous: block j of the result is x[j], x[j + m], ... (m = len / block)."""
    return x.view(block, -1).t().reshape(-1)


def scatter_blocks(y: torch.Tensor, block: int) -> torch.Tensor:
    """Inverse of :func:`gather_blocks`."""
    return y.view(-1, block).t().reshape(-1)


def rotate(x: torch.Tensor, padded: int, block: int, key: Key) -> torch.Tensor:
    """Zero-pad fp32 ``x`` to ``padded``, gather the interleaved blocks, flip signs, transform each block.

    The random diagonal is indexed by position in the rotated (gathered) layout, which keeps the
    native kernel's sign lookups contiguous; it is a +-1 diagonal all the same.
    """
    y = torch.zeros(padded, dtype=torch.float32, device=x.device)
    y[: x.numel()] = x
    return fwht(gather_blocks(y, block) * signs(padded, key, x.device), block)


def unrotate(y: torch.Tensor, block: int, key: Key, length: int) -> torch.Tensor:
    """Inverse of :func:`rotate` for fp32 ``y``: transform, flip signs, scatter the blocks, keep ``length``."""
    return scatter_blocks(fwht(y, block) * signs(y.numel(), key, y.device), block)[:length]
