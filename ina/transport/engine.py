"""The worker-side transport engine (docs/protocol.md, sections 3, 4, 8 and 9) as a sans-IO `Node`.

A worker submits reductions (arrays of 32-bit words); the engine cuts them into K-word
chunks numbered by the job's chunk stream, keeps at most W of them outstanding, resends
what times out, and hands back each reduction's sums once every chunk's RESULT is in.
The same object runs behind a UDP socket (`ina.net.udp`) and inside the simulator.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal, Sequence

import numpy as np

from ina.net.frames import Frames
from ina.net.node import Address, Datagram
from ina.protocol import HEADER_DTYPE, HEADER_LEN, Flag, Header, Kind, result_words
from ina.protocol.constants import LANE_WIDTHS, MAX_INDEX_BITS, MAX_WORKERS
from ina.transport.chunks import NO_STATUS, SEQ_MASK, Outstanding, Reduction, ResultStore, result_length
from ina.transport.errors import TransportError
from ina.transport.packets import data_packets, gather, read
from ina.transport.priority import MAX_PRIORITY, IntensityPriority, PriorityPolicy
from ina.transport.rto import RttEstimator

_FLAGS_AT = HEADER_DTYPE.fields["flags"][1]
_PRIORITY_AT = HEADER_DTYPE.fields["priority"][1]
# Plain ints: comparing with an IntEnum or IntFlag member costs several times more, per packet.
_RESULT, _STATUS, _FETCH = int(Kind.RESULT), int(Kind.STATUS), int(Kind.FETCH)
_MAX, _RESEND = int(Flag.MAX), int(Flag.RESEND)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One worker's view of its job's deployment (times in seconds).

    `destination` is where DATA goes: the switch, or the PS in PS-only mode (`ps_only`,
    where every chunk uses slot 0). `sources` are the addresses RESULT and STATUS may
    come from: the switch and the PS (so the PS is the destination in PS-only mode, else
    the other source). `first_seq` is the job's first chunk number (0; tests start near
    2^32 to cross the wrap).
    """

    job: int
    rank: int
    workers: int
    words: int
    window: int
    destination: Address
    sources: frozenset[Address]
    pool: int = 1
    slot_base: int = 0
    ps_only: bool = False
    min_rto: float = 0.005
    max_rto: float = 1.0
    initial_rto: float = 0.05
    peer_timeout: float = 30.0
    first_seq: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.job < 1 << 16:
            raise ValueError(f"job id {self.job} must be in 0..65535")
        if not 1 <= self.workers <= MAX_WORKERS or not 0 <= self.rank < self.workers:
            raise ValueError(f"rank {self.rank} of {self.workers} workers: need 0 <= rank < workers <= {MAX_WORKERS}")
        if self.words < 1:
            raise ValueError(f"words per packet must be positive, got {self.words}")
        if self.pool < 1 or self.pool & (self.pool - 1):
            raise ValueError(f"pool must be a power of two, got {self.pool}")
        if self.window < 1 or (not self.ps_only and self.window > self.pool):
            raise ValueError(f"window must be in 1..pool ({self.pool}), got {self.window}")
        if not 0 < self.min_rto <= self.initial_rto <= self.max_rto < self.peer_timeout:
            raise ValueError("need 0 < min_rto <= initial_rto <= max_rto < peer_timeout")
        if self.destination not in self.sources or len(self.sources) > 2:
            raise ValueError(f"the result sources {set(self.sources)} must be the destination {self.destination} "
                             "and at most one other address (the switch and the PS)")

    @property
    def ps(self) -> Address | None:
        """The job's PS, the only peer whose FETCH a worker answers; None if the config names none."""
        if self.ps_only:
            return self.destination
        others = self.sources - {self.destination}
        return next(iter(others)) if others else None

    def slot(self, seq: np.ndarray) -> np.ndarray | int:
        """The slots of chunks `seq` (unwrapped): `(slot_base + seq) mod pool`, or 0 in PS-only mode."""
        return 0 if self.ps_only else (self.slot_base + seq) & (self.pool - 1)

    def describe_destination(self) -> str:
        host, port = self.destination
        return f"{'PS' if self.ps_only else 'switch'} at {host}:{port}"


