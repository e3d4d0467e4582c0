"""The PS of a racked job (docs/protocol.md, section 10): pieces of both levels under wide bitmaps, packet by packet."""

import numpy as np
import pytest
from ps_support import make_core, ps_path  # noqa: F401 (ps_path: each test on both PSes)
from test_ps_core import JOB, K, data, decoded, make_spec, partial, result, send

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind

RACKS = (2, 3, 1)
WORKERS = tuple((f"10.0.{r}.{rank + 1}", 5000 + rank) for r, n in enumerate(RACKS) for rank in range(n))
"""Rack by rack: (rack, rank in it) of each is PLACES[place]."""
PLACES = [(r, rank) for r, n in enumerate(RACKS) for rank in range(n)]
LEAVES = tuple((f"10.1.0.{r + 1}", 47100) for r in range(len(RACKS)))
SPINE = ("10.2.0.1", 47100)
ALL_RACKS = 0b111
CONTRIB = np.random.default_rng(10).integers(0, 2**32, size=(len(WORKERS), K), dtype=np.uint64).astype(np.uint32)
TOTAL = CONTRIB.sum(axis=0, dtype=np.uint32)


def racked_spec(racks=RACKS, *, job=JOB, window=4, workers=WORKERS, leaves=LEAVES, spine=SPINE):
    return JobSpec(job=job, workers=tuple(Endpoint(*w) for w in workers), window=window, switch=Endpoint(*spine), racks=racks,
                   leaves=tuple(Endpoint(*leaf) for leaf in leaves))


def make_ps(*specs, **options):
    ps = make_core(K, **options)
    for spec in specs or (racked_spec(),):
        ps.register(spec)
    return ps


def sums(places):
    """The wrapping sum of the workers at `places` (by place in WORKERS)."""
    return CONTRIB[list(places)].sum(axis=0, dtype=np.uint32)


def in_rack(r):
    return [place for place, (rack, _) in enumerate(PLACES) if rack == r]


def worker_data(place, seq, *, flags=Flag.NONE):
    """Worker `place`'s DATA: its rank in its rack on the wire."""
    return data(PLACES[place][1], seq, CONTRIB[place], flags=flags)


def rack_sum(r, seq):
    """Leaf `r`'s sum of its rack, sent up: a DATA with SPINE whose rank is the rack."""
    return data(r, seq, sums(in_rack(r)), flags=Flag.SPINE)


def spine_partial(racks, seq):
    return partial(racks, seq, sums(p for r in range(len(RACKS)) if racks >> r & 1 for p in in_rack(r)), flags=Flag.SPINE)


def assert_result(out, seq, total=TOTAL):
    """The PS's RESULT, to every worker of every rack: SPINE set and the bitmap of every rack, as the spine's."""
    expected = Header(Kind.RESULT, JOB, seq, Flag.SPINE, slot=(3 + seq) % 16, lane_bits=8, bitmap=ALL_RACKS).pack(total)
    assert out == [Datagram(expected, w) for w in WORKERS]


def test_rack_sums_through_the_spine_and_from_a_leaf_complete_with_a_spine_result_to_every_worker():
    ps = make_ps()
    out = ps.receive([Datagram(rack_sum(0, 0), SPINE), Datagram(rack_sum(1, 0), LEAVES[1]), Datagram(rack_sum(2, 0), SPINE)], 0.0)
    assert_result(out, 0)
    counts = ps.counters()
    assert (counts["rx_data"], counts["pieces"], counts["completed"]) == (3, 3, 1)


def test_a_spine_partial_and_one_racks_workers_complete():
    ps = make_ps()
    assert send(ps, (spine_partial(0b101, 1), SPINE), (worker_data(2, 1), LEAVES[1]), (worker_data(3, 1), WORKERS[3])) == []
    assert_result(ps.receive([Datagram(worker_data(4, 1), LEAVES[1])], 0.0), 1)


def test_a_leaf_partial_its_racks_other_workers_and_the_spines_partial_of_the_other_racks_complete():
    ps = make_ps()
    leaf = partial(0b101, 2, sums([2, 4]))  # rack 1's ranks 0 and 2, flushed by its leaf
    assert send(ps, (leaf, LEAVES[1]), (worker_data(3, 2), WORKERS[3])) == []
    assert_result(ps.receive([Datagram(spine_partial(0b101, 2), SPINE)], 0.0), 2)


