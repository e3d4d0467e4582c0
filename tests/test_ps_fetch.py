"""FETCH at the PS: a result lost by a worker and by the PS is fetched from the job's other
workers (docs/protocol.md, section 6), packet by packet."""

import numpy as np
import pytest
from ps_support import ps_path  # noqa: F401 (ps_path: each test on both PSes)
from test_ps_core import (CONTRIB, JOB, K, STRANGER, SWITCH, THC_TABLE, TOTAL, WORKERS, data, decoded, make_ps, make_spec,
                          partial, result, send)

from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind

DELAY = 0.002  # the PS's default flush_delay


def proven(ps, seq=0, window=2):
    """Make chunk `seq` one the window proves complete (a worker sent seq + window) and the PS lacks."""
    send(ps, (data(1, seq + window, CONTRIB[1]), SWITCH))


def asked(out):
    """The FETCHes among replies, as (seq, destination)."""
    return [(h.seq, addr) for h, _, addr in out if h.kind == Kind.FETCH]


def test_a_resend_of_a_chunk_proven_complete_fetches_it_from_every_other_worker():
    ps = make_ps(make_spec(window=2))
    proven(ps)
    out = send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH))
    assert [addr for _, _, addr in out] == [WORKERS[0], WORKERS[1], WORKERS[2], WORKERS[3]]
    for header, payload, _ in out[:3]:
        assert header == Header(Kind.FETCH, JOB, 0, Flag.NONE, rank=0, priority=0, slot=3, index_bits=0, lane_bits=8, bitmap=0)
        assert payload == []
    status, _, _ = out[3]
    assert (status.kind, status.bitmap) == (Kind.STATUS, 0b1111)
    assert ps.counters()["fetch_sent"] == 3 and ps.jobs()[0]["fetching"] == 1


def test_fetches_for_a_chunk_go_out_at_most_once_per_flush_delay_to_all_but_the_resending_worker():
    ps = make_ps(make_spec(window=2))
    proven(ps)
    send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH), now=1.0)
    for now in (1.0, 1.0 + DELAY / 2):  # the same worker again, then another: STATUS only
        out = send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH), (data(2, 0, CONTRIB[2], flags=Flag.RESEND), SWITCH),
                   now=now)
        assert [h.kind for h, _, _ in out] == [Kind.STATUS, Kind.STATUS]
    # Worker 2 asked before, but may hold the result by now: it is asked too.
    out = send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), WORKERS[3]), now=1.0 + DELAY)
    assert asked(out) == [(0, WORKERS[0]), (0, WORKERS[1]), (0, WORKERS[2])]
    assert ps.counters()["fetch_sent"] == 6


def test_a_workers_answer_is_stored_and_sent_to_every_worker_that_asked():
    ps = make_ps(make_spec(window=2))
    proven(ps)
    send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH), (data(2, 0, CONTRIB[2], flags=Flag.RESEND), WORKERS[2]))
    answer = result(0, TOTAL)  # what the switch sent worker 0, kept as received
    out = ps.receive([Datagram(answer, WORKERS[0])], 0.0)
    assert out == [Datagram(answer, WORKERS[2]), Datagram(answer, WORKERS[3])]
    assert send(ps, (answer, WORKERS[1])) == []  # a second answer: no longer fetching
    (replay,) = ps.receive([Datagram(data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH)], 0.0)
    assert replay == Datagram(answer, WORKERS[3])
    counts = ps.counters()
    assert (counts["fetched"], counts["unsolicited"], counts["results_replayed"]) == (1, 1, 3)
    assert ps.jobs()[0]["fetching"] == 0


@pytest.mark.parametrize(("answer", "source", "reason"), [
    (result(0, TOTAL), STRANGER, "unregistered"),
    (result(0, TOTAL, bitmap=0b0111), WORKERS[0], "bad_bitmap"),
    (result(0, TOTAL, flags=Flag.MAX), WORKERS[0], "mismatch"),  # not the chunk's operation
    (Header(Kind.RESULT, JOB, 0, slot=4, lane_bits=8, bitmap=0b1111).pack(np.zeros(K, np.uint32)), WORKERS[0], "mismatch"),
    (Header(Kind.RESULT, JOB, 0, slot=3, lane_bits=16, bitmap=0b1111).pack(np.zeros(K, np.uint32)), WORKERS[0], "mismatch"),
    (result(1, TOTAL), WORKERS[0], "unsolicited"),  # a chunk nobody asked for
])
def test_an_answer_that_is_not_the_fetched_result_is_dropped_and_counted(answer, source, reason):
    ps = make_ps(make_spec(window=2))
    proven(ps)
    send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND), SWITCH))
    assert send(ps, (answer, source)) == []
    assert ps.counters()[reason] == 1 and ps.counters()["fetched"] == 0 and ps.jobs()[0]["fetching"] == 1


