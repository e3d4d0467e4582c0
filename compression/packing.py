"""Bit packing of small integers into 32-bit words: the wire layout of indices and lanes.

floor(32 / width) fields per word; field j of a word occupies bits [j*width, (j+1)*width) from
the least significant bit; fields never straddle words and the last word is zero-padded.
Words are returned as torch.int32 holding the uint32 bit pattern (torch has no full uint32 math).

On little-endian hosts the byte-aligned widths (4, 8 and 16 bits: 4-bit indices, 8- and 16-bit
lanes) are packed by reinterpreting bytes, since there this layout is the memory layout: a
third of a worker's CPU per reduction went into the general shift-and-sum path.
"""
from __future__ import annotations

import sys

import torch

from . import native
from .table import _require_int

_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _fields(width: int) -> int:
    return 32 // _require_int("width", width, 1, 32)


def _shifts(width: int, device: torch.device) -> torch.Tensor:
    return torch.arange(_fields(width), dtype=torch.int64, device=device) * width


_BYTE_ALIGNED = (4, 8, 16) if sys.byteorder == "little" else ()


def _zero_padded(values: torch.Tensor, multiple: int) -> torch.Tensor:
    padded = torch.zeros(-(-values.numel() // multiple) * multiple, dtype=values.dtype, device=values.device)
    padded[: values.numel()] = values
    return padded


def _pack_bytes(values: torch.Tensor, width: int) -> torch.Tensor:
    """Byte-aligned widths on a little-endian host: the words are the values' bytes."""
    if width == 16:
        halves = values.to(torch.int32)
        return _zero_padded((halves - (halves >= 2**15) * 2**16).to(torch.int16), 2).view(torch.int32)
    octets = values.to(torch.uint8)
    if width == 4:
        pairs = _zero_padded(octets, 2).view(-1, 2)
        octets = pairs[:, 0] | (pairs[:, 1] << 4)
    return _zero_padded(octets, 4).view(torch.int32)


def _unpack_bytes(words: torch.Tensor, width: int, count: int) -> torch.Tensor:
    if width == 16:
        return words.view(torch.int16)[:count].to(torch.int32) & 0xFFFF
    octets = words.view(torch.uint8)
    if width == 4:
        octets = torch.stack((octets & 0xF, octets >> 4), dim=1).view(-1)
    return octets[:count].clone()


def _out_of_range(width: int) -> ValueError:
    return ValueError(f"values must lie in 0..2**{width} - 1 for width {width}; use a larger width")


def pack_bits(values: torch.Tensor, width: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Pack a 1-D tensor of integers in [0, 2**width) into int32 words, LSB-first fields.

    ``out``, an int32 tensor of the words' length on the values' device, receives them instead
    of a new tensor (THC's 4-bit CPU indices are packed straight into it): for callers that
    recycle their buffers."""
    fields = _fields(width)
    if values.dim() != 1 or values.dtype not in _INTEGER_DTYPES:
        raise ValueError(f"values must be a 1-D integer tensor, got shape {tuple(values.shape)} {values.dtype}")
    words = -(-values.numel() // fields)
    if out is not None and (out.shape != (words,) or out.dtype != torch.int32 or out.device != values.device
                            or not out.is_contiguous()):  # fmt: skip
        raise ValueError(f"out must be a contiguous int32 tensor of {words} words on {values.device}, "
                         f"got {tuple(out.shape)} {out.dtype} on {out.device}")  # fmt: skip
    if width == 4 and values.dtype == torch.uint8 and values.device.type == "cpu" and native.native_available():
        packed = native.pack_nibbles(values.contiguous(), out)  # THC's 4-bit indices: checked as they are packed
        if packed is None:
            raise _out_of_range(width)
        return packed
    packed = _pack_checked(values, width, fields)
    return packed if out is None else out.copy_(packed)


def _pack_checked(values: torch.Tensor, width: int, fields: int) -> torch.Tensor:
    """pack_bits' torch path: a new tensor of the words."""
    if values.numel() and (int(values.min()) < 0 or int(values.max()) >> width):
        raise _out_of_range(width)
    if width in _BYTE_ALIGNED:
        return _pack_bytes(values.contiguous(), width)
    wide = values.to(torch.int64)
    words = -(-wide.numel() // fields)
    padded = torch.zeros(words * fields, dtype=torch.int64, device=values.device)
    padded[: wide.numel()] = wide
    # Fields occupy disjoint bits, so summing the shifted fields is the same as OR-ing them.
    packed = (padded.view(words, fields) << _shifts(width, values.device)).sum(dim=1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def unpack_bits(words: torch.Tensor, width: int, count: int) -> torch.Tensor:
    """The first ``count`` fields of int32 ``words``; uint8 when width <= 8, else int32 (bit pattern)."""
    fields = _fields(width)
    _require_int("count", count, 0, words.numel() * fields)
    if words.dim() != 1 or words.dtype != torch.int32:
        raise ValueError(f"words must be a 1-D torch.int32 tensor, got shape {tuple(words.shape)} {words.dtype}")
    if width in _BYTE_ALIGNED:
        return _unpack_bytes(words.contiguous(), width, count)
    unsigned = words.to(torch.int64) & 0xFFFFFFFF
    values = (unsigned[:, None] >> _shifts(width, words.device)) & (2**width - 1)
    values = values.reshape(-1)[:count]
    if width <= 8:
        return values.to(torch.uint8)
    return torch.where(values >= 2**31, values - 2**32, values).to(torch.int32)
