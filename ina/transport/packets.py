"""A worker's packets in batches: DATA built, and the headers of what arrives read, with numpy.

`Header.pack` and `parse` cost microseconds per packet, as much as all the rest of a worker's
per-chunk work; a whole reduction's DATA packets, or a large received batch's headers, cost
about as much as one of them when done on arrays. Tests hold both to the per-packet codec.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import HEADER_DTYPE, HEADER_LEN, MAGIC, VERSION, Header, MalformedPacket, parse
from ina.protocol.header import valid_mask
from ina.transport.chunks import SEQ_MASK

_HEADER_BYTES = np.arange(HEADER_LEN)
VECTORIZE_FROM = 16
"""The smallest batch whose headers `read` checks with numpy rather than one by one."""


def data_packets(template: Header, seqs: np.ndarray, slots: np.ndarray, words: np.ndarray, per_chunk: int) -> np.ndarray:
    """DATA packets as rows of a uint8 matrix: row i is `template` with seq `seqs[i]` (unwrapped) and
    slot `slots[i]`, carrying words `i * per_chunk ...` of `words`, the last row zero-padded."""
    count = seqs.size
    head = np.zeros(count, dtype=HEADER_DTYPE)
    head["magic"], head["version"], head["kind"], head["flags"] = MAGIC, VERSION, int(template.kind), int(template.flags)
    head["job"], head["rank"], head["priority"] = template.job, template.rank, template.priority
    head["seq"], head["slot"] = seqs & SEQ_MASK, slots
    head["index_bits"], head["lane_bits"], head["bitmap"] = template.index_bits, template.lane_bits, template.bitmap
    payload = np.zeros(count * per_chunk, dtype=">u4")
    payload[: words.size] = words
    rows = np.empty((count, HEADER_LEN + 4 * per_chunk), dtype=np.uint8)
    rows[:, :HEADER_LEN] = head.view(np.uint8).reshape(count, HEADER_LEN)
    rows[:, HEADER_LEN:] = payload.view(np.uint8).reshape(count, 4 * per_chunk)
    return rows


Fields = tuple[bool, int, int, int, int, int, int, int]
"""A received packet as the engine reads it: valid, then kind, job, seq, flags, lane_bits, index_bits, bitmap."""
_FIELDS = ("kind", "job", "seq", "flags", "lane_bits", "index_bits", "bitmap")
_INVALID: Fields = (False, 0, 0, 0, 0, 0, 0, 0)


def read(datagrams: Sequence[Datagram], words: int, frames: Frames | None = None) -> list[Fields]:
    """Every datagram's validity (docs/protocol.md, section 2) and header fields (unspecified where invalid).

    A batch of `VECTORIZE_FROM` or more is read with numpy (from `frames`, the same datagrams in one
    buffer, when the caller has them) and checked by `valid_mask`, which costs about 60 µs a batch;
    a smaller one is parsed packet by packet, at about 4 µs a packet. The two are the protocol's own
    validators, held to agree by its tests."""
    if len(datagrams) < VECTORIZE_FROM:
        return [_parsed(data, words) for data, _ in datagrams]
    frames = frames if frames is not None else Frames.of(datagrams)
    headers = _headers(frames)
    valid = valid_mask(headers, frames.length, words)
    return list(zip(valid.tolist(), *(headers[name].tolist() for name in _FIELDS)))


def _parsed(data: bytes, words: int) -> Fields:
    try:
        h, _ = parse(data, words)
    except MalformedPacket:
        return _INVALID
    return True, int(h.kind), h.job, h.seq, int(h.flags), h.lane_bits, h.index_bits, h.bitmap


def _headers(frames: Frames) -> np.ndarray:
    """Every datagram's first HEADER_LEN bytes as a HEADER_DTYPE record, zero past the end of a short one
    (which `valid_mask` fails by its length)."""
    if not frames.buffer.size:
        return np.zeros(len(frames), dtype=HEADER_DTYPE)
    at = frames.start[:, None] + _HEADER_BYTES
    if frames.length.min() >= HEADER_LEN:
        return frames.buffer[at].view(HEADER_DTYPE).reshape(len(frames))
    inside = _HEADER_BYTES < frames.length[:, None]
    raw = np.where(inside, frames.buffer[np.where(inside, at, 0)], 0).astype(np.uint8)
    return raw.view(HEADER_DTYPE).reshape(len(frames))


def payloads(packets: list[bytes], words: int) -> np.ndarray:
    """The payloads of packets of `HEADER_LEN + 4 * words` bytes each, as a (len(packets), words) matrix of big-endian words."""
    return np.frombuffer(b"".join(packets), dtype=">u4").reshape(len(packets), -1)[:, HEADER_LEN // 4 :]