def test_an_incomplete_chunk_of_a_job_with_a_switch_is_fetched_when_a_worker_resends_it_again():
    """Its last chunks: the switch completed it, worker 3's RESULT and the PS's copy were lost, and no
    later chunk will ever let the window prove it. Worker 3's resend becomes a piece; others hold the result.
    Usually the switch's copy or its partials are on their way: the first resend only notes the worker, whose
    next one (after its timeout) fetches."""
    ps = make_ps()
    out = send(ps, (data(3, 5, CONTRIB[3], flags=Flag.RESEND), SWITCH))
    assert [(h.kind, h.bitmap) for h, _, _ in out] == [(Kind.STATUS, 0b1000)]
    assert [decoded(d)[0].kind for d in ps.tick(DELAY) + ps.tick(3 * DELAY)] == [Kind.FLUSH] * 2
    out = send(ps, (data(3, 5, CONTRIB[3], flags=Flag.RESEND), SWITCH), now=0.1)
    assert asked(out) == [(5, WORKERS[r]) for r in range(3)] and out[-1][0].kind == Kind.STATUS
    answer = result(5, TOTAL)
    assert ps.receive([Datagram(answer, WORKERS[1])], 0.0) == [Datagram(answer, WORKERS[3])]
    assert send(ps, (partial(0b0111, 5, TOTAL), SWITCH)) == []
    counts = ps.counters()
    assert (counts["fetched"], counts["superseded"], counts["late"]) == (1, 1, 1)
    assert ps.jobs()[0]["pending"] == 0 and ps.next_deadline() is None


def test_a_chunk_completed_at_the_ps_or_by_a_late_copy_needs_no_fetch_answer():
    ps = make_ps()
    send(ps, (data(3, 5, CONTRIB[3], flags=Flag.RESEND), SWITCH), (data(2, 6, CONTRIB[2], flags=Flag.RESEND), SWITCH))
    assert ps.jobs()[0]["fetching"] == 2
    out = send(ps, *[(data(r, 5, CONTRIB[r]), SWITCH) for r in range(3)])
    assert [addr for _, _, addr in out] == list(WORKERS)  # every worker, the requester too
    copy = result(6, TOTAL)
    assert ps.receive([Datagram(copy, SWITCH)], 0.0) == [Datagram(copy, WORKERS[2])]
    assert ps.jobs()[0]["fetching"] == 0
    assert send(ps, (result(5, TOTAL), WORKERS[0])) == [] and ps.counters()["unsolicited"] == 1


def test_ps_only_chunks_are_fetched_only_when_the_window_proves_them_complete():
    """In PS-only mode an incomplete chunk has no result anywhere; an evicted one does."""
    spec = make_spec(switch=False, index_bits=4, table=THC_TABLE, window=1)
    ps = make_ps(spec, result_retention=1)
    indices = np.arange(K, dtype=np.uint32)
    out = send(ps, (data(0, 0, indices, flags=Flag.RESEND, index_bits=4, slot=0), WORKERS[0]))
    assert [h.kind for h, _, _ in out] == [Kind.STATUS]
    send(ps, *[(data(r, seq, indices, index_bits=4, slot=0), WORKERS[r]) for seq in range(6) for r in range(4)])
    assert ps.jobs()[0]["results"] == 4  # chunks 0 and 1 were evicted from the ring of 4 W
    out = send(ps, (data(0, 1, indices, flags=Flag.RESEND, index_bits=4, slot=0), WORKERS[0]))
    assert [h for h, _, _ in out][0] == Header(Kind.FETCH, JOB, 1, slot=0, index_bits=4, lane_bits=8)
    assert asked(out) == [(1, WORKERS[r]) for r in (1, 2, 3)]


def test_max_chunks_are_fetched_with_their_operation():
    ps = make_ps(make_spec(window=2))
    send(ps, (data(1, 2, CONTRIB[1], flags=Flag.MAX, lane_bits=32), SWITCH))
    out = send(ps, (data(3, 0, CONTRIB[3], flags=Flag.RESEND | Flag.MAX, lane_bits=32), SWITCH))
    header = out[0][0]
    assert (header.kind, header.flags, header.lane_bits, header.resend) == (Kind.FETCH, Flag.MAX, 32, False)
    answer = Header(Kind.RESULT, JOB, 0, Flag.MAX, slot=3, lane_bits=32, bitmap=0b1111).pack(np.arange(K, dtype=np.uint32))
    assert ps.receive([Datagram(answer, WORKERS[0])], 0.0) == [Datagram(answer, WORKERS[3])]


def test_a_job_fetches_at_most_ring_chunks_at_once_forgetting_the_oldest():
    ps = make_ps(make_spec(window=1), result_retention=1)  # ring: 4 * W = 4
    proven(ps, seq=0, window=100)
    for seq in range(6):
        send(ps, (data(3, seq, CONTRIB[3], flags=Flag.RESEND), SWITCH))
    assert ps.jobs()[0]["fetching"] == 4 and ps.counters()["overloaded"] == 2
    assert send(ps, (result(0, TOTAL), WORKERS[0])) == [] and ps.counters()["unsolicited"] == 1
    (answer,) = ps.receive([Datagram(result(5, TOTAL), WORKERS[0])], 0.0)
    assert decoded(answer)[2] == WORKERS[3]
