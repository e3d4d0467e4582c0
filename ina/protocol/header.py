"""The 20-byte header: a struct codec for single packets and a numpy dtype for batches.

Both apply the same validity rules (docs/protocol.md, section 2); tests hold them to it.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

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


def chunk_words(kind: int, payload: int, index_bits: int, lane_bits: int) -> int:
    """The DATA words `m` of the chunk that a packet of this kind with `payload` words carries: a DATA's own
    payload, the `m` whose RESULT (or PARTIAL) is `payload` words long; 0 where no chunk has that length and
    for the kinds that carry no payload (docs/protocol.md, section 2, "Lengths")."""
    if kind == Kind.DATA or (index_bits == 0 and kind in (Kind.RESULT, Kind.PARTIAL)):
        return payload
    if kind not in (Kind.RESULT, Kind.PARTIAL):
        return 0
    return _indices_chunk(payload, index_bits, lane_bits)


def length_ok(kind: int, length: int, words: int, index_bits: int, lane_bits: int) -> bool:
    """Whether a packet of `length` bytes has a payload its kind may carry where K is `words`: whole words of a
    chunk of 1..K DATA words, or none for the kinds without payload."""
    payload, partial = divmod(length - HEADER_LEN, 4)
    if payload < 0 or partial:
        return False
    if kind not in (Kind.DATA, Kind.RESULT, Kind.PARTIAL):
        return payload == 0
    return 1 <= chunk_words(kind, payload, index_bits, lane_bits) <= words


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

    `words` is the deployment's K: a DATA carries 1..K payload words, a RESULT or PARTIAL those of a chunk
    of 1..K words (`length_ok`). Raises MalformedPacket.
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
    if not length_ok(kind, len(data), words, ibits, lbits):
        raise MalformedPacket(f"{_KINDS[kind]!r} of {len(data)} bytes carries no chunk of 1..{words} words")
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
    payload, partial = np.divmod(np.asarray(lengths, dtype=np.int64) - HEADER_LEN, 4)
    ok &= (payload >= 0) & (partial == 0)
    chunk = np.where(is_data, payload, 0)
    carries = (kind == Kind.RESULT) | (kind == Kind.PARTIAL)
    for index_bits, lane_bits in set(zip(ibits[carries & ok].tolist(), lbits[carries & ok].tolist())):
        rows = carries & (ibits == index_bits) & (lbits == lane_bits)
        chunk[rows] = payload[rows] if index_bits == 0 else _indices_chunk(payload[rows], index_bits, lane_bits)
    ok &= np.where(is_data | carries, (chunk >= 1) & (chunk <= words), payload == 0)
    return ok



def _indices_chunk(payload: Any, index_bits: int, lane_bits: int) -> Any:
    """The words of the indices chunk whose lanes are `payload` words (an int, or an array of them), or 0.

    Indices are at least as dense as lanes, so at most one chunk length has a RESULT of `payload` words:
    the most index words whose lanes fit, if their lanes fill exactly `payload` words."""
    per_index, per_lane = fields_per_word(index_bits), fields_per_word(lane_bits)
    words = payload * per_lane // per_index
    return words * (-(-(words * per_index) // per_lane) == payload)
