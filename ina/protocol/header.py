"""The 20-byte header: a struct codec for single packets and a numpy dtype for batches.

Both apply the same validity rules (docs/protocol.md, section 2); tests hold them to it.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from ina.protocol.constants import (
    HEADER_LEN,
    KNOWN_FLAGS,
    LANE_WIDTHS,
    MAGIC,
    MAX_INDEX_BITS,
    MAX_WORKERS,
    VERSION,
    Flag,
    Kind,
)
from ina.protocol.packing import fields_per_word

_STRUCT = struct.Struct("!BBBBHBBIHBBI")
assert _STRUCT.size == HEADER_LEN

HEADER_DTYPE = np.dtype(
    [
        ("magic", "u1"),
        ("version", "u1"),
        ("kind", "u1"),
        ("flags", "u1"),
        ("job", ">u2"),
        ("rank", "u1"),
        ("priority", "u1"),
        ("seq", ">u4"),
        ("slot", ">u2"),
        ("index_bits", "u1"),
        ("lane_bits", "u1"),
        ("bitmap", ">u4"),
    ]
)
assert HEADER_DTYPE.itemsize == HEADER_LEN


_KINDS = {int(kind): kind for kind in Kind}
_FLAGS = tuple(Flag(value) for value in range(KNOWN_FLAGS + 1))
_LANE_WIDTH_OK = np.zeros(256, dtype=bool)
_LANE_WIDTH_OK[list(LANE_WIDTHS)] = True
_MIN_KIND, _MAX_KIND = min(_KINDS), max(_KINDS)


class MalformedPacket(ValueError):
    """A packet that breaks docs/protocol.md section 2; receivers drop and count it."""


def result_words(words: int, index_bits: int, lane_bits: int) -> int:
    """Payload words of a RESULT/PARTIAL for a chunk of `words` DATA words."""
    if index_bits == 0:
        return words
    coordinates = words * fields_per_word(index_bits)
    return -(-coordinates // fields_per_word(lane_bits))


def payload_words(kind: int, words: int, index_bits: int, lane_bits: int) -> int:
    """Payload words a valid packet of this kind carries in a deployment of `words` per packet."""
    if kind == Kind.DATA:
        return words
    if kind in (Kind.RESULT, Kind.PARTIAL):
        return result_words(words, index_bits, lane_bits)
    return 0


class Header(NamedTuple):
    """One packet's header; field meanings are in docs/protocol.md. A tuple: cheap to build per packet."""

    kind: Kind
    job: int
    seq: int
    flags: Flag = Flag.NONE
    rank: int = 0
    priority: int = 0
    slot: int = 0
    index_bits: int = 0
    lane_bits: int = 32
    bitmap: int = 0

    @property
    def resend(self) -> bool:
        return bool(self.flags & Flag.RESEND)

    @property
    def is_max(self) -> bool:
        return bool(self.flags & Flag.MAX)

    def with_(self, **changes: object) -> Header:
        """A copy with some fields changed."""
        return self._replace(**changes)

    def pack(self, payload: bytes | np.ndarray = b"") -> bytes:
        """Header plus payload; a numpy payload is written as big-endian 32-bit words."""
        head = _STRUCT.pack(
            MAGIC,
            VERSION,
            int(self.kind),
            int(self.flags),
            self.job,
            self.rank,
            self.priority,
            self.seq,
            self.slot,
            self.index_bits,
            self.lane_bits,
            self.bitmap,
        )
        if isinstance(payload, np.ndarray):
            payload = payload.astype(">u4", copy=False).tobytes()
        return head + payload


def parse(data: bytes | bytearray | memoryview, words: int) -> tuple[Header, np.ndarray]:
    """Decode and validate one packet; returns the header and its payload as big-endian uint32 words.

    `words` is the deployment's K (DATA payload words). Raises MalformedPacket.
    """
    if len(data) < HEADER_LEN:
        raise MalformedPacket(f"{len(data)} bytes is shorter than the {HEADER_LEN}-byte header")
    magic, version, kind, flags, job, rank, prio, seq, slot, ibits, lbits, bitmap = _STRUCT.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise MalformedPacket(f"magic/version {magic:#x}/{version} is not {MAGIC:#x}/{VERSION}")
    if kind not in _KINDS:
        raise MalformedPacket(f"unknown kind {kind}")
    if flags & ~KNOWN_FLAGS:
        raise MalformedPacket(f"reserved flag bits set in {flags:#x}")
    if lbits not in LANE_WIDTHS or ibits > MAX_INDEX_BITS:
        raise MalformedPacket(f"lane_bits {lbits} / index_bits {ibits} out of range")
    if kind == Kind.DATA and (rank >= MAX_WORKERS or bitmap != 1 << rank):
        raise MalformedPacket(f"DATA bitmap {bitmap:#x} is not 1 << rank {rank}")
    expected = payload_words(kind, words, ibits, lbits)
    if len(data) != HEADER_LEN + 4 * expected:
        raise MalformedPacket(f"{kind!r} needs {expected} payload words, got {(len(data) - HEADER_LEN) / 4}")
    header = Header(_KINDS[kind], job, seq, _FLAGS[flags], rank, prio, slot, ibits, lbits, bitmap)
    return header, np.frombuffer(data, dtype=">u4", offset=HEADER_LEN)


def valid_mask(headers: np.ndarray, lengths: np.ndarray, words: int) -> np.ndarray:
    """Vectorized twin of `parse`'s checks: True where a packet (HEADER_DTYPE row, byte length) is valid.

    Rows of packets shorter than the header must be zero-filled by the caller; their length fails them.
    """
    kind = headers["kind"].astype(np.int64)
    ibits = headers["index_bits"].astype(np.int64)
    lbits = headers["lane_bits"].astype(np.int64)
    rank = headers["rank"].astype(np.int64)
    ok = (headers["magic"] == MAGIC) & (headers["version"] == VERSION)
    ok &= (kind >= _MIN_KIND) & (kind <= _MAX_KIND)
    ok &= (headers["flags"] & np.uint8(0xFF & ~KNOWN_FLAGS)) == 0
    ok &= _LANE_WIDTH_OK[lbits] & (ibits <= MAX_INDEX_BITS)
    is_data = kind == Kind.DATA
    safe_rank = np.minimum(rank, MAX_WORKERS - 1)
    ok &= ~is_data | ((rank < MAX_WORKERS) & (headers["bitmap"].astype(np.int64) == (1 << safe_rank)))
    expected = np.zeros(len(headers), dtype=np.int64)
    expected[is_data] = words
    partial = (kind == Kind.RESULT) | (kind == Kind.PARTIAL)
    for index_bits, lane_bits in set(zip(ibits[partial & ok].tolist(), lbits[partial & ok].tolist())):
        rows = partial & (ibits == index_bits) & (lbits == lane_bits)
        expected[rows] = result_words(words, index_bits, lane_bits)
    ok &= np.asarray(lengths, dtype=np.int64) == HEADER_LEN + 4 * expected
    return ok
