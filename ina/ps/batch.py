"""Header decoding for a batch of datagrams, vectorized when the batch is big enough.

The PS sees a copy of every switch-completed result plus all diverted traffic, so the
fixed per-packet cost matters. `valid_mask` checks a whole batch in one numpy pass but
has a fixed cost of a few hundred microseconds; below `VECTOR_MIN` packets the struct
codec (`parse`) is cheaper. Both apply the same rules (tests in test_protocol hold them to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ina.net.node import Datagram
from ina.protocol import HEADER_DTYPE, HEADER_LEN, MalformedPacket, parse
from ina.protocol.header import valid_mask

VECTOR_MIN = 32


class Fields(NamedTuple):
    """The header fields the PS acts on, as plain ints."""

    kind: int
    flags: int
    job: int
    rank: int
    seq: int
    slot: int
    index_bits: int
    lane_bits: int
    bitmap: int


_COLUMNS = Fields._fields


def decode(datagrams: Sequence[Datagram], words: int) -> list[Fields | None]:
    """The header of each datagram, or None where it is malformed."""
    if len(datagrams) < VECTOR_MIN:
        return [_decode_one(d.data, words) for d in datagrams]
    heads = np.frombuffer(b"".join(bytes(d.data[:HEADER_LEN]).ljust(HEADER_LEN, b"\0") for d in datagrams), HEADER_DTYPE)
    lengths = np.fromiter((len(d.data) for d in datagrams), dtype=np.int64, count=len(datagrams))
    ok = valid_mask(heads, lengths, words).tolist()
    columns = zip(*(heads[name].tolist() for name in _COLUMNS))
    return [Fields(*row) if good else None for row, good in zip(columns, ok)]


def _decode_one(data: bytes, words: int) -> Fields | None:
    try:
        h, _ = parse(data, words)
    except MalformedPacket:
        return None
    return Fields(int(h.kind), int(h.flags), h.job, h.rank, h.seq, h.slot, h.index_bits, h.lane_bits, h.bitmap)
