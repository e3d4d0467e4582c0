"""Counter-based random streams shared by the native kernels and the torch path.

Every random bit (Hadamard signs, rounding uniforms) is a pure function of an element index and
a 64-bit key, so any worker on any device regenerates it without state or communication, and
nothing is materialized beyond what an elementwise op needs. _native.c implements the same
mixer in uint32 arithmetic; here it runs on Python ints or int64 tensors, masked to 32 bits so
that no intermediate ever exceeds 2**49 (no signed overflow).
"""
from __future__ import annotations

from typing import NamedTuple, TypeVar

import torch

MASK32 = 0xFFFFFFFF
MASK64 = 2**64 - 1
SIGN_STREAM = 0x5349474E  # "SIGN"
ROUND_STREAM = 0x524F554E  # "ROUN"
_MUL1 = 0x21F0AAAD
_MUL2 = 0xD35A2D97
_KEY_INIT = (0x9E3779B9, 0x85EBCA6B)

Word = TypeVar("Word", int, torch.Tensor)


class Key(NamedTuple):
    """Two 32-bit words that select one stream."""

    k0: int
    k1: int


def _mul32(x: Word, constant: int) -> Word:
    """(x * constant) mod 2**32 for 0 <= x < 2**32, split in 16-bit halves to stay below 2**49."""
    low = x * (constant & 0xFFFF)
    high = ((x * (constant >> 16)) & 0xFFFF) << 16
    return (low + high) & MASK32


def mix32(x: Word) -> Word:
    """A bijective 32-bit integer hash with good avalanche (xorshift-multiply, two rounds)."""
    x = x ^ (x >> 16)
    x = _mul32(x, _MUL1)
    x = x ^ (x >> 15)
    x = _mul32(x, _MUL2)
    return x ^ (x >> 15)


def stream_key(stream: int, *parts: int) -> Key:
    """Key of a stream from its kind and integer parts (seed, round, bucket[, worker]).

    Each part is taken modulo 2**64 and folded word by word into two independent chains.
    """
    words = [stream]
    for part in parts:
        part = int(part) & MASK64
        words += [part & MASK32, part >> 32]
    chains = []
    for state in _KEY_INIT:
        for word in words:
            state = mix32(state ^ word)
        chains.append(state)
    return Key(*chains)


def hash_stream(index: torch.Tensor, key: Key) -> torch.Tensor:
    """The stream's 32-bit word for each element index (int64 tensor of values < 2**32)."""
    return mix32(mix32(index ^ key.k0) ^ key.k1)


def signs(length: int, key: Key, device: torch.device) -> torch.Tensor:
    """+-1 (fp32) per position p: -1 where bit p % 32 of the stream word p // 32 is set.

    Thirty-two signs per word: the sign stream costs a thirty-second of the rounding stream.
    """
    position = torch.arange(length, dtype=torch.int64, device=device)
    bits = (hash_stream(position >> 5, key) >> (position & 31)) & 1
    return (1 - 2 * bits).to(torch.float32)


def uniforms(length: int, key: Key, device: torch.device) -> torch.Tensor:
    """Uniforms in [0, 1) (fp32): the top 24 bits of the stream word, exact in fp32."""
    words = hash_stream(torch.arange(length, dtype=torch.int64, device=device), key)
    return (words >> 8).to(torch.float32) * 2.0**-24
