"""The switch's per-packet algorithm (docs/protocol.md, section 5) as a sans-IO `Node`, vectorized.

A batch is validated with masks in one pass. Packets that reach the slots take one of two
routes, both equal to processing the packets one at a time in arrival order:

- runs: a slot whose packets in the batch are all first transmissions of one chunk with
  distinct ranks (the common case) is folded with a few segment operations;
- rounds: every other packet is applied in rounds, each taking the first remaining packet
  of every distinct slot, so a round touches a slot once and the state transition of
  section 5 is a handful of masked numpy operations.

Slots are independent of each other, so state, counters and the output packets (in input
order) are exactly those of one-at-a-time processing; tests/test_switch_batch.py checks it.
Packets come in and go out as `Frames` (one buffer, no Python object per packet); the
`Node` methods convert from and to `Datagram` lists.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Iterator, Sequence

import numpy as np

from ina.control import JobSpec
from ina.control.watch import Waiting
from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Kind
from ina.protocol.constants import FLAGS_OFFSET
from ina.protocol.header import valid_mask
from ina.switch.config import SwitchConfig
from ina.switch.state import Jobs, Role, Slots, TargetSet, key_job, key_op, key_seq, make_keys, target_set
from ina.switch.wire import Batch, decode, encode

DROPS = ("malformed", "unexpected", "unregistered", "bad_slot", "bad_format", "duplicate")
EVENTS = (
    "claimed",  # a chunk took a slot (free, stale replacement or preemption)
    "aggregated",  # a contribution was added to the slot's partial
    "completed",
    "sent_up",  # a leaf's completed chunk: its rack's sum sent to the spine (docs/protocol.md, section 10)
    "preempted",
    "collision",
    "redirected",
    "resend_forwarded",
    "straggler",  # a first transmission older than its job's chunk in the slot, forwarded
    "flushed",  # a RESEND found its own contribution in the slot: partial flushed
    "stale",
    "flush_requests",
    "flush_hits",  # a FLUSH found its chunk in the slot: partial flushed
    "releases",  # atp: a RESULT the PS returned, sent on to the job's workers
    "release_hits",  # ... that found its held result in the slot (or, at a leaf under atp, its held sum): slot freed
    "descended",  # a leaf: a RESULT from the spine, sent on to the rack's workers
    "swept",
)
COUNTERS = ("rx_packets", "tx_packets", *DROPS, *EVENTS)
JOB_COUNTERS = ("completed", "preempting", "preempted", "collisions")
"""Per job: chunks it completed in the switch, slots its packets took from other jobs, slots other
jobs took from it, and its packets that met another job's chunk and went to the PS."""
OUTCOMES = (*DROPS, "redirected", "flushed", "aggregated", "claimed", "resend_forwarded", "straggler", "collision", "flush_requests",
            "releases", "descended")
"""Every received packet is counted under exactly one of these: they sum to rx_packets
(stale and preempted packets also claim; completed, sent_up, flush_hits, release_hits and swept are further events)."""

# Plain ints: numpy compares an array with an IntEnum member several times slower than with an int.
_DATA, _FLUSH, _RESULT = int(Kind.DATA), int(Kind.FLUSH), int(Kind.RESULT)
_MAX, _RESEND, _HOLD, _SPINE = int(Flag.MAX), int(Flag.RESEND), int(Flag.HOLD), int(Flag.SPINE)
_LEAF, _SPINE_ROLE = int(Role.LEAF), int(Role.SPINE)



