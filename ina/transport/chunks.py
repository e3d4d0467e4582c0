"""Reductions cut into chunks, and the chunks' results put back together.

Kept apart from the engine so the window and retransmission logic deals only in chunks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ina.protocol import HEADER_LEN, result_words

SEQ_MASK = 0xFFFFFFFF
"""Sequence numbers are 32 bits on the wire; the engine counts them unwrapped."""


@dataclass(slots=True, eq=False)
class Reduction:
    """One submitted reduction: chunks `first_seq ..` (unwrapped), their DATA packets (the first `lengths[i]`
    bytes of row i of `packets`, priority 0, RESEND clear; the last one's zero bytes beyond its words are
    `padding`), the `format` their RESULTs must have (MAX flag, lane_bits, index_bits) and their payload words
    (`words_per_result`, the last chunk's as long as it), and their results, which fill in as chunks complete,
    in any order (and are copied into `out` at the end, when the submitter gave one)."""

    handle: int
    first_seq: int
    packets: np.ndarray
    lengths: np.ndarray
    padding: int
    format: tuple[int, int, int]
    words_per_result: int
    length: int
    queued_at: float
    out: np.ndarray | None = None
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

    def result_bytes(self, index: int) -> int:
        """The bytes of chunk `index`'s RESULT: as long as the chunk sent (docs/protocol.md, section 2)."""
        if index < self.chunks - 1:
            return HEADER_LEN + 4 * self.words_per_result
        _, lane_bits, index_bits = self.format
        return HEADER_LEN + 4 * result_words((int(self.lengths[index]) - HEADER_LEN) // 4, index_bits, lane_bits)

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def words(self) -> np.ndarray:
        """The sums: lanes trimmed to the submitted length; indices chunk by chunk, untrimmed."""
        sums = self.result.reshape(-1)[: self.length]
        if self.out is None:
            return sums
        self.out[:] = sums
        return self.out


@dataclass(slots=True, eq=False)
class Chunk:
    """An outstanding chunk: row `index` of its reduction's packets, and its transmission state."""

    seq: int
    reduction: Reduction
    index: int
    first_sent: float
    deadline: float
    retries: int = 0
    """Resends of every kind (a chunk without any gives an RTT sample)."""
    timeouts: int = 0
    """Resends on timeout: each doubles the next timeout."""
    short_timer: bool = False
    """Its timeouts count from the short timeout (RttEstimator.short_rto): it was overtaken (a later chunk
    completed, so only a loss holds it) or nothing can overtake it (section 8, "Early resends")."""
    overtaken_by: int = 0
    """Once resent: the chunk whose RESULT shows that resend lost (EngineConfig.early_resend chunks sent after it);
    0 once a STATUS shows the PS holds it."""
    status: int | None = None


class ResultStore:
    """The RESULT packets of a worker's newest `capacity` (2W) chunks, to answer its PS's FETCH.

    A worker that misses chunk `seq`'s result holds back chunk `seq + W`, so no worker gets
    2W chunks past it (docs/protocol.md, section 8): the newest 2W results cover anything the
    PS can ask for. Entries sit at unwrapped seq modulo `capacity`, so storing a result
    evicts the one 2W chunks older and the memory is fixed.
    """

    __slots__ = ("_entries", "_newest")

    def __init__(self, capacity: int) -> None:
        self._entries: list[tuple[int, bytes] | None] = [None] * capacity
        self._newest = 0

    def put(self, seq: int, packet: bytes) -> None:
        """Keep the RESULT of chunk `seq` (unwrapped)."""
        self._entries[seq % len(self._entries)] = (seq, packet)
        self._newest = max(self._newest, seq)

    def get(self, wire_seq: int) -> bytes | None:
        """The kept RESULT of the chunk with this 32-bit seq, or None."""
        seq = self._newest - ((self._newest - wire_seq) & SEQ_MASK)
        entry = self._entries[seq % len(self._entries)]
        return entry[1] if entry is not None and entry[0] == seq else None


def result_length(words: int, chunks: int, per_chunk: int, index_bits: int, lane_bits: int) -> int:
    """How many result words a reduction of `words` input words returns (see Reduction.words)."""
    if index_bits == 0:
        return words
    return chunks * result_words(per_chunk, index_bits, lane_bits)
