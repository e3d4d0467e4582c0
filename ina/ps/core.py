"""The parameter server as a sans-IO `Node` and `ControlTarget` (docs/protocol.md, section 6).

It completes what the switch does not (collisions, preempted or flushed partials,
retransmissions), answers resends from its ring of recent results, asks the switch to
flush chunks that stall, and is the whole aggregator when a job has no switch. Not
thread-safe: the server serializes packet handling, timers and control calls.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ina.control import JobSpec
from ina.control.policy import caller, check_owner
from ina.control.watch import Waiting, words_of
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Header, Kind
from ina.protocol.batch import read_headers
from ina.ps.job import Chunk, ChunkFormat, Fetch, JobState
from ina.ps.limits import MAX_WORDS, admit, check_options, describe

_MAX = int(Flag.MAX)  # plain ints: Flag arithmetic costs microseconds per packet
_RESEND = int(Flag.RESEND)
_HOLD = int(Flag.HOLD)
_SPINE = int(Flag.SPINE)

FLUSH_CAP = 1.0
"""Longest wait between two FLUSH requests for one chunk, seconds (section 6)."""

COUNTERS = (
    "rx", "tx", "rx_data", "rx_partial", "rx_result",
    "pieces", "completed", "results_replayed", "result_copies", "results_returned", "status_sent", "flush_sent",
    "fetch_sent", "fetched",
    # drops, by reason
    "malformed", "unexpected", "unregistered", "bad_format", "bad_bitmap", "mismatch",
    "duplicate", "late", "stale", "unsolicited", "overloaded", "expired", "retired", "superseded",
)  # fmt: skip


class ParameterServer:
    """The PS for one deployment of `words` (K) payload words per DATA packet.

    `flush_delay`: how long a chunk may stay incomplete before the PS asks the switch to
    flush it; `piece_timeout`: when the pieces of a chunk that never completes are dropped;
    `result_retention`: results kept per job, at least `4 * window`.

    >>> ps = ParameterServer(words=64)
    >>> ps.register(spec)                        # a JobSpec, usually via the control API
    >>> replies = ps.receive(datagrams, now)     # Datagrams to send
    >>> replies += ps.tick(now)                  # at ps.next_deadline()
    """

    role = "ps"

    def __init__(self, words: int, *, flush_delay: float = 0.002, piece_timeout: float = 60.0, result_retention: int = 64,
                 max_words: int = MAX_WORDS) -> None:  # fmt: skip
        check_options(words, flush_delay, piece_timeout, result_retention, max_words)
        self.words = words
        self.max_words = max_words
        self.flush_delay = flush_delay
        self.piece_timeout = piece_timeout
        self.result_retention = result_retention
        self._jobs: dict[int, JobState] = {}
        self._flushes: list[tuple[float, int, JobState, Chunk]] = []
        """Heap of FLUSH timers; entries of chunks that completed meanwhile are skipped."""
        self._order = itertools.count()
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._own_words = 0
        """Registered jobs with a K of their own: while there are none, every packet is checked against `words`."""

    # --- Node -------------------------------------------------------------------------

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        out: list[Datagram] = []
        fields = self._headers(datagrams)
        lanes = self._lookup(datagrams, fields)
        for i, (datagram, f) in enumerate(zip(datagrams, fields)):
            self._handle(datagram, f, lanes.get(i), now, out)
        self._counts["rx"] += len(datagrams)
        self._counts["tx"] += len(out)
        return out

    def tick(self, now: float) -> list[Datagram]:
        out: list[Datagram] = []
        while self._flushes and self._flushes[0][0] <= now:
            entry = heapq.heappop(self._flushes)
            if self._is_current(entry):
                self._flush(entry[2], entry[3], now, out)
        for job in self._jobs.values():
            while job.pending:
                oldest = next(iter(job.pending.values()))
                if oldest.created + self.piece_timeout > now:
                    break
                self._drop(job, oldest, "expired")
        self._counts["tx"] += len(out)
        return out

    def next_deadline(self) -> float | None:
        while self._flushes and not self._is_current(self._flushes[0]):
            heapq.heappop(self._flushes)
        deadlines = [next(iter(job.pending.values())).created + self.piece_timeout for job in self._jobs.values() if job.pending]
        if self._flushes:
            deadlines.append(self._flushes[0][0])
        return min(deadlines, default=None)

    # --- ControlTarget ----------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return describe(self)

    def register(self, spec: JobSpec) -> dict[str, Any]:
        """Add a job, as the control request's caller may have it (docs/protocol.md, section 7)."""
        spec, owner, words, ring = admit(spec, self._jobs, self.words, self.max_words, self.result_retention)
        state = self._jobs[spec.job] = JobState(spec, words, ring)
        state.owner = owner
        self._own_words += words != self.words
        return {"job": spec.job, "ring": ring}

    def deregister(self, job: int) -> None:
        state = self._jobs.get(job)
        if state is None:
            raise ValueError(f"job {job} is not registered")
        check_owner(caller(), job, state.owner)
        del self._jobs[job]
        self._own_words -= state.words != self.words
        for chunk in state.pending.values():
            chunk.live = False

    def jobs(self) -> list[dict[str, Any]]:
        return [
            {**state.spec.to_json(), "pending": len(state.pending), "results": len(state.ring), "ring": state.ring.capacity,
             "fetching": len(state.fetches), "completed": state.completed, "switch_completed": state.switch_completed,
             **({} if state.owner is None else {"owner": state.owner})}
            for state in self._jobs.values()
        ]

    def counters(self) -> dict[str, int]:
        return dict(self._counts)

    def waiting(self) -> Waiting:
        """Every incomplete chunk: its job, seq (with MAX above bit 32) and the ranks its pieces hold; a racked
        job's ranks are places in its `workers` (rack offset + rank in the rack), up to 32 x 32."""
        rows = [(job, chunk.seq | bool(chunk.format.flags) << 32, state.ranks_held(chunk.pieces.held))
                for job, state in self._jobs.items() for chunk in state.pending.values()]  # fmt: skip
        width = -(-max((len(state.workers) for state in self._jobs.values()), default=1) // 32)
        job, chunk = np.array([row[:2] for row in rows], dtype=np.uint64).reshape(-1, 2).T
        return Waiting(job.astype(np.int64), chunk, words_of([row[2] for row in rows], width))

    # --- packets ----------------------------------------------------------------------

    def _headers(self, datagrams: Sequence[Datagram]) -> list[Header | None]:
        """Each datagram's header, its length checked against its job's K (the PS's own for a job it does not know)."""
        packets = [d.data for d in datagrams]
        if not self._own_words:
            return read_headers(packets, self.words)
        groups: dict[int, list[int]] = {}
        for i, packet in enumerate(packets):
            job = self._jobs.get(int.from_bytes(packet[4:6], "big")) if len(packet) >= 6 else None
            groups.setdefault(self.words if job is None else job.words, []).append(i)
        fields: list[Header | None] = [None] * len(packets)
        for words, members in groups.items():
            for i, f in zip(members, read_headers([packets[i] for i in members], words)):
                fields[i] = f
        return fields

    def _lookup(self, datagrams: Sequence[Datagram], fields: list[Header | None]) -> dict[int, np.ndarray]:
        """Table lanes of every indices DATA in the batch, one vectorized lookup per job and chunk length."""
        rows: dict[tuple[int, int], list[int]] = {}
        for i, f in enumerate(fields):
            if f is not None and f.index_bits and f.kind == Kind.DATA:
                job = self._jobs.get(f.job)
                if job is not None and job.format_ok(f):
                    rows.setdefault((f.job, len(datagrams[i].data)), []).append(i)
        lanes: dict[int, np.ndarray] = {}
        for (job_id, length), members in rows.items():
            payload = b"".join(datagrams[i].data[HEADER_LEN:] for i in members)
            words = np.frombuffer(payload, dtype=">u4").reshape(len(members), (length - HEADER_LEN) // 4).astype(np.uint32)
            lanes.update(zip(members, self._jobs[job_id].table.lanes(words)))
        return lanes

    def _handle(self, datagram: Datagram, f: Header | None, lanes: np.ndarray | None, now: float, out: list[Datagram]) -> None:
        if f is None:
            self._counts["malformed"] += 1
            return
        if f.kind not in (Kind.DATA, Kind.PARTIAL, Kind.RESULT):
            self._counts["unexpected"] += 1
            return
        job = self._jobs.get(f.job)
        if job is None:
            self._counts["unregistered"] += 1
        elif f.kind == Kind.DATA:
            self._counts["rx_data"] += 1
            self._on_data(job, f, datagram, lanes, now, out)
        elif f.kind == Kind.PARTIAL:
            self._counts["rx_partial"] += 1
            self._on_piece(job, f, datagram, now, out)
        else:
            self._counts["rx_result"] += 1
            self._on_result(job, f, datagram, out)

    def _on_data(self, job: JobState, f: Header, datagram: Datagram, lanes: np.ndarray | None, now: float, out: list[Datagram]) -> None:
        if f.flags & _SPINE and job.racks is not None:  # a rack's sum, sent up by its leaf: a piece as a PARTIAL is
            self._on_piece(job, f, datagram, now, out)
            return
        worker = job.data_worker(f.rank, datagram.addr)
        if worker is None:
            self._counts["unregistered"] += 1
            return
        if not job.format_ok(f):
            self._counts["bad_format"] += 1
            return
        job.observe(f.seq)
        fmt = ChunkFormat.of(f, len(datagram.data))
        stored = job.ring.get(f.seq)
        if stored is not None:
            if stored.is_max != bool(f.flags & _MAX):
                self._counts["mismatch"] += 1
                return
            out.append(Datagram(stored.packet, job.workers[worker]))
            self._counts["results_replayed"] += 1
            return
        if job.proven_complete(f.seq):
            # Completed at the switch, but its RESULT reached neither this worker nor the PS:
            # another worker holds it, and a full STATUS says every rank contributed.
            self._counts["stale"] += 1
            if f.flags & _RESEND:
                self._fetch(job, worker, f.seq, fmt, now, out)
                self._status(job, worker, f.seq, fmt, job.full, out)
            return
        sums = lanes if lanes is not None else _payload(datagram)
        chunk = self._add_piece(job, f.seq, job.bits[worker], fmt, sums, now, out)
        if chunk is not None and f.flags & _RESEND:
            if job.switch is not None:
                # It may have completed at the switch with this worker's RESULT and the PS's copy lost, and (its
                # last chunks) no later chunk ever lets the window prove it. Usually the copy or the partials are
                # on their way: fetched only when the worker resends it again, after its timeout.
                self._fetch(job, worker, f.seq, fmt, now, out, repeated_only=True)
            self._status(job, worker, f.seq, fmt, chunk.pieces.held, out)

    def _status(self, job: JobState, worker: int, seq: int, fmt: ChunkFormat, held: int, out: list[Datagram]) -> None:
        """Tell a resending worker (its place in `workers`) which workers' contributions the PS holds."""
        status = _header(Kind.STATUS, job.spec.job, seq, fmt, job.status_bitmap(held, worker)).pack()
        out.append(Datagram(status, job.workers[worker]))
        self._counts["status_sent"] += 1

    def _on_piece(self, job: JobState, f: Header, datagram: Datagram, now: float, out: list[Datagram]) -> None:
        """A PARTIAL, or a racked job's DATA with SPINE (a rack's sum): a piece from a switch, never answered."""
        bitmap = job.piece_bitmap(f, datagram.addr)
        if isinstance(bitmap, str):
            self._counts[bitmap] += 1
        elif not job.format_ok(f):
            self._counts["bad_format"] += 1
        else:
            job.observe(f.seq)
            if job.ring.get(f.seq) is not None:
                self._counts["late"] += 1
            elif job.proven_complete(f.seq):
                self._counts["stale"] += 1
            else:
                self._add_piece(job, f.seq, bitmap, ChunkFormat.of(f, len(datagram.data)), _payload(datagram), now, out)

    def _on_result(self, job: JobState, f: Header, datagram: Datagram, out: list[Datagram]) -> None:
        """A RESULT copy from the switch, or a worker's answer to a FETCH."""
        if datagram.addr == job.switch:
            if f.bitmap != job.result_bitmap:
                self._counts["bad_bitmap"] += 1
                return
            job.observe(f.seq)
            if f.flags & _HOLD:  # atp: the switch holds the slot until this comes back, stored before or not
                out.append(Datagram(bytes(datagram.data), job.switch))
                self._counts["results_returned"] += 1
            if not self._store(job, f, datagram, out):
                self._counts["duplicate"] += 1
                return
            self._counts["result_copies"] += 1
            job.switch_completed += 1
        elif datagram.addr in job.index:
            fetch = job.fetches.get(f.seq)
            if fetch is None:  # never asked for, or another worker answered first
                self._counts["unsolicited"] += 1
            elif f.bitmap != job.result_bitmap:
                self._counts["bad_bitmap"] += 1
            elif ChunkFormat.of(f, len(datagram.data)) != fetch.format:
                self._counts["mismatch"] += 1
            else:
                self._store(job, f, datagram, out)
                self._counts["fetched"] += 1
        else:
            self._counts["unregistered"] += 1

    def _store(self, job: JobState, f: Header, datagram: Datagram, out: list[Datagram]) -> bool:
        """Keep a RESULT received (as received), drop the chunk's pieces and answer the workers that
        asked for it; False if it is stored already."""
        packet = bytes(datagram.data)
        if not job.ring.put(f.seq, bool(f.flags & _MAX), packet):
            return False
        chunk = job.pending.get(f.seq)
        if chunk is not None:
            self._drop(job, chunk, "superseded")
        fetch = job.fetches.pop(f.seq, None)
        if fetch is not None:
            out.extend(Datagram(packet, w) for place, w in enumerate(job.workers) if fetch.requesters >> place & 1)
            self._counts["results_replayed"] += fetch.requesters.bit_count()
        return True

    def _fetch(self, job: JobState, worker: int, seq: int, fmt: ChunkFormat, now: float, out: list[Datagram], *,
               repeated_only: bool = False) -> None:  # fmt: skip
        """A worker (its place in `workers`) resent a chunk (of format `fmt`) whose result the PS lacks: remember
        it, and ask the job's other workers (each keeps its newest 2W results) at most once per `flush_delay`;
        `repeated_only`: only if this worker resent it before (its first resend is only remembered)."""
        fetch = job.fetches.get(seq)
        first = fetch is None or not fetch.requesters >> worker & 1
        if fetch is None:
            if len(job.fetches) >= job.pending_cap:
                job.fetches.popitem(last=False)
                self._counts["overloaded"] += 1
            fetch = job.fetches[seq] = Fetch(fmt)
        elif fetch.format != fmt:
            self._counts["mismatch"] += 1
            return
        fetch.requesters |= 1 << worker
        if (repeated_only and first) or (fetch.sent_at is not None and now < fetch.sent_at + self.flush_delay):
            return
        fetch.sent_at = now
        # Every other worker, earlier requesters too: one may have got the result since it asked.
        packet = _header(Kind.FETCH, job.spec.job, seq, fmt).pack()
        out.extend(Datagram(packet, w) for place, w in enumerate(job.workers) if place != worker)
        self._counts["fetch_sent"] += len(job.workers) - 1

    def _add_piece(self, job: JobState, seq: int, bitmap: int, fmt: ChunkFormat, sums: np.ndarray, now: float,
                   out: list[Datagram]) -> Chunk | None:  # fmt: skip
        """Add a piece (`bitmap`, as the job's pieces name workers, and `sums`) to chunk `seq`; the chunk if it is
        still incomplete, None if it completed or the piece was refused."""
        chunk = job.pending.get(seq)
        if chunk is None:
            if len(job.pending) >= job.pending_cap:
                self._counts["overloaded"] += 1
                return None
            chunk = Chunk(seq, fmt, job.full, now, self.flush_delay)
            job.pending[seq] = chunk
            if job.switch is not None:
                self._schedule(job, chunk)
        elif chunk.format != fmt:
            self._counts["mismatch"] += 1
            return None
        if bitmap & (bitmap - 1) and len(chunk.pieces) >= job.piece_cap:
            # At most n single-worker pieces exist, so this bounds a chunk's memory and cover search
            # without ever refusing the resends that always make a cover.
            self._counts["overloaded"] += 1
            return chunk
        if not chunk.pieces.add(bitmap, sums):
            self._counts["duplicate"] += 1
            return chunk
        self._counts["pieces"] += 1
        if chunk.pieces.result is None:
            return chunk
        self._complete(job, chunk, out)
        return None

    def _complete(self, job: JobState, chunk: Chunk, out: list[Datagram]) -> None:
        """Send the RESULT to every worker of the job (its group, or each) and keep it for replays."""
        del job.pending[chunk.seq]
        chunk.live = False
        packet = _header(Kind.RESULT, job.spec.job, chunk.seq, chunk.format, job.result_bitmap, job.result_flags).pack(chunk.pieces.result)
        job.ring.put(chunk.seq, bool(chunk.format.flags), packet)
        job.fetches.pop(chunk.seq, None)  # every worker gets the RESULT below
        out.extend(Datagram(packet, to) for to in job.result_to)
        self._counts["completed"] += 1
        job.completed += 1

    def _drop(self, job: JobState, chunk: Chunk, reason: str) -> None:
        """Forget an incomplete chunk; `reason` counts its pieces."""
        del job.pending[chunk.seq]
        chunk.live = False
        self._counts[reason] += len(chunk.pieces)

    # --- FLUSH requests ----------------------------------------------------------------

    def _schedule(self, job: JobState, chunk: Chunk) -> None:
        heapq.heappush(self._flushes, (chunk.flush_at, next(self._order), job, chunk))

    @staticmethod
    def _is_current(entry: tuple[float, int, JobState, Chunk]) -> bool:
        due, _, _, chunk = entry
        return chunk.live and chunk.flush_at == due

    def _flush(self, job: JobState, chunk: Chunk, now: float, out: list[Datagram]) -> None:
        """Ask the switch (a racked job's: the spine and every leaf) to flush a stalled chunk, then wait twice as
        long for the next request."""
        if job.proven_complete(chunk.seq):
            self._drop(job, chunk, "retired")
            return
        packet = _header(Kind.FLUSH, job.spec.job, chunk.seq, chunk.format).pack()
        out.extend(Datagram(packet, to) for to in job.flush_to)
        self._counts["flush_sent"] += len(job.flush_to)
        chunk.flush_interval = min(2 * chunk.flush_interval, FLUSH_CAP)
        chunk.flush_at = now + chunk.flush_interval
        self._schedule(job, chunk)


def _payload(datagram: Datagram) -> np.ndarray:
    """The payload words, big-endian, without copying; converted when the chunk completes."""
    return np.frombuffer(datagram.data, dtype=">u4", offset=HEADER_LEN)


def _header(kind: Kind, job: int, seq: int, fmt: ChunkFormat, bitmap: int = 0, flags: int = 0) -> Header:
    """A header for chunk `seq` of `job`: its operation (and `flags`), format and slot, no rank or priority."""
    return Header(kind, job, seq, Flag(fmt.flags | flags), slot=fmt.slot, index_bits=fmt.index_bits, lane_bits=fmt.lane_bits,
                  bitmap=bitmap)
