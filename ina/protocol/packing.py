"""Numpy packing of lanes and indices into 32-bit words (docs/protocol.md, "Field packing").

The codec has a torch twin of these functions; tests check that both agree bit for bit.
"""

import numpy as np


def fields_per_word(width: int) -> int:
    """How many `width`-bit fields one 32-bit word holds (fields never straddle words)."""
    if not 1 <= width <= 32:
        raise ValueError(f"field width must be 1..32 bits, got {width}")
    return 32 // width


def pack_fields(values: np.ndarray, width: int) -> np.ndarray:
    """Pack non-negative integers (< 2**width) into uint32 words, field j at bits [j*width, (j+1)*width)."""
    per_word = fields_per_word(width)
    values = np.asarray(values, dtype=np.uint32).ravel()
    words = -(-values.size // per_word)
    padded = np.zeros(words * per_word, dtype=np.uint32)
    padded[: values.size] = values
    shifts = np.arange(per_word, dtype=np.uint32) * np.uint32(width)
    return np.bitwise_or.reduce(padded.reshape(words, per_word) << shifts, axis=1).astype(np.uint32)


def unpack_fields(words: np.ndarray, width: int, count: int) -> np.ndarray:
    """Inverse of `pack_fields`: the first `count` fields, as uint32."""
    per_word = fields_per_word(width)
    words = np.asarray(words, dtype=np.uint32).ravel()
    if count > words.size * per_word:
        raise ValueError(f"{words.size} words hold at most {words.size * per_word} fields, asked for {count}")
    shifts = np.arange(per_word, dtype=np.uint32) * np.uint32(width)
    mask = np.uint32(0xFFFFFFFF if width == 32 else (1 << width) - 1)
    return ((words[:, None] >> shifts) & mask).ravel()[:count]
