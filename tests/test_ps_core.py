"""The PS node, driven with datagrams: docs/protocol.md section 6, packet by packet."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ps_support import make_core, ps_path  # noqa: F401 (ps_path: each test on both PSes)

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Header, Kind, pack_fields, parse, result_words
from ina.protocol.batch import VECTORIZE_FROM

K = 4
JOB = 7
WORKERS = tuple(("10.0.0.1", 5000 + r) for r in range(4))
SWITCH = ("10.0.0.100", 47100)
STRANGER = ("10.0.0.66", 6666)
THC_TABLE = (0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30)


def make_spec(n=4, *, job=JOB, window=4, switch=True, lane_bits=8, index_bits=0, table=(), workers=WORKERS, words=0):
    return JobSpec(job=job, workers=tuple(Endpoint(*w) for w in workers[:n]), window=window, lane_bits=lane_bits,
                   switch=Endpoint(*SWITCH) if switch else None, index_bits=index_bits, table=table, words=words)


def make_ps(*specs, **options):
    ps = make_core(K, **options)
    for spec in specs or (make_spec(),):
        ps.register(spec)
    return ps


def data(rank, seq, payload, *, job=JOB, flags=Flag.NONE, slot=None, index_bits=0, lane_bits=8):
    slot = (3 + seq) % 16 if slot is None else slot
    header = Header(Kind.DATA, job, seq, flags, rank=rank, priority=1, slot=slot, index_bits=index_bits,
                    lane_bits=lane_bits, bitmap=1 << rank)
    return header.pack(np.asarray(payload, dtype=np.uint32))


def partial(bitmap, seq, sums, *, job=JOB, flags=Flag.NONE, lane_bits=8):
    return Header(Kind.PARTIAL, job, seq, flags, slot=(3 + seq) % 16, lane_bits=lane_bits,
                  bitmap=bitmap).pack(np.asarray(sums, dtype=np.uint32))


def result(seq, sums, *, job=JOB, bitmap=0b1111, flags=Flag.NONE):
    return Header(Kind.RESULT, job, seq, flags, slot=(3 + seq) % 16, lane_bits=8,
                  bitmap=bitmap).pack(np.asarray(sums, dtype=np.uint32))


def send(ps, *packets, now=0.0):
    """Deliver (bytes, source) pairs one by one; every reply as (header, payload list, destination)."""
    out = []
    for packet, source in packets:
        out += ps.receive([Datagram(packet, source)], now)
    return [decoded(d) for d in out]


def decoded(d: Datagram):
    header, payload = parse(d.data, K)
    return header, payload.tolist(), d.addr


CONTRIB = np.array([[0xFFFFFFF0, 1, 2, 3], [0x20, 10, 20, 30], [5, 100, 200, 300], [7, 1000, 2000, 3000]], dtype=np.uint32)
TOTAL = CONTRIB.sum(axis=0, dtype=np.uint32).tolist()


def test_forwarded_data_completes_and_every_worker_gets_the_exact_wrapping_sum():
    ps = make_ps()
    out = send(ps, *[(data(r, 0, CONTRIB[r]), SWITCH) for r in range(4)])
    assert [addr for _, _, addr in out] == list(WORKERS)
    for header, payload, _ in out:
        assert (header.kind, header.job, header.seq, header.bitmap, header.slot, header.lane_bits) == (Kind.RESULT, JOB, 0, 0b1111, 3, 8)
        assert payload == TOTAL
    assert ps.counters()["completed"] == 1 and ps.jobs()[0]["pending"] == 0


def test_partials_and_data_merge_by_bitmap():
    ps = make_ps()
    out = send(ps, (partial(0b0101, 9, CONTRIB[0] + CONTRIB[2]), SWITCH), (data(1, 9, CONTRIB[1]), SWITCH),
               (data(3, 9, CONTRIB[3]), WORKERS[3]))
    assert len(out) == 4 and all(payload == TOTAL for _, payload, _ in out)


def test_a_worker_in_two_pieces_is_counted_once():
    ps = make_ps()
    # Worker 0's resend reached the PS, and then a flushed partial that also holds it.
    out = send(ps, (data(0, 1, CONTRIB[0], flags=Flag.RESEND), SWITCH), (partial(0b0011, 1, CONTRIB[0] + CONTRIB[1]), SWITCH),
               (data(2, 1, CONTRIB[2]), SWITCH))
    assert [h.kind for h, _, _ in out] == [Kind.STATUS]  # a first resend of an incomplete chunk fetches nothing
    out = send(ps, (data(3, 1, CONTRIB[3]), SWITCH))
    assert len(out) == 4 and all(payload == TOTAL for _, payload, _ in out)


def test_max_chunks_take_the_unsigned_maximum_of_float_norms():
    ps = make_ps()
    norms = [3.5, 12.25, 0.0, 7.0]
    words = [[struct.unpack("!I", struct.pack("!f", x))[0], 0, 0, 0] for x in norms]
    out = send(ps, *[(data(r, 2, words[r], flags=Flag.MAX, lane_bits=32), SWITCH) for r in range(4)])
    header, payload, _ = out[0]
    assert header.is_max and header.lane_bits == 32
    assert struct.unpack("!f", struct.pack("!I", payload[0]))[0] == 12.25 and payload[1:] == [0, 0, 0]


def test_a_canonical_nan_norm_wins_the_max_over_inf_and_every_finite_norm():
    ps = make_ps()
    words = [0x3FC00000, 0x7FC00000, 0x7F800000, 0x7F7FFFFF]  # 1.5, the canonical NaN, +inf, fp32's max
    out = send(ps, *[(data(r, 2, [words[r], 0, 0, 0], flags=Flag.MAX, lane_bits=32), SWITCH) for r in range(4)])
    assert out[0][1] == [0x7FC00000, 0, 0, 0]


def test_results_are_replayed_to_the_registered_address_of_a_resending_worker():
    ps = make_ps()
    first = send(ps, *[(data(r, 0, CONTRIB[r]), SWITCH) for r in range(4)])
    for source in (SWITCH, WORKERS[2]):
        (replay,) = send(ps, (data(2, 0, CONTRIB[2], flags=Flag.RESEND), source))
        assert replay == first[0][:2] + (WORKERS[2],)
    assert ps.counters()["results_replayed"] == 2 and ps.counters()["completed"] == 1


def test_a_resend_of_an_incomplete_chunk_gets_a_status_of_the_workers_held():
    ps = make_ps(make_spec(switch=False))
    assert send(ps, (data(0, 5, CONTRIB[0]), WORKERS[0])) == []
    for _ in range(2):  # the second is a duplicate: not added again, but answered
        ((header, payload, addr),) = send(ps, (data(2, 5, CONTRIB[2], flags=Flag.RESEND), WORKERS[2]))
        assert (header.kind, header.seq, header.bitmap, header.slot, payload, addr) == (Kind.STATUS, 5, 0b0101, 8, [], WORKERS[2])
    counts = ps.counters()
    assert counts["status_sent"] == 2 and counts["duplicate"] == 1 and counts["pieces"] == 2


def test_a_result_copy_is_stored_supersedes_pieces_and_makes_partials_late():
    ps = make_ps()
    send(ps, (data(1, 3, CONTRIB[1]), SWITCH))
    copy = result(3, TOTAL)
    assert send(ps, (copy, SWITCH), (copy, SWITCH), (partial(0b0001, 3, CONTRIB[0]), SWITCH)) == []
    (replay,) = ps.receive([Datagram(data(1, 3, CONTRIB[1], flags=Flag.RESEND), SWITCH)], 0.0)
    assert replay == Datagram(copy, WORKERS[1])
    counts = ps.counters()
    assert (counts["result_copies"], counts["superseded"], counts["duplicate"], counts["late"]) == (1, 1, 1, 1)
    assert ps.jobs()[0]["pending"] == 0 and ps.next_deadline() is None


def test_flush_requests_back_off_from_flush_delay_to_one_second_and_stop_on_completion():
    ps = make_ps()
    send(ps, (data(0, 6, [1, 0, 0, 0], flags=Flag.MAX, lane_bits=32), SWITCH), now=10.0)
    assert ps.tick(10.0019) == []
    times, now = [], 10.0
    while now < 14.0:
        now = ps.next_deadline()
        for d in ps.tick(now):
            header, payload, addr = decoded(d)
            assert (header.kind, header.job, header.seq, header.slot, header.is_max, header.bitmap, addr) == \
                   (Kind.FLUSH, JOB, 6, 9, True, 0, SWITCH)
            times.append(now)
    gaps = np.diff([10.0] + times)
    expected = [0.002 * 2**i for i in range(9)] + [1.0, 1.0]
    np.testing.assert_allclose(gaps[: len(expected)], expected)
    send(ps, *[(data(r, 6, [1, 0, 0, 0], flags=Flag.MAX, lane_bits=32), SWITCH) for r in (1, 2, 3)], now=now)
    assert ps.next_deadline() is None and ps.tick(now + 5) == []
    assert ps.counters()["flush_sent"] == len(times)


def test_flush_delay_is_configurable_and_ps_only_jobs_never_flush():
    ps = make_ps(make_spec(), make_spec(job=8, switch=False), flush_delay=0.01)
    send(ps, (data(0, 0, CONTRIB[0]), SWITCH), (data(0, 0, CONTRIB[0], job=8), WORKERS[0]), now=1.0)
    assert ps.next_deadline() == pytest.approx(1.01)
    assert len(ps.tick(1.01)) == 1
    ps.deregister(JOB)
    assert ps.next_deadline() == pytest.approx(61.0), "only job 8's piece expiry is left"


def test_pieces_expire_after_piece_timeout():
    ps = make_ps(make_spec(switch=False), piece_timeout=30.0)
    send(ps, (data(0, 0, CONTRIB[0]), WORKERS[0]), (data(1, 0, CONTRIB[1]), WORKERS[1]), now=1.0)
    send(ps, (data(0, 1, CONTRIB[0]), WORKERS[0]), now=2.0)
    assert ps.next_deadline() == 31.0
    ps.tick(30.9)
    assert ps.counters()["expired"] == 0
    ps.tick(31.0)
    assert ps.counters()["expired"] == 2 and ps.next_deadline() == 32.0
    # The chunk starts afresh: the expired pieces are gone for good.
    out = send(ps, *[(data(r, 0, CONTRIB[r]), WORKERS[r]) for r in (0, 1, 2)], now=31.5)
    assert out == [] and ps.jobs()[0]["pending"] == 2


def test_chunks_the_window_proves_complete_are_retired_instead_of_flushed():
    ps = make_ps(make_spec(window=2))
    send(ps, (data(0, 0, CONTRIB[0]), SWITCH), now=0.0)
    send(ps, (data(1, 2, CONTRIB[1]), SWITCH), now=0.001)  # worker 1 holds chunk 0's result
    out = ps.tick(0.002)
    assert out == [] and ps.counters()["retired"] == 1
    assert send(ps, (data(3, 0, CONTRIB[3]), SWITCH), (partial(0b0111, 0, TOTAL), SWITCH)) == []
    # A resend of it means its RESULT reached neither worker 3 nor the PS: a full STATUS says so.
    *_, (header, _, addr) = send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH))
    assert (header.kind, header.seq, header.bitmap, addr) == (Kind.STATUS, 0, 0b1111, WORKERS[3])
    assert ps.counters()["stale"] == 3 and ps.jobs()[0]["pending"] == 1


def test_sources_kinds_and_formats_are_checked():
    ps = make_ps(make_spec(n=2))
    drops = [
        (data(0, 0, CONTRIB[0]), STRANGER, "unregistered"),
        (data(0, 0, CONTRIB[0]), WORKERS[1], "unregistered"),  # rank 0 claimed by worker 1
        (data(2, 0, CONTRIB[2]), SWITCH, "unregistered"),  # rank >= n
        (data(0, 0, CONTRIB[0], job=99), WORKERS[0], "unregistered"),
        (partial(0b01, 0, CONTRIB[0]), WORKERS[0], "unregistered"),
        (result(0, CONTRIB[0], bitmap=0b11), STRANGER, "unregistered"),
        (result(0, CONTRIB[0], bitmap=0b11), WORKERS[0], "unsolicited"),  # a worker's, for no FETCH
        (partial(0b100, 0, CONTRIB[0]), SWITCH, "bad_bitmap"),
        (partial(0, 0, CONTRIB[0]), SWITCH, "bad_bitmap"),
        (result(0, CONTRIB[0], bitmap=0b01), SWITCH, "bad_bitmap"),
        (Header(Kind.FLUSH, JOB, 0).pack(), SWITCH, "unexpected"),
        (Header(Kind.STATUS, JOB, 0).pack(), WORKERS[0], "unexpected"),
        (data(0, 0, [1, 2, 3, 4], index_bits=4), WORKERS[0], "bad_format"),  # a lanes job has no table
        (data(0, 0, CONTRIB[0], lane_bits=16), WORKERS[0], "bad_format"),  # the job's lanes are 8 bits
        (data(0, 0, CONTRIB[0], flags=Flag.MAX), WORKERS[0], "bad_format"),  # MAX is 32 bits
        (b"\xa7\x01", WORKERS[0], "malformed"),
    ]
    for packet, source, reason in drops:
        before = ps.counters()
        assert ps.receive([Datagram(packet, source)], 0.0) == []
        after = ps.counters()
        assert after[reason] == before[reason] + 1, reason
    assert ps.jobs()[0]["pending"] == 0 and ps.next_deadline() is None
    send(ps, (data(0, 1, CONTRIB[0]), SWITCH))
    assert send(ps, (data(1, 1, CONTRIB[1], flags=Flag.MAX, lane_bits=32), SWITCH)) == []
    assert ps.counters()["mismatch"] == 1, "pieces of one chunk must agree on operation and format"


def test_a_chunk_takes_at_most_2n_pieces_but_always_single_workers():
    workers = tuple(("10.0.0.1", 5000 + r) for r in range(5))
    ps = make_ps(make_spec(n=5, workers=workers))
    rng = np.random.default_rng(5)
    contributions = rng.integers(0, 2**32, size=(5, K), dtype=np.uint64).astype(np.uint32)
    overlapping = [b for b in range(3, 0b11111, 2)][:12]  # all hold worker 0: no two are disjoint
    for bitmap in overlapping:
        sums = contributions[[r for r in range(5) if bitmap >> r & 1]].sum(axis=0, dtype=np.uint32)
        assert send(ps, (partial(bitmap, 0, sums), SWITCH)) == []
    assert ps.counters()["overloaded"] == 2 and ps.counters()["pieces"] == 10
    out = send(ps, *[(data(r, 0, contributions[r]), workers[r]) for r in range(1, 5)])
    assert ps.counters()["completed"] == 1  # the last singles may find the result already in the ring
    assert {tuple(payload) for _, payload, _ in out} == {tuple(contributions.sum(axis=0, dtype=np.uint32).tolist())}


def test_deregistration_forgets_everything_and_a_reused_job_id_starts_clean():
    ps = make_ps()
    send(ps, *[(data(r, 0, CONTRIB[r]), SWITCH) for r in range(4)])
    send(ps, (data(0, 1, CONTRIB[0]), SWITCH))
    ps.deregister(JOB)
    assert send(ps, (data(1, 1, CONTRIB[1]), SWITCH)) == [] and ps.counters()["unregistered"] == 1
    with pytest.raises(ValueError, match="not registered"):
        ps.deregister(JOB)
    others = tuple(("10.0.0.2", 7000 + r) for r in range(2))
    ps.register(make_spec(n=2, workers=others, switch=False))
    with pytest.raises(ValueError, match="already registered"):
        ps.register(make_spec(n=2, workers=others))
    assert ps.tick(5.0) == [], "the old job's FLUSH timers are void"
    out = send(ps, (data(0, 0, CONTRIB[2]), others[0]))
    assert out == [], "no replay of the old job's result"
    out = send(ps, (data(1, 0, CONTRIB[3]), others[1]))
    assert [addr for _, _, addr in out] == list(others)
    assert out[0][1] == (CONTRIB[2] + CONTRIB[3]).tolist()


def _table(index_bits, lane_bits, n, rng):
    if index_bits == 4:
        return THC_TABLE
    return tuple(int(v) for v in rng.integers(0, (2**lane_bits - 1) // n + 1, size=1 << index_bits))


@pytest.mark.parametrize(("index_bits", "lane_bits"), [(4, 8), (3, 8), (8, 16), (4, 16), (2, 32)])
@pytest.mark.parametrize("batch", [False, True])
def test_ps_only_indices_are_looked_up_and_summed_into_lanes_exactly(index_bits, lane_bits, batch):
    rng = np.random.default_rng(index_bits * lane_bits)
    table = _table(index_bits, lane_bits, 4, rng)
    ps = make_ps(make_spec(switch=False, index_bits=index_bits, lane_bits=lane_bits, table=table, window=8))
    coordinates = K * (32 // index_bits)
    chunks = VECTORIZE_FROM // 4 + 1
    indices = rng.integers(0, 1 << index_bits, size=(chunks, 4, coordinates))
    packets = [Datagram(data(r, seq, pack_fields(indices[seq, r], index_bits), index_bits=index_bits, lane_bits=lane_bits, slot=0),
                        WORKERS[r]) for seq in range(chunks) for r in range(4)]
    out = ps.receive(packets, 0.0) if batch else [d for p in packets for d in ps.receive([p], 0.0)]
    assert len(out) == 4 * chunks
    for seq in range(chunks):
        expected = pack_fields(np.asarray(table)[indices[seq]].sum(axis=0), lane_bits).tolist()
        header, payload, _ = decoded(out[4 * seq])
        assert (header.seq, header.index_bits, header.lane_bits) == (seq, index_bits, lane_bits)
        assert len(payload) == result_words(K, index_bits, lane_bits) and payload == expected


def test_ps_only_accepts_indices_only_in_the_registered_format():
    ps = make_ps(make_spec(switch=False, index_bits=4, table=THC_TABLE))
    for packet in (data(0, 0, [1, 2, 3, 4], index_bits=3, lane_bits=8), data(0, 0, [1, 2, 3, 4], index_bits=4, lane_bits=16),
                   data(0, 0, [1, 2, 3, 4], index_bits=4, flags=Flag.MAX)):
        assert ps.receive([Datagram(packet, WORKERS[0])], 0.0) == []
    assert ps.counters()["bad_format"] == 3


def _legit_stream(rng, chunks=6):
    """Every worker's DATA for `chunks` chunks of job 7 (all within a window of 8) in random order,
    some via the switch; and the expected sums."""
    contributions = rng.integers(0, 2**32, size=(chunks, 4, K), dtype=np.uint64).astype(np.uint32)
    packets = [(data(r, seq, contributions[seq, r]), SWITCH if (seq + r) % 3 else WORKERS[r])
               for seq in range(chunks) for r in range(4)]
    order = rng.permutation(len(packets))
    return [packets[i] for i in order], contributions.sum(axis=1, dtype=np.uint32)


def _garbage(draw, legit):
    packet, source = legit[draw(st.integers(0, len(legit) - 1))]
    kind = draw(st.sampled_from(["random", "truncated", "stranger", "corrupt", "other_job", "extended"]))
    if kind == "random":
        return draw(st.binary(max_size=60)), STRANGER
    if kind == "truncated":  # short of a header, of a whole word, or of any word at all: a whole-word cut is a short chunk
        length = draw(st.integers(0, len(packet) - 1))
        return packet[: length - (length > HEADER_LEN and (length - HEADER_LEN) % 4 == 0)], source
    if kind == "stranger":
        return packet, STRANGER
    if kind == "corrupt":  # magic, version, kind or reserved flags
        offset, value = draw(st.sampled_from([(0, 0x7A), (1, 2), (2, 9), (3, 0x80)]))
        return packet[:offset] + bytes([value]) + packet[offset + 1:], source
    if kind == "other_job":
        return packet[:4] + b"\x00\x63" + packet[6:], source
    return packet + b"\x00\x00\x00\x00", source


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_fuzz_garbage_is_dropped_counted_and_changes_nothing(draw):
    rng = np.random.default_rng(draw.draw(st.integers(0, 2**32 - 1)))
    legit, sums = _legit_stream(rng)
    noisy = list(legit)
    garbage = draw.draw(st.integers(1, 40))
    for _ in range(garbage):
        noisy.insert(draw.draw(st.integers(0, len(noisy))), _garbage(draw.draw, legit))
    clean_ps, noisy_ps = make_ps(make_spec(window=8)), make_ps(make_spec(window=8))
    clean = [d for p, s in legit for d in clean_ps.receive([Datagram(p, s)], 0.0)]
    batches = draw.draw(st.lists(st.integers(1, 2 * VECTORIZE_FROM), min_size=1, max_size=8))
    noisy_out, start = [], 0
    while start < len(noisy):
        size = batches[len(noisy_out) % len(batches)]
        noisy_out.append(noisy_ps.receive([Datagram(p, s) for p, s in noisy[start:start + size]], 0.0))
        start += size
    assert [d for batch in noisy_out for d in batch] == clean
    results = {decoded(d)[0].seq: decoded(d)[1] for d in clean}
    assert results == {seq: sums[seq].tolist() for seq in range(len(sums))}
    counts = noisy_ps.counters()
    drops = sum(counts[r] for r in ("malformed", "unregistered", "unexpected", "bad_bitmap", "bad_format"))
    assert drops == garbage and counts["rx"] == len(noisy)
    assert noisy_ps.jobs() == clean_ps.jobs()


def test_a_ps_only_job_uses_its_own_words_and_its_packets_are_checked_against_them():
    big = 41  # not a multiple of 4 words: the native lookup's vector loop and its tail
    ps = make_ps(make_spec(), make_spec(job=8, switch=False, index_bits=4, table=THC_TABLE, words=big))
    rng = np.random.default_rng(8)
    indices = rng.integers(0, 16, size=(4, big * 8))
    out = []
    for r in range(4):
        out += ps.receive([Datagram(data(r, 0, pack_fields(indices[r], 4), job=8, index_bits=4, slot=0), WORKERS[r])], 0.0)
    expected = pack_fields(np.asarray(THC_TABLE)[indices].sum(axis=0), 8).tolist()
    assert len(out) == 4 and [d.addr for d in out] == list(WORKERS)
    header, payload = parse(out[0].data, big)
    assert (header.kind, header.job, payload.tolist()) == (Kind.RESULT, 8, expected)
    assert len(expected) == result_words(big, 4, 8) == 2 * big
    # More than job 8's K is malformed; job 7 keeps the PS's K.
    before = ps.counters()["malformed"]
    assert ps.receive([Datagram(data(0, 1, [1] * (big + 1), job=8, index_bits=4, slot=0), WORKERS[0])], 0.0) == []
    assert ps.counters()["malformed"] == before + 1 and ps.jobs()[1]["pending"] == 0
    assert len(send(ps, *[(data(r, 0, CONTRIB[r]), SWITCH) for r in range(4)])) == 4


def test_a_jobs_own_words_are_refused_with_a_switch_beyond_max_words_or_beyond_a_datagram():
    ps = make_core(K, max_words=1000)
    assert ps.config()["max_words"] == 1000 and ps.config()["words"] == K
    with pytest.raises(ValueError, match="goes through a switch"):
        ps.register(make_spec(words=8))
    ps.register(make_spec(job=1, words=K))  # the switch's K, spelled out
    with pytest.raises(ValueError, match="at most 1000"):
        ps.register(make_spec(job=2, switch=False, words=1001))
    with pytest.raises(ValueError, match="more than one UDP datagram"):
        make_core(K).register(make_spec(switch=False, index_bits=4, table=THC_TABLE, words=9000))
    with pytest.raises(ValueError, match="max_words"):
        make_core(K, max_words=K - 1)
    assert ps.jobs()[0]["job"] == 1 and "words" in ps.jobs()[0]


def test_short_chunks_complete_exactly_with_results_as_long_as_the_chunk():
    """A bucket's tail and a MAX word (docs/protocol.md, section 2): lanes through the switch, a PARTIAL
    of the same length, and a PS-only job's indices, whose RESULT holds the lanes of the tail's indices."""
    ps = make_ps(make_spec(), make_spec(job=8, switch=False, index_bits=4, table=THC_TABLE))
    tail = CONTRIB[:, :2]
    out = send(ps, (partial(0b0011, 0, tail[:2].sum(axis=0, dtype=np.uint32)), SWITCH),
               *[(data(r, 0, tail[r]), WORKERS[r]) for r in (2, 3)])  # fmt: skip
    assert [payload for _, payload, _ in out] == [CONTRIB[:, :2].sum(axis=0, dtype=np.uint32).tolist()] * 4
    norms = [0x40000000, 0x40400000, 0x3F800000, 0]
    out = send(ps, *[(data(r, 1, [norms[r]], flags=Flag.MAX, lane_bits=32), WORKERS[r]) for r in range(4)])
    assert [(h.is_max, payload) for h, payload, _ in out] == [(True, [0x40400000])] * 4
    indices = np.random.default_rng(3).integers(0, 16, size=(4, 8 + 3))  # one word of 8 indices and 3 more: 2 words
    out = send(ps, *[(data(r, 0, pack_fields(indices[r], 4), job=8, index_bits=4, slot=0), WORKERS[r]) for r in range(4)])
    lanes = np.asarray(THC_TABLE)[indices].sum(axis=0)
    assert [payload for _, payload, _ in out] == [pack_fields(np.concatenate([lanes, np.zeros(5, int)]), 8).tolist()] * 4
    assert len(out[0][1]) == result_words(2, 4, 8) == 4 and ps.counters()["malformed"] == 0


def test_lengths_of_no_chunk_are_malformed_and_a_chunk_cut_two_ways_a_mismatch():
    ps = make_ps(make_spec(), make_spec(job=8, switch=False, index_bits=4, table=THC_TABLE))
    head = Header(Kind.DATA, JOB, 0, rank=0, slot=3, lane_bits=8, bitmap=1).pack()
    indices = Header(Kind.PARTIAL, JOB, 0, slot=3, index_bits=4, lane_bits=8, bitmap=1)
    malformed = [head,  # no words
                 head + bytes(4 * K + 4),  # more than K
                 head + bytes(6),  # not whole words
                 indices.pack(bytes(4 * 3)),  # 3 words: the lanes of no indices chunk (2 a word)
                 Header(Kind.FLUSH, JOB, 0, slot=3).pack(bytes(4))]  # a payload where none is
    before = ps.jobs()
    assert send(ps, *[(p, SWITCH) for p in malformed]) == [] and ps.counters()["malformed"] == len(malformed)
    assert ps.jobs() == before
    send(ps, (data(0, 1, [1, 2]), WORKERS[0]), (data(1, 1, [1, 2, 3]), WORKERS[1]))  # rank 1 cuts it otherwise
    assert ps.counters()["mismatch"] == 1 and ps.counters()["pieces"] == 1
