"""Typed wrappers around the optional C kernels (_native.c) for contiguous CPU tensors.

Each wrapper has the same meaning as its torch counterpart in hadamard.py / quantize.py and
returns bit-identical results. Set INA_COMPRESSION_NATIVE=0 to force the torch path.
"""
from __future__ import annotations

import os
from types import ModuleType

import torch

from .hadamard import inverse_sqrt
from .quantize import Levels
from .rng import Key

_SOURCE_KINDS = {torch.float32: 0, torch.uint8: 1, torch.int32: 2}


def _load() -> tuple[ModuleType | None, str | None]:
    """The extension module, or None and why not (None when disabled on purpose)."""
    if os.environ.get("INA_COMPRESSION_NATIVE", "1") == "0":
        return None, None
    try:
        from . import _native
    except ImportError as error:
        return None, str(error)
    return _native, None


_lib, load_error = _load()


def native_available() -> bool:
    """Whether the compiled CPU kernels are built and in use."""
    return _lib is not None


def _threads() -> int:
    return torch.get_num_threads()


def rotate(x: torch.Tensor, padded: int, block: int, key: Key) -> torch.Tensor:
    """hadamard.rotate for a contiguous fp32 CPU ``x``."""
    out = torch.empty(padded, dtype=torch.float32)
    _lib.rotate(
        x.data_ptr(), x.numel(), out.data_ptr(), padded, block, key.k0, key.k1, inverse_sqrt(block), _threads()
    )
    return out


def unrotate(
    src: torch.Tensor, block: int, key: Key, length: int, *, offset: float = 0.0, scale: float = 1.0
) -> torch.Tensor:
    """hadamard.unrotate(quantize.dequantize(src, offset, scale)) for contiguous fp32/uint8/int32 CPU ``src``."""
    out = torch.empty(length, dtype=torch.float32)
    _lib.unrotate(
        src.data_ptr(), _SOURCE_KINDS[src.dtype], src.numel(), offset, scale, out.data_ptr(), length, block,
        key.k0, key.k1, inverse_sqrt(block), _threads(),
    )  # fmt: skip
    return out


def quantize(y: torch.Tensor, scale: float, levels: Levels, key: Key) -> torch.Tensor:
    """quantize.quantize for a contiguous fp32 CPU ``y`` and a float ``scale``."""
    out = torch.empty(y.numel(), dtype=torch.uint8)
    _lib.quantize(
        y.data_ptr(), y.numel(), out.data_ptr(), scale, levels.threshold, levels.gain, levels.granularity,
        levels.lower.data_ptr(), levels.base.data_ptr(), levels.width.data_ptr(), key.k0, key.k1, _threads(),
    )  # fmt: skip
    return out


def encode(
    x: torch.Tensor, padded: int, block: int, sign_key: Key, scale: float, levels: Levels, round_key: Key
) -> torch.Tensor:
    """quantize(rotate(x, padded, block, sign_key), scale, levels, round_key) without materializing the rotation."""
    out = torch.empty(padded, dtype=torch.uint8)
    _lib.encode(
        x.data_ptr(), x.numel(), out.data_ptr(), padded, block, sign_key.k0, sign_key.k1, inverse_sqrt(block),
        scale, levels.threshold, levels.gain, levels.granularity, levels.lower.data_ptr(), levels.base.data_ptr(),
        levels.width.data_ptr(), round_key.k0, round_key.k1, _threads(),
    )  # fmt: skip
    return out


def lookup(indices: torch.Tensor, levels: Levels) -> torch.Tensor:
    """quantize.lookup for a contiguous uint8 CPU ``indices``."""
    out = torch.empty(indices.numel(), dtype=torch.uint8)
    _lib.lookup(
        indices.data_ptr(), indices.numel(), out.data_ptr(), levels.values.data_ptr(), levels.levels, _threads()
    )
    return out
