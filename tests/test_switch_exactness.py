"""Exactness under contention: several jobs share a few slots, the network drops, duplicates
and reorders, workers resend, and a minimal sum-by-bitmap PS completes what the switch does
not. Every result any worker gets must be exactly the sum (or max) of every worker's
contribution once. Also: garbage never crashes the switch nor disturbs aggregation."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from switch_support import PATHS, Rig, job_spec, path, ps_addr, worker_addr  # noqa: F401 (path: each test on both cores)

from ina.net.node import Address, Datagram
from ina.protocol import HEADER_LEN, Kind, parse
from ina.switch import OUTCOMES

SWITCH: Address = ("127.0.0.1", 47100)
WORDS = 4


def combine(pieces: list[np.ndarray], is_max: bool) -> np.ndarray:
    stacked = np.stack(pieces)
    return stacked.max(axis=0) if is_max else stacked.sum(axis=0, dtype=np.uint64).astype(np.uint32)


@dataclass
class MiniPS:
    """Docs/protocol.md section 6 reduced to what exactness needs: keep pieces by bitmap, complete on a
    disjoint cover, store results (switch copies or its own) and answer late DATA, send FLUSH requests."""

    rig: Rig
    flush_delay: float = 0.002
    pieces: dict = field(default_factory=dict)  # key -> {bitmap: values}
    results: dict = field(default_factory=dict)  # key -> values
    flush_at: dict = field(default_factory=dict)  # key -> (next FLUSH time, delay)
    completed_here: int = 0

    def receive(self, d: Datagram, now: float) -> list[Datagram]:
        header, payload = parse(d.data, WORDS)
        key, spec = (header.job, header.seq, header.is_max), self.rig.specs[header.job]
        values = payload.astype(np.uint32)
        if header.kind == Kind.RESULT:  # the switch's copy
            assert header.bitmap == spec.full_bitmap
            self._store(key, values)
            return []
        if key in self.results:  # a DATA (often forwarded by the switch) gets the result at its rank's address
            reply = self.rig.result(*key[:2], self.results[key].tolist(), op_max=key[2])
            return [Datagram(reply, spec.workers[header.rank].addr)] if header.kind == Kind.DATA else []
        held = self.pieces.setdefault(key, {})
        held.setdefault(header.bitmap, values)
        self.flush_at.setdefault(key, (now + self.flush_delay, self.flush_delay))
        cover = _disjoint_cover(list(held), spec.full_bitmap)
        if cover is None:
            return []
        self.completed_here += 1
        result = combine([held[b] for b in cover], key[2])
        self._store(key, result)
        packet = self.rig.result(*key[:2], result.tolist(), op_max=key[2])
        return [Datagram(packet, w.addr) for w in spec.workers]

    def _store(self, key: tuple, values: np.ndarray) -> None:
        if key in self.results:
            assert np.array_equal(self.results[key], values), "two different results for one chunk"
        self.results[key] = values
        self.pieces.pop(key, None)
        self.flush_at.pop(key, None)

    def tick(self, now: float) -> list[Datagram]:
        out = []
        for key, (when, delay) in list(self.flush_at.items()):
            if when <= now:
                out.append(self.rig.flush(key[0], key[1], op_max=key[2]))
                self.flush_at[key] = (now + 2 * delay, 2 * delay)
        return out


def _disjoint_cover(bitmaps: list[int], full: int) -> tuple[int, ...] | None:
    for size in range(1, len(bitmaps) + 1):
        for combo in itertools.combinations(bitmaps, size):
            union = 0
            for b in combo:
                if union & b:
                    break
                union |= b
            else:
                if union == full:
                    return combo
    return None


@dataclass
class Worker:
    """Window rule, RESEND on timeout (doubling), exactly-once delivery."""

    rig: Rig
    job: int
    rank: int
    chunks: int
    next_seq: int = 0
    outstanding: dict = field(default_factory=dict)  # seq -> (deadline, rto)
    delivered: dict = field(default_factory=dict)

    def contribution(self, seq: int) -> list[int]:
        return np.random.default_rng([self.job, self.rank, seq]).integers(0, 2**32, WORDS, dtype=np.uint64).tolist()

    def packet(self, seq: int, resend: bool) -> Datagram:
        prio = int(np.random.default_rng([self.job, seq]).integers(0, 8))  # a chunk's priority, the same at every worker
        return self.rig.data(self.job, self.rank, seq, self.contribution(seq), resend=resend, prio=prio, op_max=seq % 5 == 0)

    def send(self, now: float) -> list[Datagram]:
        out = []
        window = self.rig.specs[self.job].window
        while self.next_seq < self.chunks and all(s in self.delivered for s in range(self.next_seq - window + 1)):
            out.append(self.packet(self.next_seq, resend=False))
            self.outstanding[self.next_seq] = (now + 0.003, 0.003)
            self.next_seq += 1
        for seq, (deadline, rto) in list(self.outstanding.items()):
            if deadline <= now:
                out.append(self.packet(seq, resend=True))
                self.outstanding[seq] = (now + 2 * rto, 2 * rto)
        return out

    def receive(self, d: Datagram) -> None:
        header, payload = parse(d.data, WORDS)
        assert header.kind == Kind.RESULT and d.addr in (SWITCH, ps_addr(self.job))
        if header.seq in self.outstanding:
            del self.outstanding[header.seq]
            self.delivered[header.seq] = payload.astype(np.uint32)


def simulate(policy: str, seed: int, drop: float, duplicate: float, garbage: float = 0.0, chunks: int = 25,
             path: str = "python") -> tuple[Rig, MiniPS, list[Worker]]:  # fmt: skip
    """Run three jobs to completion over a lossy, reordering network, through the switch core on `path`; returns the actors."""
    rng = np.random.default_rng(seed)
    rig = Rig(pool=4, words=WORDS, policy=policy, slot_timeout=0.02, path=path)
    for job, workers, window in ((1, 2, 2), (2, 3, 3), (3, 4, 2)):
        rig.register(job_spec(job, workers=workers, window=window, lane_bits=32))
    ps = MiniPS(rig)
    workers = [Worker(rig, job, r, chunks) for job, spec in rig.specs.items() for r in range(spec.fanin)]
    by_addr = {worker_addr(w.job, w.rank): w for w in workers}
    in_flight: list = []  # (arrival, order, destination, datagram)
    order = itertools.count()

    def transmit(datagrams: list[Datagram], source: Address, now: float, lossy: bool, to: Address | None = None) -> None:
        """Put datagrams on the wire; `to` for builders that name the source (workers' and the PS's requests)."""
        for d in datagrams:
            destination, arriving = to or d.addr, Datagram(d.data, source)
            copies = 0 if lossy and rng.random() < drop else 2 if lossy and rng.random() < duplicate else 1
            for _ in range(copies):
                heapq.heappush(in_flight, (now + rng.uniform(5e-5, 5e-4), next(order), destination, arriving))

    now = 0.0
    while now < 10.0 and not all(len(w.delivered) == chunks for w in workers):
        for w in workers:
            transmit(w.send(now), worker_addr(w.job, w.rank), now, lossy=True, to=SWITCH)
        for flush in ps.tick(now):
            transmit([flush], flush.addr, now, lossy=False, to=SWITCH)
        arrivals: dict[Address, list[Datagram]] = {}
        while in_flight and in_flight[0][0] <= now:
            _, _, destination, d = heapq.heappop(in_flight)
            arrivals.setdefault(destination, []).append(d)
        to_switch = arrivals.pop(SWITCH, [])
        if garbage and rng.random() < garbage:
            to_switch.insert(int(rng.integers(0, len(to_switch) + 1)), _garbage(rng, to_switch))
        if to_switch:
            for d in rig.core.receive(to_switch, now):
                transmit([d], SWITCH, now, lossy=d.addr in by_addr)
        deadline = rig.core.next_deadline()
        if deadline is not None and deadline <= now:
            transmit(rig.core.tick(now), SWITCH, now, lossy=False)
        for destination, datagrams in arrivals.items():
            for d in datagrams:
                if destination in by_addr:
                    by_addr[destination].receive(d)
                else:
                    transmit(ps.receive(d, now), destination, now, lossy=False)
        now += 1e-4
    return rig, ps, workers


def _garbage(rng: np.random.Generator, real: list[Datagram]) -> Datagram:
    """Random bytes, a truncated or corrupted real packet, or a real packet from a stranger."""
    kind = int(rng.integers(0, 4))
    if kind == 0 or not real:
        return Datagram(rng.bytes(int(rng.integers(0, 120))), ("127.0.0.1", int(rng.integers(1, 65536))))
    victim = real[int(rng.integers(0, len(real)))]
    if kind == 1:  # short of a header or of a whole word (a cut at a whole word is a valid short chunk)
        length = int(rng.integers(0, len(victim.data)))
        return Datagram(victim.data[: length - (length > HEADER_LEN and (length - HEADER_LEN) % 4 == 0)], victim.addr)
    if kind == 2:
        return Datagram(bytes([victim.data[0] ^ 0xFF]) + victim.data[1:], victim.addr)
    return Datagram(victim.data, ("10.9.8.7", victim.addr[1]))


def expected(worker: Worker, seq: int, workers: list[Worker]) -> np.ndarray:
    peers = [w for w in workers if w.job == worker.job]
    return combine([np.array(w.contribution(seq), dtype=np.uint32) for w in peers], seq % 5 == 0)


@pytest.mark.parametrize("policy", ["esa", "fcfs"])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_chunk_completes_exactly_under_contention_loss_and_reordering(policy, seed, path):
    rig, ps, workers = simulate(policy, seed, drop=0.05, duplicate=0.05, path=path)
    for w in workers:
        assert len(w.delivered) == w.chunks, f"job {w.job} rank {w.rank} got {len(w.delivered)} of {w.chunks} results"
        for seq, result in w.delivered.items():
            assert np.array_equal(result, expected(w, seq, workers)), (w.job, w.rank, seq)
    counters = rig.core.counters()
    assert counters["completed"] > 0 and ps.completed_here > 0  # both paths were taken
    assert counters["collision"] + counters["preempted"] > 0 and counters["duplicate"] + counters["flushed"] > 0
    if policy == "esa":
        assert counters["preempted"] > 0
    else:
        assert counters["preempted"] == 0


def test_garbage_is_dropped_and_counted_and_aggregation_stays_exact(path):
    rig, ps, workers = simulate("esa", seed=7, drop=0.02, duplicate=0.02, garbage=0.3, path=path)
    for w in workers:
        assert len(w.delivered) == w.chunks
        for seq, result in w.delivered.items():
            assert np.array_equal(result, expected(w, seq, workers))
    counters = rig.core.counters()
    assert counters["malformed"] > 0 and counters["unregistered"] > 0
    assert counters["rx_packets"] == sum(counters[name] for name in OUTCOMES)


@pytest.mark.parametrize("path", PATHS)
@settings(max_examples=300, deadline=None)
@given(datagrams=st.lists(st.tuples(st.binary(max_size=300), st.integers(1, 65535)), max_size=30))
def test_random_bytes_from_strangers_never_crash_and_change_nothing(path, datagrams):
    rig = Rig(pool=4, words=WORDS, path=path)
    rig.register(job_spec(1, workers=2, window=2))
    rig.send(rig.data(1, 0, 1))
    before = rig.core.slots.registers()
    assert rig.core.receive([Datagram(data, ("127.0.0.2", port)) for data, port in datagrams], 1.0) == []
    after = rig.core.slots.registers()
    assert all(np.array_equal(before[n], after[n]) for n in before)
    c = rig.core.counters()
    assert c["rx_packets"] == 1 + len(datagrams)
    assert sum(c[n] for n in ("malformed", "unexpected", "unregistered")) == len(datagrams)