class _Out:
    """Output packets as they are decided: rows of encoded packets (each packet the first `length` bytes
    of its row), each tagged with the position of the input packet that caused it and a target set
    (section "Jobs": a job's RESULT set, or its PS)."""

    def __init__(self) -> None:
        self.blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, cause: np.ndarray, rows: np.ndarray, length: np.ndarray, target: np.ndarray) -> None:
        if cause.size:
            self.blocks.append((cause, rows, length, target))

    def frames(self, table: Jobs) -> Frames:
        """Every row to every address of its target set, in the order of the input packets (stable:
        a packet's PARTIAL stays before its RESULT), a set's addresses in order."""
        if not self.blocks:
            return Frames.empty()
        cause, rows, length, target = (np.concatenate(parts) for parts in zip(*self.blocks))
        order = np.argsort(cause, kind="stable")  # rows stay where they are: frames point at them in order
        target = target[order]
        fanout = table.set_size[target]
        total = int(fanout.sum())
        within = np.arange(total) - np.repeat(np.cumsum(fanout) - fanout, fanout)
        peer = table.set_members[np.repeat(table.set_start[target], fanout) + within]
        size = rows.shape[1]
        start = np.repeat(order * size, fanout)
        return Frames(rows.reshape(-1), start, np.repeat(length[order], fanout), peer, table.addresses)


@dataclass(frozen=True, slots=True)
class _Packets:
    """The accepted DATA and FLUSH packets of a batch, one array entry per packet."""

    index: np.ndarray  # position in the batch
    data: np.ndarray  # DATA (else FLUSH, a release or a descent)
    release: np.ndarray  # a RESULT with HOLD returned by the PS (atp)
    descend: np.ndarray  # a leaf: a RESULT from the spine
    resend: np.ndarray
    job: np.ndarray  # job table row
    seq: np.ndarray
    slot: np.ndarray
    bit: np.ndarray  # 1 << rank (DATA)
    words: np.ndarray  # payload words (DATA: its chunk's, 1..K)
    prio: np.ndarray  # effective priority min(priority, priority_cap)
    key: np.ndarray

    def take(self, rows: np.ndarray) -> _Packets:
        return _Packets(*(getattr(self, f.name)[rows] for f in fields(self)))


