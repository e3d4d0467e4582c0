"""The worker engine: chunking, window, retransmission, delivery, failure (docs/protocol.md 3, 4, 8)."""

from __future__ import annotations

import numpy as np
import pytest
from engine_paths import engine_paths

from ina.net.node import Address, Datagram
from ina.protocol import Flag, Header, Kind, parse, result_words
from ina.sim import Faults, Link, Network
from ina.transport.engine import Engine, EngineConfig
from ina.transport.errors import TransportError
from ina.transport.priority import FixedPriority

use_each_engine = engine_paths(__name__)

SWITCH: Address = ("10.0.0.254", 47100)
PS: Address = ("10.0.0.253", 47200)
K = 4


def config(**changes) -> EngineConfig:
    base = dict(job=7, rank=1, workers=3, words=K, window=4, pool=16, slot_base=5,
                destination=SWITCH, sources=frozenset({SWITCH, PS}),
                min_rto=0.01, initial_rto=0.02, max_rto=0.1, peer_timeout=1.0)
    return EngineConfig(**(base | changes))


def result_for(data: Datagram, sums: np.ndarray, *, workers: int = 3, source: Address = SWITCH, **changes) -> Datagram:
    """The RESULT a correct aggregator returns for one of our DATA packets: the first of `sums`, as many
    as the chunk has (docs/protocol.md, section 2)."""
    header, payload = parse(data.data, K)
    result = header.with_(kind=Kind.RESULT, rank=0, priority=0, flags=header.flags & Flag.MAX,
                          bitmap=(1 << workers) - 1, **changes)
    words = result_words(payload.size, result.index_bits, result.lane_bits)
    return Datagram(result.pack(np.asarray(sums, dtype=np.uint32)[:words]), source)


def headers(datagrams: list[Datagram]) -> list[Header]:
    return [parse(d.data, K)[0] for d in datagrams]


def test_chunks_carry_consecutive_seqs_slots_and_the_senders_bit():
    engine = Engine(config(), FixedPriority(9))
    engine.submit(np.arange(10, dtype=np.uint32), lane_bits=8, now=0.0)
    assert engine.next_deadline() == 0.0
    sent = engine.tick(0.0)
    got = headers(sent)
    assert [h.seq for h in got] == [0, 1, 2]
    assert [h.slot for h in got] == [5, 6, 7]
    assert all(h.kind == Kind.DATA and h.rank == 1 and h.bitmap == 2 and h.priority == 9 for h in got)
    assert all(h.lane_bits == 8 and h.index_bits == 0 and not h.resend for h in got)
    payload = np.concatenate([parse(d.data, K)[1] for d in sent])
    assert payload.tolist() == list(range(10))  # the last chunk as long as its words
    assert [len(d.data) for d in sent] == [20 + 4 * K, 20 + 4 * K, 20 + 4 * 2]
    assert all(d.addr == SWITCH for d in sent) and engine.counters["padding_bytes"] == 0