def test_a_spine_partial_holding_a_rack_whose_workers_resent_counts_each_worker_once():
    ps = make_ps()
    send(ps, (worker_data(0, 3, flags=Flag.RESEND), WORKERS[0]), (worker_data(1, 3), LEAVES[0]))  # rack 0 whole, as workers
    assert send(ps, (spine_partial(0b011, 3), SPINE)) == []  # racks 0 and 1: overlaps rack 0's workers
    assert_result(ps.receive([Datagram(rack_sum(2, 3), SPINE)], 0.0), 3)  # the cover: racks {0, 1} and rack 2
    assert ps.counters()["completed"] == 1


def test_overlapping_pieces_wait_for_a_disjoint_cover_of_every_worker():
    ps = make_ps()
    assert send(ps, (spine_partial(0b011, 4), SPINE), (spine_partial(0b110, 4), SPINE)) == [], "both hold rack 1"
    assert ps.waiting().bitmaps() == [0b111111]
    assert_result(ps.receive([Datagram(rack_sum(2, 4), LEAVES[2])], 0.0), 4)


def test_max_chunks_take_the_maximum_over_both_levels():
    ps = make_ps()
    norms = [0x3F800000 + place for place in range(len(WORKERS))]

    def max_data(place, source):
        return data(PLACES[place][1], 5, [norms[place]], flags=Flag.MAX, lane_bits=32), source

    send(ps, (partial(0b11, 5, [max(norms[:2])], flags=Flag.SPINE | Flag.MAX, lane_bits=32), LEAVES[0]))
    assert ps.counters()["bad_format"] == 0 and ps.counters()["unregistered"] == 1, "a leaf's PARTIAL has no SPINE"
    spine = partial(0b101, 5, [max(norms[:2] + norms[5:])], flags=Flag.SPINE | Flag.MAX, lane_bits=32)
    send(ps, (spine, SPINE), max_data(2, WORKERS[2]), max_data(3, LEAVES[1]))
    out = send(ps, max_data(4, WORKERS[4]))
    assert [addr for *_, addr in out] == list(WORKERS)
    header, payload, _ = out[0]
    assert header.flags == Flag.SPINE | Flag.MAX and header.bitmap == ALL_RACKS and payload == [max(norms)]


def test_a_resend_gets_a_status_of_its_racks_workers_held_and_a_second_one_fetches_from_every_other_worker():
    ps = make_ps()
    send(ps, (spine_partial(0b001, 6), SPINE), (worker_data(2, 6), LEAVES[1]))
    status = Header(Kind.STATUS, JOB, 6, slot=9, lane_bits=8, bitmap=0b101).pack()  # rack 1's ranks 0 and 2
    resend = Datagram(worker_data(4, 6, flags=Flag.RESEND), WORKERS[4])
    assert ps.receive([resend], 0.0) == [Datagram(status, WORKERS[4])]
    out = ps.receive([Datagram(worker_data(0, 6, flags=Flag.RESEND), LEAVES[0])], 0.0)
    assert out == [Datagram(Header(Kind.STATUS, JOB, 6, slot=9, lane_bits=8, bitmap=0b11).pack(), WORKERS[0])], "rack 0 whole"
    assert ps.counters()["duplicate"] == 0, "a worker's resend overlapping the spine's partial is a piece of its own"
    fetch = Header(Kind.FETCH, JOB, 6, slot=9, lane_bits=8).pack()
    out = ps.receive([resend], 0.1)  # worker 4 again, after its timeout
    assert out == [Datagram(fetch, w) for place, w in enumerate(WORKERS) if place != 4] + [Datagram(status, WORKERS[4])]


def test_a_resend_of_a_chunk_proven_complete_gets_its_racks_full_status():
    ps = make_ps(racked_spec(window=2))
    send(ps, (worker_data(5, 2), WORKERS[5]))
    *_, (header, _, addr) = send(ps, (worker_data(3, 0, flags=Flag.RESEND), LEAVES[1]))
    assert (header.kind, header.bitmap, addr) == (Kind.STATUS, 0b111, WORKERS[3])


