"""What the PS keeps per registered job: its addresses, incomplete chunks and recent results."""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict
from typing import NamedTuple

from ina.control import JobSpec
from ina.net.node import Address
from ina.protocol import HEADER_LEN, Flag, Header, Kind
from ina.protocol.constants import MAX_WORKERS
from ina.protocol.header import chunk_words
from ina.ps.lookup import IndexTable
from ina.ps.pieces import PieceSet
from ina.ps.results import ResultRing

_MAX = int(Flag.MAX)
_SPINE = int(Flag.SPINE)
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
        """Bitmap of the workers (by place in the job's `workers`) that resent the chunk: they get the result when it comes."""
        self.sent_at: float | None = None


class Racks:
    """A racked job's two levels as its PS sees them (docs/protocol.md, section 10).

    Pieces are kept under wide bitmaps, worker `l` of rack `r` at bit `32 r + l`, so that the sums of
    both levels merge by the exact cover of section 6: a rack's sum that went through the spine and
    that rack's workers' resends are never both counted. Each packet's wide bitmap follows from its
    source and its `SPINE` flag.
    """

    __slots__ = ("sizes", "offsets", "spine", "all_racks", "_racks", "_leaves", "_workers")

    def __init__(self, spec: JobSpec) -> None:
        assert spec.switch is not None  # JobSpec checks that a racked job names its spine
        self.sizes = spec.racks
        self.offsets = spec.rack_offsets
        self.spine: Address = spec.switch.addr
        self.all_racks = (1 << len(self.sizes)) - 1
        """The bitmap of every rack: what the RESULTs of a racked job carry."""
        self._racks = [((1 << n) - 1) << MAX_WORKERS * r for r, n in enumerate(self.sizes)]
        """Each rack's workers as a wide bitmap."""
        self._leaves: dict[Address, int] = {leaf.addr: r for r, leaf in enumerate(spec.leaves)}
        self._workers: dict[Address, tuple[int, int]] = {
            w.addr: (r, rank) for r, (offset, n) in enumerate(zip(self.offsets, self.sizes)) for rank, w in
            enumerate(spec.workers[offset:offset + n])
        }  # fmt: skip
        """Each worker's rack and rank in it, by address."""

    @property
    def full(self) -> int:
        return sum(self._racks)

    @property
    def leaves(self) -> list[Address]:
        return list(self._leaves)

    def wide_bits(self) -> list[int]:
        """Each worker's wide bit, in the order of the job's `workers`."""
        return [1 << MAX_WORKERS * r + rank for r, n in enumerate(self.sizes) for rank in range(n)]

    def worker(self, rank: int, src: Address) -> int | None:
        """The place in `workers` of a DATA without SPINE: from the worker itself (whose rank in its rack the
        header must carry) or forwarded by its rack's leaf; None if it is neither."""
        where = self._workers.get(src)
        if where is not None:
            return self.offsets[where[0]] + rank if where[1] == rank else None
        rack = self._leaves.get(src)
        return None if rack is None or rank >= self.sizes[rack] else self.offsets[rack] + rank

    def piece_bitmap(self, f: Header, src: Address) -> int | str:
        """The wide bitmap of a PARTIAL or of a rack's sum (a DATA with SPINE), or the counter that refuses it."""
        if f.flags & _SPINE:
            if f.kind != Kind.PARTIAL:  # rank = the rack whose leaf sent its sum up, through the spine or not
                ok = f.rank < len(self.sizes) and (src == self.spine or self._leaves.get(src) == f.rank)
                return self._racks[f.rank] if ok else "unregistered"
            if src != self.spine:
                return "unregistered"
            if not f.bitmap or f.bitmap & ~self.all_racks:
                return "bad_bitmap"
            return sum(full for r, full in enumerate(self._racks) if f.bitmap >> r & 1)
        rack = self._leaves.get(src)
        if rack is None:
            return "unregistered"
        if not f.bitmap or f.bitmap >> self.sizes[rack]:
            return "bad_bitmap"
        return f.bitmap << MAX_WORKERS * rack

    def rack_of(self, worker: int) -> int:
        """The rack of the worker at place `worker` in `workers`."""
        return bisect_right(self.offsets, worker) - 1

    def part(self, held: int, rack: int) -> int:
        """Rack `rack`'s workers in the wide bitmap `held`, as ranks in the rack (what a STATUS to them carries)."""
        return held >> MAX_WORKERS * rack & (1 << self.sizes[rack]) - 1

    def compact(self, held: int) -> int:
        """The wide bitmap `held` by place in `workers` (rack offset + rank in the rack)."""
        return sum(self.part(held, r) << offset for r, offset in enumerate(self.offsets))