def test_chunks_for_a_switch_of_whole_chunks_are_padded_and_the_padding_counted():
    engine = Engine(config(pad=True), FixedPriority(9))
    engine.submit(np.arange(10, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.submit(np.ones(1, dtype=np.uint32), op="max", lane_bits=32, now=0.0)
    sent = engine.tick(0.0)
    assert np.concatenate([parse(d.data, K)[1] for d in sent]).tolist() == list(range(10)) + [0, 0] + [1, 0, 0, 0]
    assert engine.counters["padding_bytes"] == 4 * 2 + 4 * 3
    engine.receive([result_for(sent[2], [7, 7, 0, 0]), result_for(sent[3], [1, 0, 0, 0])], 0.001)
    engine.tick(0.05)  # chunk 0 at once (chunk 3's RESULT overtook it), then both at their timeouts: whole, no padding
    assert engine.counters["resent"] == 3 and engine.counters["padding_bytes"] == 4 * 5
    engine.receive([result_for(d, [5] * K) for d in sent[:2]], 0.051)
    assert [sums.tolist() for _, sums in engine.completed()] == [[5] * 8 + [7, 7], [1]]


def test_window_holds_back_chunk_seq_until_seq_minus_w_is_in():
    engine = Engine(config(window=2))
    engine.submit(np.zeros(5 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    first = engine.tick(0.0)
    assert [h.seq for h in headers(first)] == [0, 1]
    assert engine.receive([result_for(first[1], np.zeros(K))], 0.001) == []  # seq 0 still missing
    more = engine.receive([result_for(first[0], np.zeros(K))], 0.002)
    assert [h.seq for h in headers(more)] == [2, 3]


def test_results_are_assembled_in_order_and_delivered_once():
    engine = Engine(config(window=8))
    a = engine.submit(np.ones(2 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    b = engine.submit(np.ones(K - 1, dtype=np.uint32), lane_bits=8, now=0.0)
    sent = engine.tick(0.0)
    sums = [np.full(K, 10 + i, dtype=np.uint32) for i in range(3)]
    engine.receive([result_for(sent[2], sums[2])], 0.001)
    assert engine.completed() == []  # b is done but a is not: order is kept
    engine.receive([result_for(sent[0], sums[0]), result_for(sent[1], sums[1])], 0.002)
    engine.receive([result_for(sent[1], sums[0] + 1)], 0.003)  # a late duplicate
    done = engine.completed()
    assert [h for h, _ in done] == [a, b]
    assert done[0][1].tolist() == [10] * K + [11] * K
    assert done[1][1].tolist() == [12] * (K - 1)
    assert engine.counters["late"] == 1 and engine.counters["delivered"] == 3 and engine.idle


def test_results_may_replace_the_submitted_words_in_place():
    """A chunk's sums overwrite its words only once it is never sent again: resends carry the words."""
    engine = Engine(config(window=2))
    words = np.arange(3 * K, dtype=np.uint32)
    original = words.copy()
    engine.submit(words, lane_bits=8, now=0.0, out=words)
    first, second = engine.tick(0.0)
    (third,) = engine.receive([result_for(first, np.full(K, 7))], 0.001)
    resent = {parse(d.data, K)[0].seq: parse(d.data, K)[1].tolist() for d in engine.tick(0.02)}  # both timed out
    assert resent == {1: original[K:2 * K].tolist(), 2: original[2 * K:].tolist()}
    engine.receive([result_for(d, np.full(K, 8)) for d in (second, third)], 0.05)
    ((_, sums),) = engine.completed()
    assert sums is words and sums.tolist() == [7] * K + [8] * (2 * K)


@pytest.mark.parametrize("out", [np.zeros(5, np.uint32), np.zeros(6, np.int32), np.zeros(12, np.uint32)[::2],
                                 np.zeros(6, np.uint32).reshape(2, 3)])  # fmt: skip
def test_an_output_that_cannot_hold_the_result_is_refused(out):
    with pytest.raises(ValueError, match="out must be"):
        Engine(config()).submit(np.ones(6, dtype=np.uint32), lane_bits=8, now=0.0, out=out)


def test_max_and_index_chunks_have_their_result_shapes():
    engine = Engine(config(destination=PS, ps_only=True, window=8))
    norm = np.array([np.float32(2.5).view(np.uint32)], dtype=np.uint32)
    engine.submit(norm, op="max", lane_bits=32, now=0.0)
    engine.submit(np.ones(K + 1, dtype=np.uint32), lane_bits=8, index_bits=4, now=0.0)
    sent = engine.tick(0.0)
    got = headers(sent)
    assert got[0].is_max and got[0].lane_bits == 32 and all(h.slot == 0 for h in got)
    assert [h.index_bits for h in got] == [0, 4, 4]
    assert [len(d.data) for d in sent] == [20 + 4, 20 + 4 * K, 20 + 4]  # a MAX word, K words, the word left
    per_chunk = result_words(K, 4, 8)
    engine.receive([result_for(sent[0], norm, source=PS)], 0.001)
    engine.receive([result_for(d, np.full(per_chunk, 3), source=PS) for d in sent[1:]], 0.001)
    (_, mx), (_, indices) = engine.completed()
    assert mx.view(np.float32).tolist() == [2.5]
    tail = result_words(1, 4, 8)  # the lanes of the last chunk's 8 indices: zero beyond them
    assert indices.tolist() == [3] * (per_chunk + tail) + [0] * (per_chunk - tail)


@pytest.mark.parametrize("bad", [
    dict(lane_bits=16),            # not the chunk's lane width
    dict(flags=Flag.MAX),          # not the chunk's operation
    dict(bitmap=0b011),            # not every worker
    dict(job=8),                   # another job
    dict(kind=Kind.PARTIAL),       # not for workers
])
def test_mismatching_results_are_dropped_and_counted(bad):
    engine = Engine(config())
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    (data,) = engine.tick(0.0)
    header, _ = parse(data.data, K)
    words = result_words(K, 0, bad.get("lane_bits", 8))
    forged = header.with_(kind=Kind.RESULT, rank=0, bitmap=0b111, flags=Flag.NONE).with_(**bad)
    engine.receive([Datagram(forged.pack(np.ones(words, dtype=np.uint32)), SWITCH)], 0.001)
    assert engine.completed() == [] and engine.counters["unexpected"] == 1


def test_a_result_not_as_long_as_its_chunk_is_dropped_and_counted():
    engine = Engine(config())
    engine.submit(np.arange(K + 2, dtype=np.uint32), lane_bits=8, now=0.0)
    whole, tail = engine.tick(0.0)
    right = [result_for(whole, np.full(K, 5)), result_for(tail, [6, 6])]
    wrong = [Datagram(right[0].data[:-4], SWITCH), Datagram(right[1].data + bytes(8), SWITCH)]  # valid lengths, not the chunks'
    engine.receive(wrong, 0.001)
    assert engine.completed() == [] and engine.counters["unexpected"] == 2
    engine.receive(right, 0.002)
    assert [sums.tolist() for _, sums in engine.completed()] == [[5] * K + [6, 6]]


def test_foreign_malformed_and_unknown_packets_change_nothing():
    engine = Engine(config())
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    (data,) = engine.tick(0.0)
    good = result_for(data, np.full(K, 3))
    engine.receive([
        Datagram(good.data, ("6.6.6.6", 47100)),             # right bytes, wrong source
        Datagram(good.data[:-1], SWITCH),                     # truncated
        Datagram(b"\xa8" + good.data[1:], SWITCH),            # bad magic
        Datagram(Header(Kind.RESULT, 7, seq=1000, lane_bits=8, bitmap=7).pack(np.zeros(K, np.uint32)), SWITCH),
    ], 0.001)
    assert engine.counters["foreign"] == 1 and engine.counters["malformed"] == 2 and engine.counters["late"] == 1
    assert engine.completed() == []
    engine.receive([good], 0.002)
    assert engine.completed()[0][1].tolist() == [3] * K


def test_timeouts_resend_with_the_flag_and_back_off_exponentially():
    engine = Engine(config(min_rto=0.01, initial_rto=0.01, max_rto=0.04))
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.tick(0.0)
    times = []
    while (due := engine.next_deadline()) is not None and due < 0.2:
        (resent,) = engine.tick(due)
        assert headers([resent])[0].resend
        times.append(due)
    assert times == pytest.approx([0.01, 0.03, 0.07, 0.11, 0.15, 0.19])  # 10, 20, 40 ms, then capped
    assert engine.counters["resent"] == 6


def test_a_silent_switch_is_failed_over_from_at_the_failover_moment_not_at_a_doubled_backoff():
    engine = Engine(config(min_rto=0.01, initial_rto=0.01, max_rto=0.4, failover=0.25))
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.tick(0.0)
    resends = []
    while "failovers" not in engine.counters:
        due = engine.next_deadline()
        resends += [(due, resent.addr) for resent in engine.tick(due)]
    # 10, 20, 40, 80 ms: the next timeout, at 0.31 s, comes after the failover's moment
    assert resends == [(pytest.approx(t), SWITCH) for t in (0.01, 0.03, 0.07, 0.15)] + [(pytest.approx(0.25), PS)]
    assert engine.counters["failovers"] == 1


def _sent(engine: Engine, chunks: int, now: float = 0.0) -> list[Datagram]:
    """Submit `chunks` whole chunks at `now` and return their DATA."""
    engine.submit(np.ones(chunks * K, dtype=np.uint32), lane_bits=8, now=now)
    return engine.tick(now)


def test_a_chunk_overtaken_by_the_result_of_the_third_chunk_sent_after_it_is_resent_at_once():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    sent = _sent(engine, 6)
    assert engine.receive([result_for(d, np.zeros(K)) for d in sent[1:3]], 0.001) == []  # two later: maybe reordered
    (again,) = engine.receive([result_for(d, np.zeros(K)) for d in sent[3:]], 0.002)  # the third: chunk 0 was lost
    assert headers([again])[0].resend and headers([again])[0].seq == 0 and again.data[20:] == sent[0].data[20:]
    assert engine.counters["early_resent"] == 1 and engine.counters["resent"] == 1
    assert engine.next_deadline() == pytest.approx(0.002 + engine.rtt.rto)  # the timer restarts, not doubled


def test_a_resend_is_overtaken_only_by_chunks_sent_after_it():
    engine = Engine(config(window=4, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    sent = _sent(engine, 8)  # chunks 0..3 go, 4..7 wait for the window
    engine.receive([result_for(d, np.zeros(K)) for d in sent[1:4]], 0.001)  # chunk 0 resent; 1..3 done, still behind 0
    assert engine.counters["early_resent"] == 1 and engine.tick(0.001) == []
    (late,) = engine.tick(0.06)  # nothing sent since: only its timer resends it
    assert headers([late])[0].seq == 0 and engine.counters["resent"] == 2 and engine.counters["early_resent"] == 1


def test_a_lost_resend_is_resent_again_once_chunks_sent_after_it_are_answered():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    sent = _sent(engine, 4)
    engine.receive([result_for(d, np.zeros(K)) for d in sent[1:4]], 0.001)  # chunk 0 resent early
    later = _sent(engine, 3, now=0.002)  # chunks 4..6, sent after that resend
    assert engine.receive([result_for(d, np.zeros(K)) for d in later[:2]], 0.003) == []
    (again,) = engine.receive([result_for(later[2], np.zeros(K))], 0.004)
    assert headers([again])[0].seq == 0 and engine.counters["early_resent"] == 2


def test_a_status_from_the_ps_stops_early_resends_of_a_chunk_it_holds():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    sent = _sent(engine, 4)
    (resend,) = engine.receive([result_for(d, np.zeros(K)) for d in sent[1:4]], 0.001)
    status = Header(Kind.STATUS, 7, 0, slot=5, lane_bits=8, bitmap=0b010).pack()
    engine.receive([Datagram(status, PS)], 0.002)  # the PS holds the resend: its RESULT comes once the chunk completes
    later = _sent(engine, 3, now=0.003)
    assert engine.receive([result_for(d, np.zeros(K)) for d in later], 0.004) == []
    assert engine.counters["early_resent"] == 1 and engine.counters["status"] == 1


def test_a_chunk_resent_again_after_a_status_is_resent_once_when_overtaken():
    """A STATUS clears a resent chunk's mark while its entry stays queued; its next resend, before any later chunk
    is sent, queues the same mark again: once overtaken, the chunk is resent once, not once an entry."""
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    sent = _sent(engine, 4)
    engine.receive([result_for(d, np.zeros(K)) for d in sent[1:4]], 0.001)  # chunk 0 resent early
    status = Header(Kind.STATUS, 7, 0, slot=5, lane_bits=8, bitmap=0b010).pack()
    engine.receive([Datagram(status, PS)], 0.002)
    due = engine.next_deadline()
    assert [headers([d])[0].seq for d in engine.tick(due)] == [0]  # its timer resends it: the same chunks sent since
    later = _sent(engine, 3, now=due)
    again = engine.receive([result_for(d, np.zeros(K)) for d in later], due + 0.001)
    assert [headers([d])[0].seq for d in again] == [0] and engine.counters["early_resent"] == 2


def test_a_timeout_resends_the_oldest_chunks_and_holds_back_the_rest_until_their_next():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=0.4))
    _sent(engine, 6)  # nothing comes back: a late peer, or everything lost
    first = engine.tick(0.05)
    assert [h.seq for h in headers(first)] == [0, 1, 2] and engine.counters["held_back"] == 3
    assert engine.next_deadline() == pytest.approx(0.15)  # all six doubled: the held-back ones timed out too
    second = engine.tick(engine.next_deadline())
    assert sorted(h.seq for h in headers(second)) == [0, 1, 2, 3, 4, 5] and engine.counters["held_back"] == 3


def _slow_estimate(engine: Engine) -> None:
    """Give the engine an RTT estimate as a late peer leaves it: one sample of 0.5 s (timeout: max_rto)."""
    (first,) = _sent(engine, 1)
    engine.receive([result_for(first, np.zeros(K))], 0.5)
    assert engine.rtt.rto == engine.config.max_rto


def test_a_chunk_resent_early_times_out_from_min_rto_not_from_an_estimate_late_peers_grew():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=1.0, peer_timeout=5.0))
    _slow_estimate(engine)
    sent = _sent(engine, 6, now=1.0)
    engine.receive([result_for(d, np.zeros(K)) for d in sent[1:]], 1.001)  # chunk 1 of these resent early
    assert engine.next_deadline() == pytest.approx(1.001 + 0.05)


def test_chunks_nothing_can_overtake_time_out_from_min_rto_once_all_before_them_are_answered():
    engine = Engine(config(window=8, min_rto=0.05, initial_rto=0.05, max_rto=1.0, peer_timeout=5.0))
    _slow_estimate(engine)
    sent = _sent(engine, 5, now=1.0)
    assert engine.next_deadline() == pytest.approx(2.0)  # the estimate: their peers may be late
    engine.receive([result_for(d, np.zeros(K)) for d in sent[:3]], 1.01)  # the last two: a reduction's tail
    assert engine.next_deadline() == pytest.approx(1.01 + 0.05) and "resent" not in engine.counters
    engine.receive([result_for(d, np.zeros(K)) for d in sent[3:]], 1.02)
    engine.submit(np.ones(1, dtype=np.uint32), op="max", lane_bits=32, now=1.03)  # a MAX chunk the worker waits on
    engine.tick(1.03)
    assert engine.next_deadline() == pytest.approx(1.03 + 0.05)


def test_a_short_timeout_waits_twice_the_least_round_trip_where_the_link_is_slower_than_min_rto():
    engine = Engine(config(window=8, min_rto=0.005, initial_rto=0.5, max_rto=1.0, peer_timeout=5.0))
    (first,) = _sent(engine, 1)
    engine.receive([result_for(first, np.zeros(K))], 0.04)  # the network's round trip: 40 ms, 8 min_rto
    _sent(engine, 2, now=1.0)  # a reduction's tail: nothing can overtake it
    assert engine.next_deadline() == pytest.approx(1.0 + 0.08)  # not 1.005: every packet of it would be resent
    assert "resent" not in engine.counters


def test_early_resends_off_leaves_a_chunk_to_its_timer():
    engine = Engine(config(window=8, early_resend=0))
    sent = _sent(engine, 6)
    assert engine.receive([result_for(d, np.zeros(K)) for d in sent[1:]], 0.001) == []
    assert "early_resent" not in engine.counters
    _sent(engine, 4, now=0.002)
    assert sorted(h.seq for h in headers(engine.tick(0.03))) == [0, 6, 7]  # and every chunk timing out is resent


def test_rtt_samples_follow_karns_rule():
    engine = Engine(config(window=8, min_rto=0.001, initial_rto=0.05, max_rto=0.5))
    engine.submit(np.ones(2 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    first, second = engine.tick(0.0)
    engine.receive([result_for(first, np.zeros(K))], 0.004)
    assert engine.rtt.srtt == pytest.approx(0.004)
    assert engine.rtt.rto == pytest.approx(0.004 + 4 * 0.002)
    engine.tick(engine.next_deadline())  # second chunk resent
    engine.receive([result_for(second, np.zeros(K))], 0.2)
    assert engine.rtt.srtt == pytest.approx(0.004)  # a resent chunk's RTT is ambiguous: not sampled


def test_sequence_numbers_wrap_at_32_bits():
    engine = Engine(config(first_seq=2**32 - 2, window=4))
    engine.submit(np.ones(4 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    sent = engine.tick(0.0)
    got = headers(sent)
    assert [h.seq for h in got] == [2**32 - 2, 2**32 - 1, 0, 1]
    assert [h.slot for h in got] == [(5 + s) % 16 for s in (2**32 - 2, 2**32 - 1, 2**32, 2**32 + 1)]
    engine.receive([result_for(d, np.full(K, i)) for i, d in enumerate(reversed(sent))], 0.001)
    assert engine.completed()[0][1].tolist() == [3] * K + [2] * K + [1] * K + [0] * K


def test_a_silent_peer_fails_the_engine_within_peer_timeout_naming_what_is_missing():
    engine = Engine(config(peer_timeout=0.5))
    engine.submit(np.ones(2 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    first, second = engine.tick(0.0)
    status = Header(Kind.STATUS, 7, seq=0, bitmap=0b010)
    engine.receive([Datagram(status.pack(), PS)], 0.05)
    now = 0.0
    while engine.error is None:
        now = engine.next_deadline()
        engine.tick(now)
    assert now == pytest.approx(0.5)
    message = str(engine.error)
    assert isinstance(engine.error, RuntimeError)
    assert "job 7" in message and "chunk 0" in message and "switch at 10.0.0.254:47100" in message
    assert "ranks [0, 2]" in message
    assert engine.next_deadline() is None and engine.tick(1.0) == []
    with pytest.raises(TransportError):
        engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=1.0)


def test_a_peer_timeout_without_status_says_the_ps_did_not_answer_either():
    engine = Engine(config(destination=PS, ps_only=True, peer_timeout=0.3))
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.tick(0.0)
    while engine.error is None:
        engine.tick(engine.next_deadline())
    assert "PS at 10.0.0.253:47200" in str(engine.error) and "no STATUS" in str(engine.error)


@pytest.mark.parametrize("bad", [
    dict(words=np.ones(3, dtype=np.int64)),
    dict(words=np.ones(0, dtype=np.uint32)),
    dict(op="min"),
    dict(op="max", lane_bits=8),
    dict(lane_bits=12),
    dict(index_bits=4),  # indices need PS-only mode
])
def test_submit_rejects_what_the_protocol_cannot_carry(bad):
    args = dict(words=np.ones(3, dtype=np.uint32), op="sum", lane_bits=8) | bad
    with pytest.raises(ValueError):
        Engine(config()).submit(args.pop("words"), **args, now=0.0)


class Aggregator:
    """An ideal aggregator for engine tests: sums each chunk once all workers sent it, remembers results."""

    def __init__(self, workers: list[Address]) -> None:
        self.workers = workers
        self.pending: dict[int, dict[int, np.ndarray]] = {}
        self.results: dict[int, bytes] = {}

    def receive(self, datagrams, now):
        out = []
        for d in datagrams:
            header, payload = parse(d.data, K)
            if header.seq in self.results:
                if header.resend:
                    out.append(Datagram(self.results[header.seq], d.addr))
                continue
            pieces = self.pending.setdefault(header.seq, {})
            pieces[header.rank] = payload.astype(np.uint32)
            if len(pieces) == len(self.workers):
                total = np.sum(list(pieces.values()), axis=0, dtype=np.uint32)
                result = header.with_(kind=Kind.RESULT, rank=0, priority=0, flags=header.flags & Flag.MAX,
                                      bitmap=(1 << len(self.workers)) - 1)
                self.results[header.seq] = result.pack(total)
                out += [Datagram(self.results[header.seq], w) for w in self.workers]
        return out

    def tick(self, now):
        return []

    def next_deadline(self):
        return None


@pytest.mark.parametrize("drop", [0.0, 0.05, 0.3])
def test_workers_through_a_lossy_network_get_exact_sums(drop):
    n, rng = 4, np.random.default_rng(1)
    addrs = [(f"10.0.1.{r}", 5000) for r in range(n)]
    net = Network(seed=11)
    net.attach(SWITCH, Aggregator(addrs), Link(latency=1e-5))
    inputs = rng.integers(0, 50, size=(n, 3, 37), dtype=np.uint32)
    engines = []
    for rank, addr in enumerate(addrs):
        engine = Engine(config(rank=rank, workers=n, window=3, sources=frozenset({SWITCH}), min_rto=0.001,
                               initial_rto=0.001, peer_timeout=5.0))
        engines.append(engine)
        net.attach(addr, engine, Link(bandwidth=1e7, latency=1e-4, faults=Faults(drop=drop, duplicate=0.05, reorder=0.1)))
        for reduction in inputs[rank]:
            net.invoke(addr, lambda now, e=engine, w=reduction: e.submit(w, lane_bits=8, now=now) and None)
    done: list[list] = [[] for _ in engines]

    def finished() -> bool:
        for got, engine in zip(done, engines):
            got += engine.completed()
        return all(len(got) == 3 for got in done)

    assert net.run_until(finished, timeout=5.0)
    expected = inputs.sum(axis=0, dtype=np.uint32)
    for got in done:
        assert [h for h, _ in got] == [0, 1, 2]
        for (_, words), want in zip(got, expected):
            assert np.array_equal(words, want)


def test_a_full_status_means_the_result_itself_was_lost():
    engine = Engine(config(peer_timeout=0.3))
    engine.submit(np.ones(K, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.tick(0.0)
    engine.receive([Datagram(Header(Kind.STATUS, 7, seq=0, bitmap=0b111).pack(), PS)], 0.1)
    while engine.error is None:
        engine.tick(engine.next_deadline())
    message = str(engine.error)
    assert "every rank contributed" in message and "the result was lost" in message and "FETCH" in message
    assert "no STATUS" not in message and "down" not in message


def fetch(seq: int, *, job: int = 7, **fields) -> bytes:
    """A FETCH as the PS sends it: the chunk's job, seq, format and slot, bitmap 0, no payload."""
    return Header(Kind.FETCH, job, seq, **({"slot": (5 + seq) % 16, "lane_bits": 8} | fields)).pack()


def run_chunks(engine: Engine, chunks: int, now: float = 0.0, *, short: int = 0) -> list[Datagram]:
    """Submit `chunks` chunks (the last `short` words short of K) and answer each with the RESULT (sums
    seq + 100, K words, also for the short chunk) as it goes out; the RESULTs."""
    engine.submit(np.zeros(chunks * K - short, dtype=np.uint32), lane_bits=8, now=now)
    results, sent = [], engine.tick(now)
    while sent:
        replies = [result_for(d, np.arange(K) + parse(d.data, K)[0].seq + 100) for d in sent]
        results += replies
        sent = engine.receive(replies, now)
    assert engine.idle
    return results


def hand_back(engine: Engine) -> list:
    """`engine.completed()`, whose sums the caller then overwrites, as it may."""
    done = engine.completed()
    for _, sums in done:
        sums[:] = 0xDEADBEEF
    return done


# A reduction's results are kept while it is held, and after it is handed back (the native core
# keeps a held reduction's payloads in its output, and copies them out when it hands it back).
HANDED_BACK = pytest.mark.parametrize("handed_back", [False, True], ids=["held", "handed-back"])


@HANDED_BACK
@pytest.mark.parametrize("short", [0, K - 1], ids=["whole-chunks", "short-last-chunk"])
def test_a_fetch_from_the_ps_is_answered_with_the_result_as_received(handed_back, short):
    engine = Engine(config(window=2))
    results = run_chunks(engine, 3, short=short)
    if handed_back:
        assert [handle for handle, _ in hand_back(engine)] == [0]
    out = engine.receive([Datagram(fetch(s), PS) for s in (2, 1)], 0.01)
    assert out == [Datagram(results[2].data, PS), Datagram(results[1].data, PS)]
    assert engine.counters["fetch_answered"] == 2 and engine.counters["delivered"] == 3


def test_a_fetch_for_a_chunk_not_held_is_counted_and_not_answered():
    engine = Engine(config(window=2))
    engine.submit(np.zeros(3 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    first, second = engine.tick(0.0)
    assert len(engine.receive([result_for(first, np.zeros(K))], 0.001)) == 1  # seq 2 goes out
    # seqs 1 and 2 are outstanding (we lack their results too), seq 9 never existed
    assert engine.receive([Datagram(fetch(s), PS) for s in (1, 2, 9)], 0.002) == []
    assert engine.counters["fetch_missing"] == 3 and engine.counters["fetch_answered"] == 0


@HANDED_BACK
def test_only_the_newest_2w_results_are_kept(handed_back):
    window = 3
    engine = Engine(config(window=window))
    results = run_chunks(engine, 4 * window + 1)
    if handed_back:
        assert len(hand_back(engine)) == 1
    out = engine.receive([Datagram(fetch(s), PS) for s in range(4 * window + 1)], 1.0)
    assert out == [Datagram(r.data, PS) for r in results[-2 * window:]]
    assert engine.counters["fetch_missing"] == 2 * window + 1


def test_fetches_name_chunks_by_their_wire_seq_across_the_wrap():
    engine = Engine(config(window=2, first_seq=2**32 - 2))
    results = run_chunks(engine, 1) + run_chunks(engine, 2)
    assert len(hand_back(engine)) == 2  # the first three chunks' reductions
    results += run_chunks(engine, 1)
    out = engine.receive([Datagram(fetch(s), PS) for s in (2**32 - 2, 2**32 - 1, 0, 1, 2)], 1.0)
    assert out == [Datagram(r.data, PS) for r in results]
    assert engine.counters["fetch_missing"] == 1


def test_a_fetch_from_anyone_but_the_jobs_ps_is_dropped_and_counted():
    engine = Engine(config(window=2))
    run_chunks(engine, 1)
    out = engine.receive([
        Datagram(fetch(0), SWITCH),                  # a result source, but not the PS
        Datagram(fetch(0), ("6.6.6.6", 47200)),      # nobody
        Datagram(fetch(0, job=8), PS),               # another job's chunk
        Datagram(fetch(0)[:-1], PS),                 # truncated
    ], 0.01)
    assert out == []
    assert engine.counters["unexpected"] == 2 and engine.counters["foreign"] == 1 and engine.counters["malformed"] == 1


def test_in_ps_only_mode_the_ps_is_the_destination():
    engine = Engine(config(destination=PS, sources=frozenset({PS}), ps_only=True, window=2))
    engine.submit(np.zeros(K, dtype=np.uint32), lane_bits=8, now=0.0)
    (data,) = engine.tick(0.0)
    result = result_for(data, np.ones(K), source=PS)
    engine.receive([result], 0.001)
    # The PS's ring holds every result a worker may miss, so the worker keeps none to be fetched.
    assert engine.receive([Datagram(fetch(0, slot=0), PS)], 0.002) == []
    assert engine.counters["fetch_missing"] == 1 and engine.counters["fetch_answered"] == 0


def test_the_config_names_its_ps_from_the_result_sources():
    assert config().ps == PS
    assert config(destination=PS, ps_only=True).ps == PS
    assert config(sources=frozenset({SWITCH})).ps is None
    with pytest.raises(ValueError, match="at most one other address"):
        config(sources=frozenset({SWITCH, PS, ("10.0.0.9", 1)}))
