"""A worker's DATA packets, a whole reduction at a time, and the payloads of the RESULTs it takes.

`Header.pack` costs microseconds per packet, as much as all the rest of a worker's per-chunk
work; a whole reduction's packets built on arrays cost about as much as one of them. Tests hold
the rows to the per-packet codec. Received headers are read by `ina.protocol.batch.read_headers`.
"""

from __future__ import annotations

import numpy as np

from ina.protocol import HEADER_LEN, Header
from ina.protocol.batch import new_headers, packet_rows
from ina.transport.chunks import SEQ_MASK


def data_packets(template: Header, seqs: np.ndarray, slots: np.ndarray, words: np.ndarray, per_chunk: int) -> np.ndarray:
    """DATA packets as rows of a uint8 matrix: row i is `template` with seq `seqs[i]` (unwrapped) and
    slot `slots[i]`, carrying words `i * per_chunk ...` of `words`, the last row zero-padded (its packet is as
    many of the row's bytes as `data_lengths` says)."""
    count = seqs.size
    head = new_headers(count)
    head["kind"], head["flags"] = int(template.kind), int(template.flags)
    head["job"], head["rank"], head["priority"] = template.job, template.rank, template.priority
    head["seq"], head["slot"] = seqs & SEQ_MASK, slots
    head["index_bits"], head["lane_bits"], head["bitmap"] = template.index_bits, template.lane_bits, template.bitmap
    payload = np.zeros(count * per_chunk, dtype=">u4")
    payload[: words.size] = words
    return packet_rows(head, payload.reshape(count, per_chunk))


def data_lengths(words: int, per_chunk: int, pad: bool) -> np.ndarray:
    """The bytes of each DATA of a reduction of `words` words: `per_chunk` (K) words each, but the last chunk's
    only the words left (docs/protocol.md, section 1), unless `pad` (a receiver that takes only whole chunks)."""
    chunks = -(-words // per_chunk)
    lengths = np.full(chunks, HEADER_LEN + 4 * per_chunk, dtype=np.int64)
    if not pad:
        lengths[-1] = HEADER_LEN + 4 * (words - (chunks - 1) * per_chunk)
    return lengths


def payloads(packets: list[bytes], words: int) -> np.ndarray:
    """The payloads of packets of at most `HEADER_LEN + 4 * words` bytes each, as a (len(packets), words) matrix of
    big-endian words, a short one's zero-padded."""
    size = HEADER_LEN + 4 * words
    return np.frombuffer(b"".join(packet.ljust(size, b"\0") for packet in packets), dtype=">u4").reshape(len(packets), -1)[:, HEADER_LEN // 4 :]
