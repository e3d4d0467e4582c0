"""A worker's packets in batches: DATA built, and the headers of what arrives read, with numpy.

`Header.pack` and `parse` cost microseconds per packet, as much as all the rest of a worker's
per-chunk work; a whole reduction's DATA packets, or a received batch's headers, cost about
as much as one of them when done on arrays. Tests hold both to the per-packet codec's bytes.
"""

from __future__ import annotations

import numpy as np

from ina.net.frames import Frames
from ina.protocol import HEADER_DTYPE, HEADER_LEN, MAGIC, VERSION, Header, MalformedPacket, parse
from ina.protocol.header import valid_mask
from ina.transport.chunks import SEQ_MASK

_HEADER_BYTES = np.arange(HEADER_LEN)
VECTORIZE_FROM = 16


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


def read(frames: Frames, words: int) -> tuple[np.ndarray, np.ndarray]:
    """Every datagram's header (a HEADER_DTYPE record, zero past the end of a short datagram) and
    whether it is a valid packet (docs/protocol.md, section 2).

    A batch of `VECTORIZE_FROM` or more is checked by `valid_mask`, which costs about 60 us a
    batch; a smaller one by `parse`, at about 4 us a packet. They are the protocol's own two
    validators, which its tests hold to agree."""
    headers = _headers(frames)
    if len(frames) >= VECTORIZE_FROM:
        return headers, valid_mask(headers, frames.length, words)
    view = memoryview(frames.buffer)
    spans = zip(frames.start.tolist(), frames.length.tolist())
    return headers, np.array([_parses(view[start : start + length], words) for start, length in spans], dtype=bool)


def _parses(data: memoryview, words: int) -> bool:
    try:
        parse(data, words)
    except MalformedPacket:
        return False
    return True


def _headers(frames: Frames) -> np.ndarray:
    if not frames.buffer.size:
        return np.zeros(len(frames), dtype=HEADER_DTYPE)
    at = frames.start[:, None] + _HEADER_BYTES
    if frames.length.min() >= HEADER_LEN:
        return frames.buffer[at].view(HEADER_DTYPE).reshape(len(frames))
    inside = _HEADER_BYTES < frames.length[:, None]
    raw = np.where(inside, frames.buffer[np.where(inside, at, 0)], 0).astype(np.uint8)
    return raw.view(HEADER_DTYPE).reshape(len(frames))


def gather(frames: Frames, rows: np.ndarray, size: int) -> np.ndarray:
    """Datagrams `rows` (each at least `size` bytes long) as the rows of a (len(rows), size) uint8 matrix: a copy."""
    return frames.buffer[frames.start[rows, None] + np.arange(size)]