class SwitchCore:
    """The software switch: a `Node` for packets and a `ControlTarget` for its job table.

    Thread-safe: the control API may register jobs while a runner feeds packets.
    """

    role = "switch"

    def __init__(self, config: SwitchConfig) -> None:
        self.settings = config
        self.slots = Slots(config.pool, config.words)
        self.table = Jobs(config.pool, config.policy)
        self._mask = config.pool - 1
        self._counts = dict.fromkeys(COUNTERS, 0)
        self._job_counts = np.zeros((1 << 16, len(JOB_COUNTERS)), dtype=np.int64)
        self._lock = threading.Lock()
        self._hold = config.policy == "atp"  # a completed slot waits for the PS to return its RESULT
        self._result_set = TargetSet.RESULT if config.result_copies else TargetSet.WORKERS

    # -- control plane -------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        return self.settings.to_json()

    def register(self, spec: JobSpec) -> dict[str, Any]:
        with self._lock:
            entry = self.table.add(spec)
        return entry.answer(self.settings.pool)

    def deregister(self, job: int) -> None:
        """Table entry first (its packets are then unregistered), then its slots and redirects."""
        with self._lock:
            self.table.remove(job)
            self.slots.forget_job(job)
            self._job_counts[job] = 0

    def jobs(self) -> list[dict[str, Any]]:
        """The job table, each job with its JOB_COUNTERS."""
        with self._lock:
            return [entry.to_json() | dict(zip(JOB_COUNTERS, self._job_counts[job].tolist())) for job, entry in self.table.entries.items()]

    def counters(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def waiting(self) -> Waiting:
        with self._lock:
            return waiting_in(self.slots.key.copy(), self.slots.bitmap.copy())

    # -- data plane ----------------------------------------------------------------------

    def receive(self, datagrams: Sequence[Datagram], now: float) -> list[Datagram]:
        return self.receive_frames(Frames.of(datagrams), now).datagrams() if datagrams else []

    def receive_frames(self, frames: Frames, now: float) -> Frames:
        """`receive` without a Python object per packet: what `UdpRunner` calls."""
        if not len(frames):
            return Frames.empty()
        with self._lock:
            batch = decode(frames, self.settings.words, self.table.address_ids)
            out = _Out()
            packets = self._admit(batch)
            rest = packets.take(self._aggregate_runs(packets, batch, now, out))
            for rows in _rounds(rest.slot):
                self._apply(rest.take(rows), batch, now, out)
            sent = out.frames(self.table)
            self._counts["rx_packets"] += len(frames)
            self._counts["tx_packets"] += len(sent)
            return sent

    def tick(self, now: float) -> list[Datagram]:
        """Idle sweep: flush every partial untouched for `slot_timeout` to its PS."""
        with self._lock:
            slots = self.slots
            idle = np.flatnonzero((slots.key != 0) & (now - slots.touched >= self.settings.slot_timeout))
            out = _Out()
            out.add(idle, *self._partials(idle, slots.key[idle]))
            slots.redirect[idle] = slots.key[idle]
            slots.key[idle] = 0
            sent = out.frames(self.table)
            self._counts["swept"] += idle.size
            self._counts["tx_packets"] += len(sent)
            return sent.datagrams()

    def next_deadline(self) -> float | None:
        with self._lock:
            held = self.slots.key != 0
            if not held.any():
                return None
            return float(self.slots.touched[held].min()) + self.settings.slot_timeout

    # -- the algorithm -------------------------------------------------------------------

    def _count(self, name: str, mask: np.ndarray) -> None:
        self._counts[name] += int(np.count_nonzero(mask))

    def _count_jobs(self, name: str, keys: np.ndarray) -> None:
        """One more of `name` for the job of each chunk key."""
        if keys.size:
            np.add.at(self._job_counts[:, JOB_COUNTERS.index(name)], key_job(keys), 1)

    def _admit(self, batch: Batch) -> _Packets:
        """The checks of section 5 in order, each failure dropped and counted; returns the survivors."""
        head, table = batch.headers, self.table
        ok = valid_mask(head, batch.lengths, self.settings.words)
        self._count("malformed", ~ok)
        kind = head["kind"]
        data = kind == _DATA
        job = head["job"].astype(np.int64)
        row = table.index[job]
        safe = np.maximum(row, 0)
        role = np.where(row >= 0, table.role[safe], int(Role.ONLY))
        descend = (kind == _RESULT) & (role == _LEAF)
        release = (kind == _RESULT) & self._hold & ~descend
        wanted = data | (kind == _FLUSH) | release | descend
        self._count("unexpected", ok & ~wanted)
        ok &= wanted

        rank = np.minimum(head["rank"].astype(np.int64), 31)
        source = np.where(data, table.worker_id[safe, rank], np.where(descend, table.up_id[safe], table.ps_id[safe]))
        known = (row >= 0) & (~data | (head["rank"] < table.fanin[safe])) & (batch.source == source)
        self._count("unregistered", ok & ~known)
        ok &= known

        seq = head["seq"].astype(np.uint32)
        right_slot = head["slot"] == ((table.slot_base[safe] + (seq & table.span_mask[safe])) & self._mask)
        self._count("bad_slot", ok & ~right_slot)
        ok &= right_slot

        flags = head["flags"]
        op = (flags & _MAX) != 0
        lanes = np.where(op, 32, table.lane_bits[safe])
        spine = (flags & _SPINE) != 0  # a packet of the spine level: DATA at a spine, a RESULT going down (section 10)
        formatted = ~data | ((head["index_bits"] == 0) & (head["lane_bits"] == lanes) & (spine == (role == _SPINE_ROLE)))
        formatted &= ~(data & (role == _SPINE_ROLE) & ((flags & _RESEND) != 0))  # a leaf never resends its sum
        formatted &= ~release | (((flags & _HOLD) != 0) & (head["bitmap"] == table.full[safe]))
        formatted &= ~descend | (spine & (head["bitmap"] == table.racks_full[safe]))
        self._count("bad_format", ok & ~formatted)
        ok &= formatted

        i = np.flatnonzero(ok)
        return _Packets(
            index=i,
            data=data[i],
            release=release[i],
            descend=descend[i],
            resend=(flags[i] & _RESEND) != 0,
            job=row[i],
            seq=seq[i],
            slot=head["slot"][i].astype(np.int64),
            bit=(np.uint32(1) << rank[i].astype(np.uint32)).astype(np.uint32),
            words=(batch.lengths[i] - HEADER_LEN) // 4,
            prio=np.minimum(head["priority"][i].astype(np.int64), table.priority_cap[row[i]]),
            key=make_keys(job[i], seq[i], op[i]),
        )

    def _aggregate_runs(self, p: _Packets, batch: Batch, now: float, out: _Out) -> np.ndarray:
        """Fast path for the common case, a slot's packets all adding to (or claiming) one chunk.

        A run qualifies when its packets are first transmissions of one chunk (cut alike) with distinct
        ranks, the chunk is not redirected, and the slot is free or holds that chunk without any of
        those ranks: one at a time, they would claim (if free) and add, completing at most at the
        last packet. Such runs are folded with segment reductions; returns the other rows of `p`.
        """
        if not p.index.size:
            return p.index
        slots = self.slots
        order = np.argsort(p.slot, kind="stable")
        slot, key, bit, words = p.slot[order], p.key[order], p.bit[order], p.words[order]
        begin = _run_starts(slot)
        length = np.diff(begin, append=slot.size)
        lead, lead_words = key[begin], words[begin]
        alike = (key == np.repeat(lead, length)) & (words == np.repeat(lead_words, length))
        plain = np.minimum.reduceat(p.data[order] & ~p.resend[order] & alike, begin)
        bits = np.bitwise_or.reduceat(bit, begin)
        distinct = np.add.reduceat(bit.astype(np.uint64), begin) == bits
        s = slot[begin]
        held, held_bits = slots.key[s], slots.bitmap[s]
        fits = (held == 0) | ((held == lead) & ((held_bits & bits) == 0) & (slots.words[s] == lead_words))
        ok = plain & distinct & (lead != slots.redirect[s]) & fits
        r = np.flatnonzero(ok)
        if r.size:
            is_max = key_op(lead[r])
            folded = _fold(batch.payload[p.index[order]], begin, length, r, is_max)
            prio = np.maximum.reduceat(p.prio[order], begin)[r]
            claimed = held[r] == 0
            self._merge(s[r], ~claimed, folded, bits[r], prio, lead[r], lead_words[r], is_max, now)
            last = order[begin[r] + length[r] - 1]
            self._complete(s[r], p.job[last], p.index[last], out)
            self._counts["claimed"] += int(np.count_nonzero(claimed))
            self._counts["aggregated"] += int(length[r].sum()) - int(np.count_nonzero(claimed))
        return np.sort(order[~np.repeat(ok, length)])

    def _apply(self, p: _Packets, batch: Batch, now: float, out: _Out) -> None:
        """One round: packets for pairwise distinct slots, each taking the branch of section 5 it meets."""
        slots, s = self.slots, p.slot
        key, redirect, held, prio = slots.key[s], slots.redirect[s], slots.bitmap[s], slots.prio[s]
        first = p.data & ~p.resend

        redirected = p.data & (p.key == redirect)  # 1
        rest = p.data & ~redirected
        same = rest & (key == p.key)  # 2
        misfit = same & (slots.words[s] != p.words)  # cut otherwise than the chunk its slot holds: bad_format
        same &= ~misfit
        rest &= ~misfit
        mine = (held & p.bit) != 0
        resend_flush = same & mine & p.resend
        duplicate = same & mine & ~p.resend
        add = same & ~mine
        free = rest & (key == 0)  # 3
        other = rest & ~same & ~free
        age = p.seq - key_seq(key)  # uint32: wraps like seq
        same_job = other & (key_job(key) == key_job(p.key))  # 4
        stale = same_job & first & (age != 0) & (age < np.uint32(1 << 31))
        other_job = other & ~same_job  # 5
        # a one-worker chunk completes wherever it goes: evicting a victim for it would gain nothing
        preempt = other_job & first & (self.settings.policy == "esa") & (p.prio > prio) & (self.table.fanin[p.job] > 1)
        collision = other_job & first & ~preempt
        flush = ~p.data & ~p.release & ~p.descend
        flush_hit = flush & (key == p.key)
        release_hit = (p.release | (p.descend & self._hold)) & (key == p.key) & (held == self.table.full[p.job])

        evict = resend_flush | stale | preempt | flush_hit
        out.add(p.index[evict], *self._partials(s[evict], key[evict]))
        slots.key[s[resend_flush | flush_hit | release_hit]] = 0
        to_self = resend_flush | flush | collision
        slots.redirect[s[to_self]] = p.key[to_self]
        slots.redirect[s[preempt]] = key[preempt]

        claim = (free & first) | stale | preempt
        grown = claim | add
        g = np.flatnonzero(grown)
        self._merge(s[g], add[g], batch.payload[p.index[g]], p.bit[g], p.prio[g], p.key[g], p.words[g], key_op(p.key[g]), now)
        self._complete(s[g], p.job[g], p.index[g], out)

        forward = redirected | (free & p.resend) | (same_job & ~stale) | (other_job & p.resend) | collision
        sent = p.index[forward]
        out.add(sent, batch.raw[sent], batch.lengths[sent], target_set(p.job[forward], TargetSet.PS))  # unchanged, to the job's PS
        returned = p.index[p.release]
        results = batch.raw[returned].copy()
        results[:, FLAGS_OFFSET] &= ~np.uint8(_HOLD)
        out.add(returned, results, batch.lengths[returned], target_set(p.job[p.release], TargetSet.WORKERS))
        down = p.index[p.descend]
        out.add(down, batch.raw[down], batch.lengths[down], target_set(p.job[p.descend], TargetSet.WORKERS))  # unchanged

        self._count_jobs("preempting", p.key[preempt])
        self._count_jobs("preempted", key[preempt])
        self._count_jobs("collisions", p.key[collision])
        for name, mask in (
            ("redirected", redirected), ("bad_format", misfit), ("duplicate", duplicate), ("flushed", resend_flush),
            ("aggregated", add), ("claimed", claim), ("stale", stale), ("preempted", preempt),
            ("collision", collision), ("flush_requests", flush), ("flush_hits", flush_hit),
            ("releases", p.release), ("release_hits", release_hit), ("descended", p.descend),
            ("resend_forwarded", p.resend & (free | same_job | other_job)),
            ("straggler", same_job & first & ~stale),
        ):  # fmt: skip
            self._count(name, mask)

    def _merge(self, s: np.ndarray, held: np.ndarray, payload: np.ndarray, bits: np.ndarray, prio: np.ndarray,
               key: np.ndarray, words: np.ndarray, is_max: np.ndarray, now: float) -> None:  # fmt: skip
        """Fold contributions (chunks of `words` words, zero-padded to K) into slots `s`: onto the partial where
        `held`, else into a fresh claim."""
        slots = self.slots
        if is_max.any() or (held.any() and not held.all()):
            base = np.where(held[:, None], slots.value[s], np.uint32(0))
            slots.value[s] = np.where(is_max[:, None], np.maximum(base, payload), base + payload)
        elif held.all():  # the common cases take one pass over the payload
            slots.value[s] += payload
        else:
            slots.value[s] = payload
        slots.bitmap[s] = np.where(held, slots.bitmap[s], np.uint32(0)) | bits
        slots.prio[s] = np.maximum(np.where(held, slots.prio[s], 0), prio)
        slots.key[s] = key
        slots.words[s] = words
        slots.touched[s] = now

    def _complete(self, s: np.ndarray, job: np.ndarray, index: np.ndarray, out: _Out) -> None:
        """Slots whose bitmap is full send their RESULT (attached to packet `index`), or at a leaf their rack's sum up to
        the spine, and free; under atp the RESULT goes to the PS alone, flagged HOLD, and the slot stays held until the
        PS returns it (at a leaf: until the spine's RESULT passes down)."""
        done = self.slots.bitmap[s] == self.table.full[job]
        up = done & (self.table.role[job] == _LEAF)
        down = done & ~up
        out.add(index[down], *self._results(s[down]))
        out.add(index[up], *self._sums_up(s[up], job[up]))
        self._count_jobs("completed", self.slots.key[s[done]])
        if not self._hold:
            self.slots.key[s[done]] = 0
        self._count("completed", done)
        self._count("sent_up", up)

    def _partials(self, s: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """PARTIALs (bitmap, sums, priority) of slots `s` holding `key`, each for its job's PS."""
        slots = self.slots
        return self._chunks(Kind.PARTIAL, s, key, slots.prio[s], slots.bitmap[s])

    def _results(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """RESULTs of completed slots `s`, each for every worker of the job, then its PS (atp: flagged HOLD, the PS alone)."""
        slots = self.slots
        return self._chunks(Kind.RESULT, s, slots.key[s], np.zeros(s.size, np.int64), slots.bitmap[s], hold=self._hold)

    def _sums_up(self, s: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A leaf's completed slots `s` as DATA of its rack (rank and bit its rack, the slot's priority) for its spine."""
        rack = self.table.rack[row]
        bit = (np.uint32(1) << rack.astype(np.uint32)).astype(np.uint32)
        return self._chunks(Kind.DATA, s, self.slots.key[s], self.slots.prio[s], bit, rank=rack, target=TargetSet.UP)

    def _chunks(self, kind: Kind, s: np.ndarray, key: np.ndarray, prio: np.ndarray, bitmap: np.ndarray, hold: bool = False,
                rank: np.ndarray | int = 0, target: TargetSet | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """Encoded packets for slots `s`, their lengths (the words of each slot's chunk) and their target sets
        (`target`, else a job's RESULT set, or its PS: a PARTIAL, or a RESULT flagged `hold`). What a leaf sends up and
        what a spine sends carry SPINE (docs/protocol.md, section 10)."""
        table = self.table
        job = key_job(key)
        row = table.index[job]
        op = key_op(key)
        lanes = np.where(op, 32, table.lane_bits[row])
        spine = (table.role[row] == _SPINE_ROLE) | (kind == Kind.DATA)
        rows = encode(kind, job, key_seq(key), op, prio, s, lanes, bitmap, self.slots.value[s], hold=hold, spine=spine, rank=rank)
        if target is None:
            target = TargetSet.PS if kind == Kind.PARTIAL or hold else self._result_set
        return rows, HEADER_LEN + 4 * self.slots.words[s], target_set(row, target)


def waiting_in(key: np.ndarray, bitmap: np.ndarray) -> Waiting:
    """The chunks held in slot registers `key` and `bitmap` (the watch's view of a switch)."""
    held = np.flatnonzero(key)
    return Waiting(key_job(key[held]), key[held], bitmap[held])


def _rounds(slots: np.ndarray) -> Iterator[np.ndarray]:
    """Rows grouped so that each group holds distinct slots, the n-th packet of each slot in round n."""
    count = slots.size
    if np.unique(slots).size == count:
        if count:
            yield np.arange(count)
        return
    order = np.argsort(slots, kind="stable")
    begin = _run_starts(slots[order])
    occurrence = np.empty(count, dtype=np.int64)
    occurrence[order] = np.arange(count) - np.repeat(begin, np.diff(begin, append=count))
    for n in range(int(occurrence.max()) + 1):
        yield np.flatnonzero(occurrence == n)


def _fold(payload: np.ndarray, begin: np.ndarray, length: np.ndarray, runs: np.ndarray, is_max: np.ndarray) -> np.ndarray:
    """Sums modulo 2**32 (maxima where `is_max`) of payload rows over the runs `runs` (rows sorted by run).

    Position by position: one vectorized pass per position of the longest run, and runs are
    short (at most one packet per worker), where reduceat over rows is slow."""
    start, count = begin[runs], length[runs]
    folded = payload[start]
    for position in range(1, int(count.max())):
        longer = np.flatnonzero(count > position)
        rows = payload[start[longer] + position]
        if is_max.any():
            folded[longer] = np.where(is_max[longer, None], np.maximum(folded[longer], rows), folded[longer] + rows)
        else:
            folded[longer] += rows
    return folded


def _run_starts(ordered: np.ndarray) -> np.ndarray:
    """Indices where a run of equal values begins in a sorted, non-empty array."""
    change = np.empty(ordered.size, dtype=bool)
    change[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=change[1:])
    return np.flatnonzero(change)
