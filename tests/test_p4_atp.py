"""Policy atp on BMv2 (docs/p4.md, "atp"; p4src/'s INA_HOLD): the scenarios of tests/test_switch_atp.py, and what a
held result meets (the job's packets, a FLUSH, a newer chunk, the racks' levels), replayed through real BMv2 in one pass
and over word passes, each giving the exact bytes those tests name and exactly the packets, counters and slots of the
software switch fed the same packets."""

from __future__ import annotations

import pytest
from bmv2_support import Replay, needs_bmv2, port, replay, switch_for  # noqa: F401 (fixtures)
from switch_support import job_spec, ps_addr, worker_addr
from test_switch_atp import held
from test_switch_racks import JOB, LEAVES, SPINE_ADDR, leaf_spec, spine_result, spine_spec, sum_up

from ina.net.node import Datagram

pytestmark = [needs_bmv2, pytest.mark.parametrize("word_group", [0, 2], ids=["one-pass", "word-passes"])]

SEQ = 3
"""Job 1's chunk in the scenarios."""


@pytest.fixture
def pair(replay) -> Replay:
    """Two 2-worker jobs over the whole pool, as tests/test_switch_atp.py's one-slot pool shares its slot."""
    return replay(job_spec(1, workers=2, window=8), job_spec(2, workers=2, window=8), policy="atp")


def counted(pair: Replay, *names: str) -> dict[str, int]:
    """BMv2's counters of those names (the reference's are the same: Replay checks all of them after every packet)."""
    counters = pair.switch.counters()
    return {name: counters[name] for name in names}


def other_seq(pair: Replay) -> int:
    """Job 2's chunk in the slot of job 1's chunk SEQ."""
    return next(s for s in range(64) if pair.rig.slot(2, s) == pair.rig.slot(1, SEQ))


def completed(pair: Replay, seq: int = SEQ) -> bytes:
    """Job 1's chunk `seq` completed (11, 22, 33, 44) and held; its RESULT, as the workers are to get it."""
    rig = pair.rig
    result = rig.result(1, seq, [11, 22, 33, 44])
    assert pair.send(rig.data(1, 0, seq, [1, 2, 3, 4]), rig.data(1, 1, seq, [10, 20, 30, 40])) == [(ps_addr(1), held(result))]
    return result


def test_a_completed_chunk_goes_to_the_ps_alone_flagged_hold_and_keeps_its_slot(pair):
    completed(pair)
    assert pair.switch.slots()[0]["bitmap"] == 0b11
    other = pair.rig.data(2, 0, other_seq(pair))
    assert pair.send(other) == [(ps_addr(2), other.data)]  # the held slot is taken
    assert pair.switch.counters()["collision"] == 1


def test_the_ps_returning_the_result_frees_the_slot_and_sends_it_to_every_worker(pair):
    result = completed(pair)
    returned = Datagram(held(result), ps_addr(1))
    assert pair.send(returned) == [(worker_addr(1, 0), result), (worker_addr(1, 1), result)]
    assert pair.switch.slots() == []
    assert pair.send(returned) == [(worker_addr(1, 0), result), (worker_addr(1, 1), result)]  # nothing freed twice
    assert counted(pair, "releases", "release_hits") == {"releases": 2, "release_hits": 1}
    pair.send(pair.rig.data(2, 0, other_seq(pair), [5, 5, 5, 5]))
    assert pair.switch.counters()["claimed"] == 2


def test_a_return_frees_only_the_chunk_it_names(pair):
    rig = pair.rig
    pair.send(rig.data(1, 0, SEQ))  # a partial, not a held result
    assert len(pair.send(rig.returned(1, SEQ, [3, 3, 3, 3]))) == 2
    assert pair.switch.slots()[0]["bitmap"] == 0b01
    assert [addr for addr, _ in pair.send(rig.data(1, 0, SEQ + 8), rig.data(1, 1, SEQ + 8))] == [ps_addr(1)] * 2  # stale, held
    assert len(pair.send(rig.returned(1, SEQ, [3, 3, 3, 3]))) == 2  # an older chunk's return
    assert pair.switch.slots()[0]["bitmap"] == 0b11
    assert counted(pair, "releases", "release_hits", "stale") == {"releases": 2, "release_hits": 0, "stale": 1}


