"""A reduction's payload words and its sums on the worker's CPU path, without needless passes.

On a little-endian host the protocol's field layout (docs/protocol.md, section 2: field j of a
word at bits [j*w, (j+1)*w)) is the memory layout of the fields' bytes. So 8-bit lanes of uint8
table values are those values' own bytes seen as uint32 words (no copy, no pass), their sums come
back as the result words' bytes, and 4-bit indices pack two to a byte in one pass (`pack_bits`, in C where built).
The rest (other widths, a GPU tensor, a big-endian host) goes through `pack_bits`/`unpack_bits`,
which lay out the same bits.
"""

from __future__ import annotations

import sys

import numpy as np
import torch

from ina.compression import pack_bits, unpack_bits
from ina.transport.buffers import ARRAYS

_LITTLE = sys.byteorder == "little"


def pack_words(values: torch.Tensor, width: int) -> np.ndarray:
    """uint32 words of the 1-D `values` (each in 0..2**width - 1), `32 // width` fields a word, zero-padded.

    4-bit CPU indices (PS-only THC) are packed in one pass into a recycled array (`ARRAYS`)."""
    bytes_on_cpu = values.dtype == torch.uint8 and values.device.type == "cpu" and values.dim() == 1
    if _LITTLE and width == 8 and bytes_on_cpu:
        return _padded(values.contiguous().numpy(), 4).view(np.uint32)
    if width == 4 and bytes_on_cpu:
        words = ARRAYS.take(-(-values.numel() // 8))
        pack_bits(values, width, out=torch.from_numpy(words).view(torch.int32))
        return words
    return pack_bits(values, width).cpu().numpy().view(np.uint32)


def unpack_words(words: np.ndarray, width: int, count: int) -> torch.Tensor:
    """The first `count` fields of uint32 `words`, on the CPU, as `unpack_bits` gives them: uint8 for
    widths up to 8, else int32. For 8-bit fields, a view of `words`' bytes."""
    if not 0 <= count <= words.size * (32 // width):
        raise ValueError(f"{count} fields of width {width} do not fit {words.size} words")
    if _LITTLE and width == 8:
        return torch.from_numpy(words.view(np.uint8)[:count])
    if _LITTLE and width == 16:
        return torch.from_numpy(words.view(np.uint16)[:count].astype(np.int32))
    return unpack_bits(torch.from_numpy(words.view(np.int32)), width, count)


def _padded(octets: np.ndarray, multiple: int) -> np.ndarray:
    """`octets`, zero-padded to a multiple of `multiple` bytes (copied only when it is not one already)."""
    if octets.size % multiple == 0:
        return octets
    padded = np.zeros(-(-octets.size // multiple) * multiple, dtype=np.uint8)
    padded[: octets.size] = octets
    return padded
