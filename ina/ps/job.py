"""What the PS keeps per registered job: its addresses, incomplete chunks and recent results."""

from __future__ import annotations

from collections import OrderedDict
from typing import NamedTuple

from ina.control import JobSpec
from ina.net.node import Address
from ina.protocol import HEADER_LEN, Flag, Header
from ina.protocol.header import chunk_words
from ina.ps.lookup import IndexTable
from ina.ps.pieces import PieceSet
from ina.ps.results import ResultRing

_MAX = int(Flag.MAX)
SEQ_MASK = 0xFFFFFFFF
HALF_SEQ = 1 << 31


class ChunkFormat(NamedTuple):
    """What every piece of one chunk must agree on: operation, payload format, slot and the chunk's DATA words
    (its workers cut it alike, so a piece of another length is not one of its pieces)."""

    flags: int  # Flag.MAX or 0, as a plain int
    index_bits: int
    lane_bits: int
    slot: int
    words: int

    @classmethod
    def of(cls, f: Header, length: int) -> ChunkFormat:
        """The format of a valid packet `f` of `length` bytes (a STATUS, FLUSH or FETCH: words 0)."""
        words = chunk_words(f.kind, (length - HEADER_LEN) // 4, f.index_bits, f.lane_bits)
        return cls(f.flags & _MAX, f.index_bits, f.lane_bits, f.slot, words)


class Chunk:
    """An incomplete chunk: its pieces and its FLUSH-request timer."""

    __slots__ = ("seq", "format", "pieces", "created", "flush_at", "flush_interval", "live")

    def __init__(self, seq: int, format: ChunkFormat, full: int, created: float, flush_delay: float) -> None:
        self.seq = seq
        self.format = format
        self.pieces = PieceSet(full, bool(format.flags))
        self.created = created
        self.flush_interval = flush_delay
        self.flush_at = created + flush_delay
        self.live = True
        """False once completed, superseded, expired or deregistered: its timers are void."""


class Fetch:
    """A result the PS lacks and a resending worker needs, asked of the job's other workers
    (docs/protocol.md, section 6): the chunk's format, who asked, and when the PS last asked."""

    __slots__ = ("format", "requesters", "sent_at")

    def __init__(self, format: ChunkFormat) -> None:
        self.format = format
        self.requesters = 0
        """Bitmap of the ranks that resent the chunk: they get the result when it comes."""
        self.sent_at: float | None = None


class JobState:
    """One registered job as the PS sees it."""

    __slots__ = ("spec", "words", "full", "workers", "switch", "table", "pending", "pending_cap", "ring", "fetches", "newest", "owner",
                 "completed", "switch_completed", "result_to")

    def __init__(self, spec: JobSpec, words: int, ring_capacity: int) -> None:
        self.spec = spec
        self.words = words
        """K: the most DATA payload words of this job's packets."""
        self.full = spec.full_bitmap
        self.workers: list[Address] = [w.addr for w in spec.workers]
        self.switch: Address | None = spec.switch.addr if spec.switch else None
        self.result_to: list[Address] = [spec.group.addr] if spec.group else self.workers
        """Where a RESULT made here goes: the job's group once, else every worker (docs/protocol.md, section 6)."""
        self.table = IndexTable(spec.table, spec.index_bits, spec.lane_bits) if spec.index_bits else None
        self.pending: OrderedDict[int, Chunk] = OrderedDict()
        """Incomplete chunks by seq, oldest first (so expiry looks only at the front)."""
        self.pending_cap = ring_capacity
        self.ring = ResultRing(ring_capacity)
        self.fetches: OrderedDict[int, Fetch] = OrderedDict()
        """Chunks whose result the PS is fetching from workers, by seq, oldest first; at most `ring`."""
        self.newest: int | None = None
        """The newest seq any worker of the job has sent (serial order)."""
        self.owner: str | None = None
        """The tenant that registered it (docs/protocol.md, section 7); None on an open control API."""
        self.completed = 0
        """Chunks completed here."""
        self.switch_completed = 0
        """Chunks completed at the switch: the RESULT copies it sent here."""

    def sent_by(self, rank: int, src: Address) -> bool:
        """A DATA of `rank` may come from that worker or through the job's switch."""
        return rank < len(self.workers) and (src == self.workers[rank] or src == self.switch)

    def format_ok(self, f: Header) -> bool:
        """The switch's DATA rule (lanes of the job's width, 32 for MAX), and indices only
        with this job's table: what completes at the switch is also accepted here."""
        if f.lane_bits != (32 if f.flags & _MAX else self.spec.lane_bits):
            return False
        table = self.table
        return not f.index_bits or (table is not None and not f.flags & _MAX and f.index_bits == table.index_bits)

    def observe(self, seq: int) -> None:
        """Note that some worker sent chunk `seq`."""
        if self.newest is None or (seq - self.newest) & SEQ_MASK < HALF_SEQ:
            self.newest = seq

    def proven_complete(self, seq: int) -> bool:
        """The window rule (docs/protocol.md, section 4): a worker that sent `newest` holds the
        results of every chunk `<= newest - W`, so those chunks completed somewhere and no
        piece of theirs can ever be needed again."""
        if self.newest is None:
            return False
        behind = (self.newest - seq) & SEQ_MASK
        return self.spec.window <= behind < HALF_SEQ