def test_flush_requests_go_to_the_spine_and_every_leaf_at_the_chunks_slot():
    ps = make_ps()
    send(ps, (worker_data(1, 7), LEAVES[0]), now=1.0)
    flush = Header(Kind.FLUSH, JOB, 7, slot=10, lane_bits=8).pack()
    assert ps.next_deadline() == pytest.approx(1.002)
    assert ps.tick(ps.next_deadline()) == [Datagram(flush, to) for to in (SPINE, *LEAVES)]
    assert ps.counters()["flush_sent"] == 4


def test_the_spines_result_copy_is_stored_replayed_to_workers_and_makes_later_pieces_late():
    ps = make_ps()
    send(ps, (worker_data(0, 8), WORKERS[0]))
    copy = Header(Kind.RESULT, JOB, 8, Flag.SPINE, slot=11, lane_bits=8, bitmap=ALL_RACKS).pack(TOTAL)
    held = Header(Kind.RESULT, JOB, 9, Flag.SPINE | Flag.HOLD, slot=12, lane_bits=8, bitmap=ALL_RACKS).pack(TOTAL)
    assert ps.receive([Datagram(copy, SPINE), Datagram(held, SPINE)], 0.0) == [Datagram(held, SPINE)]
    late = [(rack_sum(1, 8), SPINE), (rack_sum(1, 8), LEAVES[1]), (spine_partial(0b01, 8), SPINE), (partial(0b1, 8, CONTRIB[2]), LEAVES[1])]
    assert send(ps, *late) == []
    assert ps.receive([Datagram(worker_data(3, 8, flags=Flag.RESEND), LEAVES[1])], 0.0) == [Datagram(copy, WORKERS[3])]
    counts = ps.counters()
    assert (counts["result_copies"], counts["results_returned"], counts["superseded"], counts["late"]) == (2, 1, 1, 4)


def test_a_workers_result_answering_a_fetch_carries_every_rack():
    ps = make_ps(racked_spec(window=2))
    send(ps, (worker_data(5, 2), WORKERS[5]), (worker_data(3, 0, flags=Flag.RESEND), WORKERS[3]))
    wrong = Header(Kind.RESULT, JOB, 0, Flag.SPINE, slot=3, lane_bits=8, bitmap=0b111111).pack(TOTAL)
    right = Header(Kind.RESULT, JOB, 0, Flag.SPINE, slot=3, lane_bits=8, bitmap=ALL_RACKS).pack(TOTAL)
    assert ps.receive([Datagram(wrong, WORKERS[1])], 0.0) == [] and ps.counters()["bad_bitmap"] == 1
    assert ps.receive([Datagram(right, WORKERS[1])], 0.0) == [Datagram(right, WORKERS[3])]
    assert ps.counters()["fetched"] == 1


def test_sources_and_bitmaps_of_each_level_are_checked():
    ps = make_ps()
    stranger = ("10.9.9.9", 9999)
    drops = [
        (worker_data(2, 0), SPINE, "unregistered"),  # workers' DATA comes from them or their leaf
        (data(1, 0, CONTRIB[3]), WORKERS[2], "unregistered"),  # rank 1 claimed by rack 1's rank 0
        (data(2, 0, CONTRIB[0]), LEAVES[0], "unregistered"),  # rack 0 has ranks 0 and 1
        (data(0, 0, CONTRIB[0]), stranger, "unregistered"),
        (rack_sum(1, 0), LEAVES[0], "unregistered"),  # leaf 0 sends rack 0's sum, not rack 1's
        (rack_sum(1, 0), WORKERS[2], "unregistered"),
        (data(3, 0, TOTAL, flags=Flag.SPINE), SPINE, "unregistered"),  # three racks
        (partial(0b1, 0, CONTRIB[0]), SPINE, "unregistered"),  # the spine's PARTIALs carry SPINE
        (spine_partial(0b1, 0), LEAVES[0], "unregistered"),  # and only its
        (partial(0b100, 0, CONTRIB[0]), LEAVES[0], "bad_bitmap"),  # rack 0 has 2 workers
        (partial(0, 0, CONTRIB[0]), LEAVES[0], "bad_bitmap"),
        (partial(0b1000, 0, TOTAL, flags=Flag.SPINE), SPINE, "bad_bitmap"),  # three racks
        (partial(0, 0, TOTAL, flags=Flag.SPINE), SPINE, "bad_bitmap"),
        (result(0, TOTAL, bitmap=0b111111, flags=Flag.SPINE), SPINE, "bad_bitmap"),  # a RESULT counts racks
        (result(0, TOTAL, bitmap=ALL_RACKS, flags=Flag.SPINE), LEAVES[0], "unregistered"),  # copies come from the spine
        (data(0, 0, CONTRIB[0], lane_bits=16), WORKERS[0], "bad_format"),
    ]
    for packet, source, reason in drops:
        before = ps.counters()
        assert ps.receive([Datagram(packet, source)], 0.0) == []
        assert ps.counters()[reason] == before[reason] + 1, (reason, decoded(Datagram(packet, source)))
    assert ps.jobs()[0]["pending"] == 0 and ps.next_deadline() is None


