"""Typed wrappers around the optional C kernels (_native.c) for contiguous CPU tensors.

Each wrapper has the same meaning as its torch counterpart in hadamard.py / quantize.py and
returns bit-identical results, whatever the instruction set. Set INA_COMPRESSION_NATIVE=0 to
force the torch path, and INA_COMPRESSION_ISA=baseline|avx2|avx512 to force the kernels of one
instruction set (read at import; the default is the best this CPU runs).
"""
from __future__ import annotations

import os
from types import ModuleType

import torch

from .hadamard import inverse_sqrt
from .quantize import Levels
from .rng import Key

_SOURCE_KINDS = {torch.float32: 0, torch.uint8: 1, torch.int32: 2}
# Outputs from this size on are advised to transparent huge pages: a fresh 64 MiB output costs
# more in 4 KiB page faults than the kernels take to fill it.
_HUGE_OUTPUT_BYTES = 4 << 20


def _load() -> tuple[ModuleType | None, str | None]:
    """The extension module, or None and why not (None when disabled on purpose)."""
    if os.environ.get("INA_COMPRESSION_NATIVE", "1") == "0":
        return None, None
    try:
        from . import _native
    except ImportError as error:
        return None, str(error)
    forced = os.environ.get("INA_COMPRESSION_ISA")
    if forced:
        if forced not in _native.isas():
            runs = ", ".join(_native.isas())
            raise ValueError(f"INA_COMPRESSION_ISA={forced}: this CPU and build run {runs}; unset it for the best")
        _native.set_isa(forced)
    return _native, None


_lib, load_error = _load()


def native_available() -> bool:
    """Whether the compiled CPU kernels are built and in use."""
    return _lib is not None


def isas() -> list[str]:
    """Instruction sets whose kernels this build has and this CPU runs, best first ([] without kernels)."""
    return _lib.isas() if _lib is not None else []


def isa() -> str | None:
    """The instruction set the kernels use now (None without kernels)."""
    return _lib.isa() if _lib is not None else None


def use_isa(name: str) -> None:
    """Run the kernels of instruction set ``name`` (one of :func:`isas`) from now on."""
    if name not in isas():
        raise ValueError(f"instruction set {name!r} is not one of {isas()}")
    _lib.set_isa(name)


def _threads() -> int:
    return torch.get_num_threads()


def _empty(count: int, dtype: torch.dtype) -> torch.Tensor:
    """An uninitialized output, on huge pages where it is large."""
    out = torch.empty(count, dtype=dtype)
    if out.numel() * out.element_size() >= _HUGE_OUTPUT_BYTES:
        _lib.advise_huge(out.data_ptr(), out.numel() * out.element_size(), False)
    return out


def move_to_huge_pages(tensor: torch.Tensor) -> None:
    """Back a large, long-lived CPU tensor (a DDP bucket) with 2 MiB pages now, keeping its contents.

    The transform reads rows of its input far apart, and on 4 KiB pages nearly every row misses
    the TLB. Moving costs one copy (MADV_COLLAPSE, Linux 6.1+); elsewhere, or without the
    kernels, nothing happens.
    """
    nbytes = tensor.numel() * tensor.element_size()
    if _lib is not None and tensor.device.type == "cpu" and nbytes >= _HUGE_OUTPUT_BYTES:
        _lib.advise_huge(tensor.data_ptr(), nbytes, True)


def rotate(x: torch.Tensor, padded: int, block: int, key: Key) -> torch.Tensor:
    """hadamard.rotate for a contiguous fp32 CPU ``x``."""
    out = _empty(padded, torch.float32)
    _lib.rotate(
        x.data_ptr(), x.numel(), out.data_ptr(), padded, block, key.k0, key.k1, inverse_sqrt(block), _threads()
    )
    return out


def unrotate(
    src: torch.Tensor, block: int, key: Key, length: int, *, offset: float = 0.0, scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """hadamard.unrotate(quantize.dequantize(src, offset, scale)) for contiguous fp32/uint8/int32 CPU ``src``.

    ``out``, when given, is a contiguous fp32 CPU tensor of ``length`` elements to write the result into.
    """
    out = _empty(length, torch.float32) if out is None else out
    _lib.unrotate(
        src.data_ptr(), _SOURCE_KINDS[src.dtype], src.numel(), offset, scale, out.data_ptr(), length, block,
        key.k0, key.k1, inverse_sqrt(block), _threads(),
    )  # fmt: skip
    return out


def quantize(y: torch.Tensor, scale: float, levels: Levels, key: Key) -> torch.Tensor:
    """quantize.quantize for a contiguous fp32 CPU ``y`` and a float ``scale``."""
    out = _empty(y.numel(), torch.uint8)
    _lib.quantize(
        y.data_ptr(), y.numel(), out.data_ptr(), scale, levels.threshold, levels.gain, levels.granularity,
        levels.lower.data_ptr(), levels.base.data_ptr(), levels.width.data_ptr(), key.k0, key.k1, _threads(),
    )  # fmt: skip
    return out


def encode(
    x: torch.Tensor, padded: int, block: int, sign_key: Key, scale: float, levels: Levels, round_key: Key,
    values: bool = False,
) -> torch.Tensor:  # fmt: skip
    """quantize(rotate(x, padded, block, sign_key), scale, levels, round_key) without materializing the rotation.

    ``values``: the indices' table values instead (lookup(indices, levels)), in the same pass.
    """
    out = _empty(padded, torch.uint8)
    _lib.encode(
        x.data_ptr(), x.numel(), out.data_ptr(), padded, block, sign_key.k0, sign_key.k1, inverse_sqrt(block),
        scale, levels.threshold, levels.gain, levels.granularity, levels.lower.data_ptr(), levels.base.data_ptr(),
        levels.width.data_ptr(), round_key.k0, round_key.k1, values, _threads(),
    )  # fmt: skip
    return out


def lookup(indices: torch.Tensor, levels: Levels) -> torch.Tensor:
    """quantize.lookup for a contiguous uint8 CPU ``indices``."""
    out = _empty(indices.numel(), torch.uint8)
    _lib.lookup(
        indices.data_ptr(), indices.numel(), out.data_ptr(), levels.values.data_ptr(), levels.levels, _threads()
    )
    return out


def pack_nibbles(indices: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """packing.pack_bits(indices, 4) for a contiguous uint8 CPU ``indices``, in one pass: the words
    as int32 (in ``out``, a contiguous int32 CPU tensor of their length that pack_bits checked, if
    given), or None when an index is above 15."""
    if out is None:
        out = _empty(-(-indices.numel() // 8), torch.int32)
    octets = out.view(torch.uint8)
    octets[-4:] = 0  # the last word's padding
    # One thread: the pass is bound by memory, and waking a second costs more than it saves (0.18 ms
    # against 0.31 ms for 2^22 indices here).
    fits = _lib.pack_nibbles(indices.data_ptr(), indices.numel(), octets.data_ptr(), 1)
    return out if fits else None