class _Outgoing:
    """What one call sends, in order: answers to FETCHes (to the PS), then DATA rows (to the destination)."""

    __slots__ = ("answers", "rows")

    def __init__(self) -> None:
        self.answers: list[Datagram] = []
        self.rows: list[np.ndarray] = []

    def frames(self, destination: Address) -> Frames:
        """One buffer of everything (the rows are copied: they may be views of a reduction's packets)."""
        data = Frames.of_rows(np.concatenate(self.rows), destination) if self.rows else Frames.empty()
        return Frames.join([Frames.of(self.answers), data]) if self.answers else data


class Engine:
    """A worker's chunk stream: window, retransmission, delivery (see module docstring).

    Drive it as a `Node`, or with `receive_frames` and `tick_frames`, the same with `Frames`
    (what a batched socket moves); `submit` queues a reduction and makes `next_deadline()`
    due so the driver's `tick` sends it. Collect results with `completed()`; a peer that
    stays silent for `peer_timeout` sets `error` (a `TransportError`) and stops the engine.
    It keeps its newest 2W results to answer its PS's FETCH (the PS lost a result another
    worker needs). `counters`: sent, resent, delivered, status, fetch_answered, and drops:
    foreign (not from the switch or PS), malformed, unexpected (wrong job, kind, format,
    or a FETCH not from the PS), late (no such outstanding chunk), fetch_missing (a FETCH
    for a result not kept); failed.

    Everything is done a batch at a time on arrays: a reduction's DATA packets are built when
    it is submitted, a burst leaves as one block of rows, and a received batch's headers are
    read and its RESULTs accepted together (in arrival order wherever order matters: see
    `_accept`). There is no Python object per chunk.
    Not thread-safe: a transport that submits from the training thread while a runner
    thread feeds packets must serialize the calls and wake the runner after `submit`.
    """

    def __init__(self, config: EngineConfig, policy: PriorityPolicy | None = None) -> None:
        self.config = config
        self.policy: PriorityPolicy = policy if policy is not None else IntensityPriority()
        self.rtt = RttEstimator(config.initial_rto, config.min_rto, config.max_rto)
        self.counters: Counter[str] = Counter()
        self.error: TransportError | None = None
        self._full = (1 << config.workers) - 1
        self._next_seq = config.first_seq  # the next chunk submitted
        self._next_send = config.first_seq  # the next chunk sent for the first time
        self._next_handle = 0
        self._unsent: deque[Reduction] = deque()  # reductions with chunks not sent yet; the first holds _next_send
        self._reductions: deque[Reduction] = deque()  # not yet collected by completed()
        self._outstanding = Outstanding(config.window)
        self._results = ResultStore(2 * config.window)

    # ----------------------------------------------------------------- the worker's side

    def submit(
        self,
        words: np.ndarray,
        *,
        op: Literal["sum", "max"] = "sum",
        lane_bits: int,
        index_bits: int = 0,
        now: float,
    ) -> int:
        """Queue one reduction of uint32 `words`; returns its handle (handles count up from 0).

        `lane_bits` is the width of the sum lanes (32 for `max`); `index_bits > 0` sends packed
        THC indices for the PS to look up (PS-only mode). The result has `len(words)` words
        for lanes, and `result_words(K, index_bits, lane_bits)` words per chunk for indices.
        """
        if self.error is not None:
            raise self.error
        words = np.asarray(words)
        if words.dtype != np.uint32 or words.ndim != 1 or words.size == 0:
            raise ValueError(f"submit a non-empty 1-D uint32 array, got {words.dtype} of shape {words.shape}")
        if op not in ("sum", "max"):
            raise ValueError(f"op must be 'sum' or 'max', got {op!r}")
        if lane_bits not in LANE_WIDTHS or (op == "max" and lane_bits != 32):
            raise ValueError(f"lane_bits must be one of {LANE_WIDTHS} (32 for max), got {lane_bits}")
        if not 0 <= index_bits <= MAX_INDEX_BITS or (index_bits and (op == "max" or not self.config.ps_only)):
            raise ValueError(f"index_bits {index_bits}: indices (1..{MAX_INDEX_BITS}) are summed only by the PS, in PS-only mode")
        config = self.config
        chunks = -(-words.size // config.words)
        seqs = np.arange(self._next_seq, self._next_seq + chunks, dtype=np.int64)
        flags = Flag.MAX if op == "max" else Flag.NONE
        template = Header(Kind.DATA, config.job, 0, flags, config.rank, 0, 0, index_bits, lane_bits, 1 << config.rank)
        reduction = Reduction(
            self._next_handle, self._next_seq, data_packets(template, seqs, config.slot(seqs), words, config.words),
            (int(flags), lane_bits, index_bits), result_words(config.words, index_bits, lane_bits),
            result_length(words.size, chunks, config.words, index_bits, lane_bits), now,
        )  # fmt: skip
        self._next_handle += 1
        self._next_seq += chunks
        self._reductions.append(reduction)
        self._unsent.append(reduction)
        self.policy.observe(4 * words.size, now)
        return reduction.handle

    def completed(self) -> list[tuple[int, np.ndarray]]:
        """Reductions finished since the last call, as (handle, sums), in submission order."""
        done = []
        while self._reductions and self._reductions[0].done:
            reduction = self._reductions.popleft()
            done.append((reduction.handle, reduction.words()))
        return done

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing outstanding."""
        return self._next_send == self._next_seq and not self._outstanding.count

    # ----------------------------------------------------------------- the Node interface

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        return self.receive_frames(Frames.of(datagrams), now).datagrams()

    def tick(self, now: float) -> list[Datagram]:
        return self.tick_frames(now).datagrams()

    def next_deadline(self) -> float | None:
        if self.error is not None:
            return None
        due = self._outstanding.next_deadline()
        if self._next_send < self._next_seq and self._window_open():
            ready = self._unsent[0].queued_at
            due = ready if due is None else min(due, ready)
        return due

    def receive_frames(self, frames: Frames, now: float) -> Frames:
        """`receive` for a batch in one buffer; the datagrams to send come back the same way."""
        if self.error is not None:
            return Frames.empty()
        out = _Outgoing()
        if len(frames):
            self._accept(frames, now, out)
        self._pump(now, out)
        return out.frames(self.config.destination)

    def tick_frames(self, now: float) -> Frames:
        """`tick`, with the datagrams to send in one buffer: resends in the order their timers ran
        out (by deadline, then seq), then what the window lets go."""
        if self.error is not None:
            return Frames.empty()
        out = _Outgoing()
        chunks = self._outstanding
        due = np.flatnonzero(chunks.waiting & (chunks.deadline <= now))
        if due.size:
            due = due[np.lexsort((chunks.seq[due], chunks.deadline[due]))]
            expired = now >= chunks.first_sent[due] + self.config.peer_timeout
            if expired.any():
                first = int(expired.argmax())
                self._count("resent", first)  # those before it in the order were resent, as far as counting goes
                self._fail(int(due[first]))
                return Frames.empty()
            self._resend(due, now, out)
        self._pump(now, out)
        return out.frames(self.config.destination)

    # ----------------------------------------------------------------- internals

    def _count(self, name: str, n: int) -> None:
        if n:
            self.counters[name] += n

    def _window_open(self) -> bool:
        """The next chunk may go: every chunk <= seq - W has its result."""
        return self._next_send < self._outstanding.oldest(self._next_send) + self.config.window

    def _unwrap(self, wire_seqs: np.ndarray) -> np.ndarray:
        """The unwrapped seqs that 32-bit wire seqs name among the outstanding chunks (which span less than W)."""
        oldest = self._outstanding.oldest(self._next_send)
        return oldest + ((wire_seqs.astype(np.int64) - oldest) & SEQ_MASK)

    def _owners(self, seqs: np.ndarray) -> tuple[list[Reduction], np.ndarray]:
        """The reductions not yet collected, and which of them each of `seqs` (chunks among theirs) belongs to."""
        reductions = list(self._reductions)
        starts = np.fromiter((r.first_seq for r in reductions), dtype=np.int64, count=len(reductions))
        return reductions, np.maximum(np.searchsorted(starts, seqs, side="right") - 1, 0)

    def _pump(self, now: float, out: _Outgoing) -> None:
        """Send every queued chunk the window lets go, a reduction's run of rows at a time."""
        limit = min(self._next_seq, self._outstanding.oldest(self._next_send) + self.config.window)
        if self._next_send >= limit:
            return
        deadline = min(now + self.rtt.backoff(0), now + self.config.peer_timeout)
        self._outstanding.add(np.arange(self._next_send, limit, dtype=np.int64), now, deadline)
        self._count("sent", limit - self._next_send)
        while self._next_send < limit:
            reduction = self._unsent[0]
            first = reduction.first_seq
            begin, end = self._next_send - first, min(reduction.chunks, limit - first)
            rows = reduction.packets[begin:end]
            rows[:, _PRIORITY_AT] = self._priority(reduction, now)
            out.rows.append(rows)
            self._next_send = first + end
            if end == reduction.chunks:
                self._unsent.popleft()

    def _resend(self, due: np.ndarray, now: float, out: _Outgoing) -> None:
        """Send the chunks at entries `due` again, flagged RESEND, and arm their timers for the next (doubled) timeout."""
        chunks = self._outstanding
        chunks.retries[due] += 1
        self._count("resent", due.size)
        seqs = chunks.seq[due]
        reductions, owner = self._owners(seqs)
        owners = [reductions[i] for i in owner.tolist()]
        rows = np.stack([r.packets[seq - r.first_seq] for r, seq in zip(owners, seqs.tolist())])
        rows[:, _FLAGS_AT] |= _RESEND
        rows[:, _PRIORITY_AT] = [self._priority(r, now) for r in owners]
        out.rows.append(rows)
        retries, last = chunks.retries[due].tolist(), (chunks.first_sent[due] + self.config.peer_timeout).tolist()
        chunks.deadline[due] = [min(now + self.rtt.backoff(n), end) for n, end in zip(retries, last)]

    def _priority(self, reduction: Reduction, now: float) -> int:
        """The policy's priority for the reduction's chunks sent at `now` (they were all queued at once)."""
        return max(0, min(self.policy.priority(reduction.queued_at, now), MAX_PRIORITY))

    def _accept(self, frames: Frames, now: float, out: _Outgoing) -> None:
        """Take a batch of datagrams: RESULTs and STATUSes for outstanding chunks, FETCHes from the
        PS (their answers go to `out`); count why not for the rest.

        As if one by one in arrival order: drops are counted for the whole batch; each STATUS and
        FETCH is taken alone, and the runs of RESULTs between them each at once (a FETCH finds the
        results of RESULTs before it, a STATUS after its chunk's RESULT is late)."""
        config = self.config
        headers, valid = read(frames, config.words)
        ours = np.array([address in config.sources for address in frames.addresses], dtype=bool)[frames.peer]
        kind = headers["kind"]
        known = (headers["job"] == config.job) & ((kind == _RESULT) | (kind == _STATUS) | (kind == _FETCH))
        self._count("foreign", int(np.count_nonzero(~ours)))
        self._count("malformed", int(np.count_nonzero(ours & ~valid)))
        self._count("unexpected", int(np.count_nonzero(ours & valid & ~known)))
        rows = np.flatnonzero(ours & valid & known)
        begin = 0
        for position in np.flatnonzero(kind[rows] != _RESULT).tolist():
            if position > begin:
                self._take_results(frames, headers, rows[begin:position], now)
            self._take_one(frames, headers[rows[position]], int(frames.peer[rows[position]]), out)
            begin = position + 1
        if begin < rows.size:
            self._take_results(frames, headers, rows[begin:], now)

    def _take_one(self, frames: Frames, header: np.void, peer: int, out: _Outgoing) -> None:
        """A STATUS (the PS's bitmap of the workers it holds, kept for the error message) or a FETCH."""
        wire_seq = int(header["seq"])
        if header["kind"] == _FETCH:
            self._answer_fetch(wire_seq, frames.addresses[peer], out)
            return
        entry, live = self._outstanding.find(self._unwrap(np.array([wire_seq])))
        if not live[0]:
            self._count("late", 1)
            return
        self._outstanding.status[entry[0]] = int(header["bitmap"])
        self._count("status", 1)

    def _take_results(self, frames: Frames, headers: np.ndarray, rows: np.ndarray, now: float) -> None:
        """A run of RESULTs (batch `rows`, in arrival order): the first of each outstanding chunk that has its
        format and the full bitmap completes it; any before it are `unexpected`, any after it `late`."""
        head = headers[rows]
        seqs = self._unwrap(head["seq"])
        entries, live = self._outstanding.find(seqs)
        if not live.any():
            self._count("late", rows.size)
            return
        reductions, owner = self._owners(seqs)
        formats = np.array([r.format for r in reductions], dtype=np.int64)[owner]
        fits = (
            live & ((head["flags"] & _MAX) == formats[:, 0]) & (head["lane_bits"] == formats[:, 1])
            & (head["index_bits"] == formats[:, 2]) & (head["bitmap"] == self._full)
        )  # fmt: skip
        chunks = self._outstanding
        first = np.full(chunks.seq.size, rows.size)  # by entry: the position of its chunk's first fitting RESULT
        np.minimum.at(first, entries[fits], np.flatnonzero(fits))
        position, taken_at = np.arange(rows.size), first[entries]
        accepted = np.flatnonzero(fits & (position == taken_at))
        self._count("late", int(np.count_nonzero(~live | (position > taken_at))))
        self._count("unexpected", int(np.count_nonzero(live & (position < taken_at))))
        self._count("delivered", accepted.size)
        chunks.complete(entries[accepted])
        sent_once = entries[accepted][chunks.retries[entries[accepted]] == 0]
        for rtt in (now - chunks.first_sent[sent_once]).tolist():  # Karn's rule: a resent chunk's RTT is ambiguous
            self.rtt.sample(rtt)
        for index in sorted(set(owner[accepted].tolist())):
            mine = accepted[owner[accepted] == index]
            reduction = reductions[index]
            packets = gather(frames, rows[mine], HEADER_LEN + 4 * reduction.words_per_result)
            reduction.fill(seqs[mine] - reduction.first_seq, packets[:, HEADER_LEN:].view(">u4"))
            self._results.put(seqs[mine], packets)

    def _answer_fetch(self, wire_seq: int, source: Address, out: _Outgoing) -> None:
        """The PS lost a result that another worker needs: send it ours, as received.

        Only the job's PS may ask (the switch never does), so a worker never sends results
        anywhere else; a chunk not among our newest 2W results is counted, not answered.
        """
        if source != self.config.ps:
            self._count("unexpected", 1)
            return
        packet = self._results.get(wire_seq)
        if packet is None:
            self._count("fetch_missing", 1)
            return
        out.answers.append(Datagram(packet, source))
        self._count("fetch_answered", 1)

    def _fail(self, entry: int) -> None:
        config, chunks = self.config, self._outstanding
        seq, status, retries = int(chunks.seq[entry]), int(chunks.status[entry]), int(chunks.retries[entry])
        reductions, owner = self._owners(np.array([seq]))
        if status == NO_STATUS:
            missing = "no STATUS came from the PS, so it is down or unreachable too, or never got the chunk"
        elif status == self._full:
            missing = ("every rank contributed (the PS's STATUS is full) but the result was lost: the RESULT, "
                       "the PS's copy and the other workers' answers to the PS's FETCH all failed to arrive")
        else:
            ranks = [r for r in range(config.workers) if not status >> r & 1]
            missing = f"the PS holds no contribution from ranks {ranks}"
        self.error = TransportError(
            f"job {config.job}: chunk {seq & SEQ_MASK} (reduction {reductions[owner[0]].handle}) got no result "
            f"within peer_timeout={config.peer_timeout}s from the {config.describe_destination()} "
            f"after {retries} resends; {missing}"
        )
        self._count("failed", 1)