class JobState:
    """One registered job as the PS sees it: a job of one switch (or none), or a racked job (docs/protocol.md, section 10)."""

    __slots__ = ("spec", "words", "full", "workers", "switch", "racks", "bits", "index", "result_bitmap", "result_flags", "flush_to",
                 "piece_cap", "table", "pending", "pending_cap", "ring", "fetches", "newest", "owner", "completed", "switch_completed",
                 "result_to")  # fmt: skip

    def __init__(self, spec: JobSpec, words: int, ring_capacity: int) -> None:
        self.spec = spec
        self.words = words
        """K: the most DATA payload words of this job's packets."""
        self.workers: list[Address] = [w.addr for w in spec.workers]
        self.index = {addr: place for place, addr in enumerate(self.workers)}
        """Each worker's place in `workers`, by address."""
        self.switch: Address | None = spec.switch.addr if spec.switch else None
        """The job's switch: its only one, or its spine."""
        self.racks = Racks(spec) if spec.racks else None
        self.full = spec.full_bitmap if self.racks is None else self.racks.full
        """Every worker, as the job's pieces name them: by rank, or under the wide bitmaps of a racked job."""
        self.bits = [1 << place for place in range(len(self.workers))] if self.racks is None else self.racks.wide_bits()
        """Each worker's bit in `full`, in the order of `workers`."""
        self.result_bitmap = self.full if self.racks is None else self.racks.all_racks
        """What every RESULT of the job carries: every rank, or every rack (with SPINE)."""
        self.result_flags = 0 if self.racks is None else _SPINE
        self.flush_to: list[Address] = [] if self.switch is None else [self.switch, *(self.racks.leaves if self.racks else ())]
        """Where a FLUSH request goes: the switch, or the spine and every leaf, since a split may sit at either level."""
        self.piece_cap = 2 * len(self.workers) + (0 if self.racks is None else 2 * len(self.racks.sizes))
        """The pieces one chunk may hold (more than one worker's: single workers' are always taken)."""
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

    def data_worker(self, rank: int, src: Address) -> int | None:
        """The place in `workers` of the sender of a DATA (without SPINE): that worker itself, or forwarded by
        the job's switch (a racked job's: the worker's leaf); None if it may not come from `src`."""
        if self.racks is not None:
            return self.racks.worker(rank, src)
        return rank if rank < len(self.workers) and (src == self.workers[rank] or src == self.switch) else None

    def piece_bitmap(self, f: Header, src: Address) -> int | str:
        """The bitmap of a PARTIAL (or a racked job's DATA with SPINE) as the job's pieces name it, or the
        counter that refuses it: only the job's switch sends PARTIALs, of its workers."""
        if self.racks is not None:
            return self.racks.piece_bitmap(f, src)
        if src != self.switch:
            return "unregistered"
        return f.bitmap if f.bitmap and not f.bitmap & ~self.full else "bad_bitmap"

    def status_bitmap(self, held: int, worker: int) -> int:
        """What a STATUS to the worker at place `worker` carries of the bitmap `held`: its rack's part in a racked job."""
        return held if self.racks is None else self.racks.part(held, self.racks.rack_of(worker))

    def ranks_held(self, held: int) -> int:
        """`held` by place in `workers` (what the watch reads as ranks)."""
        return held if self.racks is None else self.racks.compact(held)

    def format_ok(self, f: Header) -> bool:
        """The switch's DATA rule (lanes of the job's width, 32 for MAX), indices only with this job's
        table, and SPINE only in a racked job: what completes at the switch is also accepted here."""
        if f.flags & _SPINE and self.racks is None:
            return False
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
