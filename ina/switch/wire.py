"""Batches of packets to numpy arrays and back: the switch's only contact with bytes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ina.net.frames import Frames
from ina.net.node import Address
from ina.protocol import HEADER_DTYPE, HEADER_LEN, Flag, Kind
from ina.protocol.batch import new_headers, packet_rows
from ina.switch.state import NO_ADDRESS


@dataclass(frozen=True, slots=True)
class Batch:
    """B received packets: `raw`, each cut or zero-padded to a K-word DATA packet's size; their headers
    (HEADER_DTYPE); true byte lengths; payloads as a (B, K) uint32 matrix (meaningful for valid
    DATA only, a short chunk's zero-padded); and source address ids. A valid DATA packet's `raw`
    row begins with its exact bytes (`lengths` of them)."""

    raw: np.ndarray
    headers: np.ndarray
    lengths: np.ndarray
    payload: np.ndarray
    source: np.ndarray


def decode(frames: Frames, words: int, address_ids: dict[Address, int]) -> Batch:
    """Parse a batch without a per-packet parser."""
    count = len(frames)
    raw = frames.rows(HEADER_LEN + 4 * words)
    headers = np.ascontiguousarray(raw[:, :HEADER_LEN]).view(HEADER_DTYPE).reshape(count)
    payload = raw[:, HEADER_LEN:].view(">u4").astype(np.uint32)
    known = np.array([address_ids.get(a, NO_ADDRESS) for a in frames.addresses] + [NO_ADDRESS], dtype=np.int64)
    return Batch(raw, headers, frames.length, payload, known[frames.peer])


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
    hold: bool = False,
    spine: np.ndarray | bool = False,
    rank: np.ndarray | int = 0,
) -> np.ndarray:
    """RESULT, PARTIAL or (a leaf's sum going up) DATA packets (index_bits 0, RESEND clear; HOLD where `hold`, SPINE
    where `spine`) as rows of a uint8 matrix, one per row of `values` (K words: a short chunk's packet is the row's first bytes)."""
    head = new_headers(values.shape[0])
    flags = np.where(op, int(Flag.MAX), 0) | np.where(spine, int(Flag.SPINE), 0) | (int(Flag.HOLD) if hold else 0)
    head["kind"], head["flags"], head["rank"] = int(kind), flags, rank
    head["job"], head["seq"], head["priority"], head["slot"] = job, seq, priority, slot
    head["lane_bits"], head["bitmap"] = lane_bits, bitmap
    return packet_rows(head, values)
