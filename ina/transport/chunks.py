"""Reductions cut into chunks, the chunks in flight, and their results put back together.

Kept apart from the engine so the window and retransmission logic deals only in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ina.protocol import result_words

SEQ_MASK = 0xFFFFFFFF
"""Sequence numbers are 32 bits on the wire; the engine counts them unwrapped."""
NO_STATUS = -1
"""An outstanding chunk's status before the PS sent a STATUS for it."""
_NOTHING = np.iinfo(np.int64).min  # the seq of an empty ResultStore entry: those looked up are above -2**32


@dataclass(slots=True, eq=False)
class Reduction:
    """One submitted reduction: chunks `first_seq ..` (unwrapped), their DATA packets (rows of
    `packets`, priority 0, RESEND clear), the `format` their RESULTs must have (MAX flag, lane_bits,
    index_bits), and their results, which fill in as chunks complete, in any order."""

    handle: int
    first_seq: int
    packets: np.ndarray
    format: tuple[int, int, int]
    words_per_result: int
    length: int
    queued_at: float
    result: np.ndarray = field(init=False)
    remaining: int = field(init=False)

    def __post_init__(self) -> None:
        self.result = np.zeros((self.chunks, self.words_per_result), dtype=np.uint32)
        self.remaining = self.chunks

    @property
    def chunks(self) -> int:
        return self.packets.shape[0]

    def fill(self, indices: np.ndarray, sums: np.ndarray) -> None:
        """Chunks `indices` (distinct, not filled before) completed with the rows of `sums`."""
        self.result[indices] = sums
        self.remaining -= indices.size

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def words(self) -> np.ndarray:
        """The sums: lanes trimmed to the submitted length; indices chunk by chunk, untrimmed."""
        return self.result.reshape(-1)[: self.length]


class Outstanding:
    """The chunks sent and not yet completed, as arrays indexed by seq modulo the window W.

    A worker has at most W chunks outstanding, all within W of each other (docs/protocol.md,
    section 4), so they never share an entry; `waiting` marks the entries that hold one. Whole
    bursts are added, and whole batches looked up and completed, without a Python object per chunk.
    """

    __slots__ = ("seq", "first_sent", "deadline", "retries", "status", "waiting", "count")

    def __init__(self, window: int) -> None:
        self.seq = np.zeros(window, dtype=np.int64)  # unwrapped
        self.first_sent = np.zeros(window)
        self.deadline = np.zeros(window)
        self.retries = np.zeros(window, dtype=np.int64)
        self.status = np.zeros(window, dtype=np.int64)  # the PS's latest STATUS bitmap, NO_STATUS before one
        self.waiting = np.zeros(window, dtype=bool)
        self.count = 0

    def add(self, seqs: np.ndarray, now: float, deadline: float) -> None:
        """Chunks `seqs` were sent for the first time at `now`; their timers run out at `deadline`."""
        at = seqs % self.seq.size
        self.seq[at], self.first_sent[at], self.deadline[at] = seqs, now, deadline
        self.retries[at], self.status[at], self.waiting[at] = 0, NO_STATUS, True
        self.count += seqs.size

    def complete(self, entries: np.ndarray) -> None:
        """The chunks at `entries` (distinct, outstanding) have their results."""
        self.waiting[entries] = False
        self.count -= entries.size

    def find(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The entries of chunks `seqs` (unwrapped), and which of them are outstanding."""
        at = seqs % self.seq.size
        return at, self.waiting[at] & (self.seq[at] == seqs)

    def oldest(self, otherwise: int) -> int:
        """The oldest outstanding chunk, or `otherwise` if there is none."""
        return int(self.seq[self.waiting].min()) if self.count else otherwise

    def next_deadline(self) -> float | None:
        return float(self.deadline[self.waiting].min()) if self.count else None


class ResultStore:
    """The RESULT packets of a worker's newest `capacity` (2W) chunks, to answer its PS's FETCH.

    A worker that misses chunk `seq`'s result holds back chunk `seq + W`, so no worker gets
    2W chunks past it (docs/protocol.md, section 8): the newest 2W results cover anything the
    PS can ask for. Entries sit at unwrapped seq modulo `capacity`, so storing a result
    evicts the one 2W chunks older and the memory is fixed (rows as long as the longest RESULT).
    """

    __slots__ = ("_seqs", "_lengths", "_packets", "_newest")

    def __init__(self, capacity: int) -> None:
        self._seqs = np.full(capacity, _NOTHING, dtype=np.int64)
        self._lengths = np.zeros(capacity, dtype=np.int64)
        self._packets = np.zeros((capacity, 0), dtype=np.uint8)
        self._newest = 0

    def put(self, seqs: np.ndarray, packets: np.ndarray) -> None:
        """Keep the RESULTs of chunks `seqs` (unwrapped, distinct modulo the capacity): the rows of `packets`."""
        capacity, size = self._seqs.size, packets.shape[1]
        if size > self._packets.shape[1]:
            grown = np.zeros((capacity, size), dtype=np.uint8)
            grown[:, : self._packets.shape[1]] = self._packets
            self._packets = grown
        at = seqs % capacity
        self._packets[at, :size], self._lengths[at], self._seqs[at] = packets, size, seqs
        self._newest = max(self._newest, int(seqs.max()))

    def get(self, wire_seq: int) -> bytes | None:
        """The kept RESULT of the chunk with this 32-bit seq, or None."""
        seq = self._newest - ((self._newest - wire_seq) & SEQ_MASK)
        at = seq % self._seqs.size
        return self._packets[at, : self._lengths[at]].tobytes() if self._seqs[at] == seq else None


def result_length(words: int, chunks: int, per_chunk: int, index_bits: int, lane_bits: int) -> int:
    """How many result words a reduction of `words` input words returns (see Reduction.words)."""
    if index_bits == 0:
        return words
    return chunks * result_words(per_chunk, index_bits, lane_bits)