def test_a_return_from_elsewhere_unflagged_or_partial_is_dropped(pair):
    rig = pair.rig
    result = completed(pair)
    assert pair.send(Datagram(held(result), worker_addr(1, 0))) == []
    assert pair.send(rig.returned(1, SEQ, [11, 22, 33, 44], hold=False), rig.returned(1, SEQ, [11, 22, 33, 44], bitmap=0b01)) == []
    assert counted(pair, "unregistered", "bad_format", "releases") == {"unregistered": 1, "bad_format": 2, "releases": 0}


def test_a_held_result_left_unreturned_is_swept(pair):
    completed(pair)
    assert pair.sweep() == [(ps_addr(1), pair.rig.partial(1, SEQ, 0b11, [11, 22, 33, 44]))]
    assert pair.switch.slots()[0]["key"] is None


def test_the_jobs_own_packets_meet_a_held_result_as_a_chunk_every_worker_is_in(pair):
    """A first transmission is a duplicate, a RESEND flushes it: a PARTIAL with every worker, the slot freed."""
    rig = pair.rig
    completed(pair)
    assert pair.send(rig.data(1, 0, SEQ)) == []
    assert pair.send(rig.data(1, 1, SEQ, resend=True)) == [(ps_addr(1), rig.partial(1, SEQ, 0b11, [11, 22, 33, 44]))]
    assert counted(pair, "duplicate", "flushed") == {"duplicate": 1, "flushed": 1}


def test_the_ps_flush_and_a_newer_chunk_evict_a_held_result_with_every_worker(pair):
    rig = pair.rig
    completed(pair)
    assert pair.send(rig.flush(1, SEQ)) == [(ps_addr(1), rig.partial(1, SEQ, 0b11, [11, 22, 33, 44]))]
    completed(pair, SEQ + 8)
    partial = rig.partial(1, SEQ + 8, 0b11, [11, 22, 33, 44])
    assert pair.send(rig.data(1, 0, SEQ + 16, [1, 1, 1, 1])) == [(ps_addr(1), partial)]  # stale
    pair.send(rig.data(1, 1, SEQ + 16, [2, 2, 2, 2]))  # held
    # the other operation's newer chunk (MAX): stale on a claim pass
    assert pair.send(rig.data(1, 1, SEQ + 24, [7, 7, 7, 7], op_max=True)) == [(ps_addr(1), rig.partial(1, SEQ + 16, 0b11, [3, 3, 3, 3]))]
    assert counted(pair, "flush_hits", "stale") == {"flush_hits": 1, "stale": 2}


def test_a_leaf_holds_its_sum_until_the_spines_result_passes_down(replay):
    pair = replay(leaf_spec(), policy="atp")
    rig = pair.rig
    pair.send(rig.data(JOB, 0, 6, [1, 1, 1, 1]))
    assert pair.send(rig.data(JOB, 1, 6, [2, 2, 2, 2])) == [(SPINE_ADDR, sum_up(rig, 6, [3, 3, 3, 3]))]
    assert pair.switch.slots()[0]["bitmap"] == 0b11
    result = spine_result(rig, 6, [9, 9, 9, 9])
    assert pair.send(Datagram(result, SPINE_ADDR)) == [(worker_addr(JOB, 0), result), (worker_addr(JOB, 1), result)]
    assert pair.switch.slots() == []
    assert counted(pair, "descended", "release_hits") == {"descended": 1, "release_hits": 1}


def test_a_spine_holds_its_result_and_passes_the_ps_return_to_the_leaves(replay):
    pair = replay(spine_spec(), policy="atp")
    rig = pair.rig
    up = [Datagram(sum_up(rig, 4, [rack + 1] * 4, rack=rack), LEAVES[rack]) for rack in range(3)]
    result = spine_result(rig, 4, [6, 6, 6, 6])
    assert pair.send(*up)[-1] == (ps_addr(JOB), held(result))
    assert pair.send(Datagram(held(result), ps_addr(JOB))) == [(leaf, result) for leaf in LEAVES]
    assert pair.switch.counters()["release_hits"] == 1


@pytest.mark.parametrize("policy", ["esa", "fcfs", "static"])
def test_only_atp_takes_a_result(replay, policy):
    pair = replay(job_spec(1, workers=2, window=4), policy=policy)
    assert pair.send(pair.rig.returned(1, 0, [1, 1, 1, 1])) == []
    assert counted(pair, "unexpected", "releases") == {"unexpected": 1, "releases": 0}
