"""Stochastic quantization to table levels and its inverse, in torch (CUDA path, CPU fallback).

The operation order and every fp32 constant here are shared with _native.c, so both paths
produce the same indices (see :class:`Levels` and :func:`normalizer`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from .rng import Key, uniforms

def f32(x: float) -> float:
    """``x`` rounded to the nearest fp32 value (kept as a Python float)."""
    return float(np.float32(x))


@dataclass(frozen=True)
class Levels:
    """Per-integer lookup tables that find the bracketing levels of v in one step.

    For c = floor(v) in 0..g-1: ``lower[c]`` is the index i with R[i] <= c < R[i+1] (so also
    R[i] <= v <= R[i+1]), ``base[c]`` = R[i] and ``width[c]`` = R[i+1] - R[i]. All tables are
    uint8 and zero-padded to 256 entries, the layout the native kernels read.
    """

    granularity: int
    levels: int  # 2**bits
    threshold: float  # fp32 T
    gain: float  # fp32 g / (2T): maps [-T, T] onto [0, g]
    lower: torch.Tensor
    base: torch.Tensor
    width: torch.Tensor
    values: torch.Tensor  # R

    @classmethod
    def build(cls, table: tuple[int, ...], threshold: float) -> Levels:
        levels = np.asarray(table)
        g = int(levels[-1])
        lower = np.searchsorted(levels, np.arange(g), side="right") - 1

        def padded(entries: np.ndarray) -> torch.Tensor:
            out = np.zeros(256, dtype=np.uint8)
            out[: entries.size] = entries
            return torch.from_numpy(out)

        return cls(
            granularity=g,
            levels=levels.size,
            threshold=f32(threshold),
            gain=f32(g / (2.0 * threshold)),
            lower=padded(lower),
            base=padded(levels[lower]),
            width=padded(np.diff(levels)[lower]),
            values=padded(levels),
        )

    def to(self, device: torch.device) -> Levels:
        """The same tables on ``device``."""
        move = {name: getattr(self, name).to(device) for name in ("lower", "base", "width", "values")}
        return Levels(self.granularity, self.levels, self.threshold, self.gain, **move)


def checked_norm(norm: float | torch.Tensor) -> float:
    """``norm`` (a number or a one-element tensor, read on the host) rounded to fp32, checked to be finite and >= 0.

    A non-finite norm has no THC encoding: it means some worker's bucket holds inf or NaN, and
    the caller must not quantize or decode with it (the DDP hook outputs NaN instead).
    """
    with np.errstate(over="ignore"):
        value = float(np.float32(float(norm)))
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(
            f"norm must be a finite number >= 0 in fp32 (the max over workers of ||y||_2), got {float(norm)}; "
            "a non-finite norm means a bucket holds inf or NaN, which THC cannot encode"
        )
    return value


def normalizer(norm: float, padded: int) -> float:
    """s = fp32(sqrt(d)) / fp32(M) in fp32, so u = y * s has unit scale; 0 when M == 0."""
    root = f32(math.sqrt(padded))
    return float(np.float32(root) / np.float32(norm)) if norm > 0 else 0.0


def step(norm: float, padded: int, workers: int, threshold: float, granularity: int) -> float:
    """fp32 scale from (sum - workers*g/2) to the rotated-domain mean: (2T/g) * M / sqrt(d) / workers."""
    unit = f32(2.0 * threshold / granularity / math.sqrt(max(padded, 1)) / workers)
    return float(np.float32(norm) * np.float32(unit))


def quantize(y: torch.Tensor, scale: float, levels: Levels, key: Key) -> torch.Tensor:
    """uint8 table indices of fp32 ``y``: clip y*scale to [-T, T], map to [0, g], round stochastically."""
    t = levels.threshold
    u = y * scale
    u = torch.where(u > -t, u, -t)  # also sends NaN to -T, as the native kernel does
    u = torch.clamp(u, max=t)
    v = (u + t) * levels.gain
    c = v.to(torch.int32).clamp_(0, levels.granularity - 1).long()
    # Up with probability (v - R[i]) / (R[i+1] - R[i]), compared without a division.
    up = uniforms(y.numel(), key, y.device) * levels.width[c] < v - levels.base[c]
    return levels.lower[c] + up.to(torch.uint8)


def lookup(indices: torch.Tensor, levels: Levels) -> torch.Tensor:
    """uint8 table values R[indices]."""
    return levels.values[indices.long()]


def dequantize(total: torch.Tensor, offset: float, scale: float) -> torch.Tensor:
    """fp32 (total - offset) * scale."""
    return (total.to(torch.float32) - offset) * scale
