"""Batches of datagrams to numpy arrays and back: the switch's only contact with bytes."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Sequence

import numpy as np

from ina.net.node import Address, Datagram
from ina.protocol import HEADER_DTYPE, HEADER_LEN, MAGIC, VERSION, Flag, Kind
from ina.switch.state import NO_ADDRESS


@dataclass(frozen=True, slots=True)
class Batch:
    """B received packets: headers (HEADER_DTYPE, zero-filled when short), true byte lengths,
    DATA payloads as a (B, K) uint32 matrix (garbage for other packets), and source address ids."""

    headers: np.ndarray
    lengths: np.ndarray
    payload: np.ndarray
    source: np.ndarray
    data: list[bytes]


def decode(datagrams: Sequence[Datagram], words: int, address_ids: dict[Address, int]) -> Batch:
    """Parse a batch without a per-packet parser: every datagram is cut or zero-padded to one DATA length."""
    size = HEADER_LEN + 4 * words
    data = list(map(attrgetter("data"), datagrams))
    count = len(data)
    lengths = np.fromiter(map(len, data), dtype=np.int64, count=count)
    regular = data if (lengths == size).all() else [d[:size].ljust(size, b"\0") for d in data]
    raw = np.frombuffer(b"".join(regular), dtype=np.uint8).reshape(count, size)
    headers = np.ascontiguousarray(raw[:, :HEADER_LEN]).view(HEADER_DTYPE).reshape(count)
    payload = raw[:, HEADER_LEN:].view(">u4").astype(np.uint32)
    ids = address_ids.get
    source = np.array([ids(addr, NO_ADDRESS) for addr in map(attrgetter("addr"), datagrams)], dtype=np.int64)
    return Batch(headers, lengths, payload, source, data)


def encode(
    kind: Kind,
    job: np.ndarray,
    seq: np.ndarray,
    op: np.ndarray,
    priority: np.ndarray,
    slot: np.ndarray,
    lane_bits: np.ndarray,
    bitmap: np.ndarray,
    values: np.ndarray,
) -> list[bytes]:
    """RESULT or PARTIAL packets (rank 0, index_bits 0, RESEND clear), one per row of `values`."""
    count, words = values.shape
    head = np.zeros(count, dtype=HEADER_DTYPE)
    head["magic"], head["version"], head["kind"] = MAGIC, VERSION, int(kind)
    head["flags"] = np.where(op, int(Flag.MAX), 0)
    head["job"], head["seq"], head["priority"], head["slot"] = job, seq, priority, slot
    head["lane_bits"], head["bitmap"] = lane_bits, bitmap
    rows = np.concatenate([head.view(np.uint8).reshape(count, HEADER_LEN), values.astype(">u4").view(np.uint8)], axis=1)
    size = rows.shape[1]
    flat = rows.tobytes()
    return [flat[i * size : (i + 1) * size] for i in range(count)]