def test_a_job_of_one_switch_takes_no_spine_packets():
    ps = make_ps(make_spec())
    switch = ("10.0.0.100", 47100)
    for packet in (data(1, 0, CONTRIB[1], flags=Flag.SPINE), partial(0b11, 0, CONTRIB[0], flags=Flag.SPINE)):
        assert ps.receive([Datagram(packet, switch)], 0.0) == []
    assert ps.counters()["bad_format"] == 2 and ps.jobs()[0]["pending"] == 0


def test_a_chunk_takes_at_most_2_n_plus_r_pieces_but_always_single_workers():
    racks = (8, 8)
    workers = tuple((f"10.0.{r}.{rank + 1}", 5000) for r in range(2) for rank in range(8))
    ps = make_ps(racked_spec(racks, workers=workers, leaves=LEAVES[:2]))
    overlapping = [b for b in range(256) if not b & 1 and b.bit_count() > 1][:2 * (16 + 2) + 1]  # never rank 0 of rack 0
    send(ps, *[(partial(bitmap, 0, [bitmap, 0, 0, 0]), LEAVES[0]) for bitmap in overlapping])
    assert (ps.counters()["pieces"], ps.counters()["overloaded"]) == (36, 1)
    send(ps, (data(0, 0, [1, 0, 0, 0]), workers[0]))
    assert ps.counters()["pieces"] == 37


def test_waiting_reports_what_the_ps_holds_by_place_in_workers():
    ps = make_ps()
    send(ps, (spine_partial(0b001, 0), SPINE), (worker_data(3, 0), WORKERS[3]), (rack_sum(2, 1), LEAVES[2]))
    waiting = ps.waiting()
    assert waiting.chunk.tolist() == [0, 1] and waiting.bitmaps() == [0b001011, 0b100000]


def test_waiting_reports_every_worker_of_a_racked_job_beyond_32():
    racks = (30, 10)
    workers = tuple((f"10.0.{r}.{rank + 1}", 5000) for r, n in enumerate(racks) for rank in range(n))
    ps = make_ps(racked_spec(racks, workers=workers, leaves=LEAVES[:2]))
    send(ps, (rack_sum(0, 2), LEAVES[0]), (data(5, 2, CONTRIB[0]), workers[35]))  # rack 0 whole, rack 1's rank 5
    waiting = ps.waiting()
    assert waiting.present.shape == (1, 2) and waiting.bitmaps() == [(1 << 30) - 1 | 1 << 35]


@pytest.mark.parametrize(("change", "message"), [
    (dict(leaves=(("leaf-0.example", 47100), LEAVES[1], LEAVES[2])), "leaves\\[0\\] 'leaf-0.example' is not a numeric IPv4"),
    (dict(spine=LEAVES[2]), "leaves\\[2\\] and switch \\(the spine\\) are both 10.1.0.3:47100"),
    (dict(workers=(LEAVES[0], *WORKERS[1:])), "workers\\[0\\] and leaves\\[0\\]"),
])  # fmt: skip
def test_a_racked_registration_names_each_switch_by_an_address_of_its_own(change, message):
    ps = make_core(K)
    with pytest.raises(ValueError, match=message):
        ps.register(racked_spec(**change))
    assert ps.jobs() == []
