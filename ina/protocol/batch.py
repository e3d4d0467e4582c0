"""Headers of many packets at once: read and checked with numpy, or built as rows of a byte matrix.

The switch, the PS and the workers all handle packets in batches. `parse` and `Header.pack`
cost microseconds per packet; on arrays a whole batch costs about as much as one of them.
Below `VECTORIZE_FROM` packets `valid_mask`'s fixed cost exceeds that of parsing one by one,
so small batches are parsed; both apply the same rules (tests hold them to it).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ina.protocol.constants import HEADER_LEN, MAGIC, VERSION
from ina.protocol.header import _FLAGS, _KINDS, HEADER_DTYPE, Header, MalformedPacket, parse, valid_mask

VECTORIZE_FROM = 16
"""The smallest batch whose headers `read_headers` checks with numpy rather than one by one."""

_HEADER_BYTES = np.arange(HEADER_LEN)
Spans = tuple[np.ndarray, np.ndarray, np.ndarray]
"""Packets laid out in one buffer: (uint8 buffer, start offset of each packet, length of each packet)."""


def header_records(buffer: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Every packet's first HEADER_LEN bytes as a HEADER_DTYPE record, zero past the end of a short
    one (which `valid_mask` then fails by its length)."""
    count = len(start)
    if not buffer.size:
        return np.zeros(count, dtype=HEADER_DTYPE)
    at = start[:, None] + _HEADER_BYTES
    if length.min() >= HEADER_LEN:
        return buffer[at].view(HEADER_DTYPE).reshape(count)
    inside = _HEADER_BYTES < length[:, None]
    raw = np.where(inside, buffer[np.where(inside, at, 0)], 0).astype(np.uint8)
    return raw.view(HEADER_DTYPE).reshape(count)


def read_headers(packets: Sequence[bytes], words: int, spans: Spans | None = None) -> list[Header | None]:
    """Each packet's header, or None where the packet breaks docs/protocol.md section 2.

    `spans` may give the same packets already in one buffer (the caller's receive buffer)."""
    if len(packets) < VECTORIZE_FROM:
        return [_parsed(packet, words) for packet in packets]
    if spans is None:
        length = np.fromiter(map(len, packets), dtype=np.int64, count=len(packets))
        spans = np.frombuffer(b"".join(packets), dtype=np.uint8), np.cumsum(length) - length, length
    records = header_records(*spans)
    ok = valid_mask(records, spans[2], words).tolist()
    rows = zip(*(records[name].tolist() for name in HEADER_DTYPE.names[2:]))
    return [_header(*row) if good else None for row, good in zip(rows, ok)]


def _parsed(packet: bytes, words: int) -> Header | None:
    try:
        return parse(packet, words)[0]
    except MalformedPacket:
        return None


def _header(kind: int, flags: int, job: int, rank: int, priority: int, seq: int, slot: int, index_bits: int,
            lane_bits: int, bitmap: int) -> Header:  # fmt: skip
    """A valid record's fields (in HEADER_DTYPE order) as a Header."""
    return Header(_KINDS[kind], job, seq, _FLAGS[flags], rank, priority, slot, index_bits, lane_bits, bitmap)


def new_headers(count: int) -> np.ndarray:
    """`count` zeroed HEADER_DTYPE records carrying the protocol's magic and version, to fill in."""
    head = np.zeros(count, dtype=HEADER_DTYPE)
    head["magic"], head["version"] = MAGIC, VERSION
    return head


def packet_rows(headers: np.ndarray, payload: np.ndarray) -> np.ndarray:
    """Packets as rows of a uint8 matrix: row i is `headers[i]` followed by row i of `payload`
    (a (count, words) matrix of 32-bit words, written big-endian)."""
    body = np.ascontiguousarray(payload, dtype=">u4").view(np.uint8)
    return np.concatenate([headers.view(np.uint8).reshape(len(headers), HEADER_LEN), body], axis=1)
