"""Every branch of the switch's per-packet algorithm (docs/protocol.md, section 5):
exact output bytes, slot registers and counters."""

import numpy as np
import pytest
from switch_support import Rig, job_spec, path, ps_addr, worker_addr  # noqa: F401 (path: the fixture running each test on both cores)

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import Header, Kind
from ina.switch import SwitchConfig
from ina.switch.native import switch_core


def key(job, seq, op_max=False):
    return {"job": job, "seq": seq, "max": op_max}


def counts(rig, *names):
    c = rig.core.counters()
    return {n: c[n] for n in names}


@pytest.fixture
def rig(path):
    r = Rig(pool=8, words=4, path=path)
    r.register(job_spec(1, workers=3, window=4))
    return r


def test_first_packet_claims_the_slot(rig):
    assert rig.send(rig.data(1, 0, 5, [1, 2, 3, 4], prio=7), now=2.5) == []
    assert rig.slot_state(1, 5) == {"key": key(1, 5), "prio": 7, "bitmap": 0b001, "value": [1, 2, 3, 4], "words": 4,
                                    "redirect": None, "touched": 2.5}  # fmt: skip
    assert counts(rig, "rx_packets", "claimed", "tx_packets") == {"rx_packets": 1, "claimed": 1, "tx_packets": 0}


def test_completion_sends_the_result_to_every_worker_then_a_copy_to_the_ps_and_frees_the_slot(rig):
    rig.send(rig.data(1, 0, 5, [1, 2, 3, 0xFFFFFFFF]), rig.data(1, 2, 5, [10, 20, 30, 2], prio=3))
    assert rig.slot_state(1, 5)["bitmap"] == 0b101 and rig.slot_state(1, 5)["prio"] == 3
    out = rig.send(rig.data(1, 1, 5, [100, 200, 300, 0]))
    expected = rig.result(1, 5, [111, 222, 333, 1])  # 32-bit sums wrap modulo 2**32
    assert [(o.addr, o.data) for o in out] == [(worker_addr(1, r), expected) for r in range(3)] + [(ps_addr(1), expected)]
    assert out[0].header.bitmap == 0b111 and out[0].header.priority == 0 and out[0].header.rank == 0
    assert rig.slot_state(1, 5)["key"] is None
    assert counts(rig, "claimed", "aggregated", "completed", "tx_packets") == {"claimed": 1, "aggregated": 2, "completed": 1, "tx_packets": 4}


def test_without_result_copies_a_completed_chunk_goes_to_the_workers_alone(path):
    rig = Rig(pool=8, words=4, path=path)
    rig.core = switch_core(SwitchConfig(8, 4, "esa", result_copies=False), path)
    rig.register(job_spec(1, workers=2, window=4))
    out = rig.send(rig.data(1, 0, 5, [1, 2, 3, 4]), rig.data(1, 1, 5, [10, 20, 30, 40]))
    assert [(o.addr, o.data) for o in out] == [(worker_addr(1, r), rig.result(1, 5, [11, 22, 33, 44])) for r in range(2)]
    assert rig.slot_state(1, 5)["key"] is None and counts(rig, "completed", "tx_packets") == {"completed": 1, "tx_packets": 2}


def test_atp_needs_result_copies():
    with pytest.raises(ValueError, match="policy atp sends every RESULT through the PS"):
        SwitchConfig(policy="atp", result_copies=False)


def test_a_single_worker_job_completes_at_claim(path):
    rig = Rig(path=path)
    rig.register(job_spec(2, workers=1, window=1))
    out = rig.send(rig.data(2, 0, 0, [9, 8, 7, 6]))
    assert [o.data for o in out] == [rig.result(2, 0, [9, 8, 7, 6])] * 2
    assert rig.slot_state(2, 0)["key"] is None


def test_max_chunks_take_the_unsigned_maximum_and_answer_in_32_bit_lanes(rig):
    norms = [np.float32(v).view(np.uint32) for v in (1.5, 7.25, 3.0)]
    out = rig.send(*(rig.data(1, r, 0, [int(norms[r]), 0, 0, 0], op_max=True) for r in range(3)))
    assert out[0].data == rig.result(1, 0, [int(norms[1]), 0, 0, 0], op_max=True)
    assert out[0].header.lane_bits == 32 and out[0].header.is_max


@pytest.mark.parametrize("words", [(0x7FC00000, 0x3FC00000, 0x7F800000), (0x3FC00000, 0x7F7FFFFF, 0x7FC00000)])
def test_a_canonical_nan_norm_wins_the_max_over_inf_and_every_finite_norm(rig, words):
    """docs/protocol.md, section 2: the verdict "some bucket is non-finite" is the max of the words."""
    out = rig.send(*(rig.data(1, r, 0, [words[r], 0, 0, 0], op_max=True) for r in range(3)))
    assert out[0].data == rig.result(1, 0, [0x7FC00000, 0, 0, 0], op_max=True)


def test_a_network_duplicate_is_dropped_and_changes_nothing(rig):
    rig.send(rig.data(1, 0, 5))
    before = rig.slot_state(1, 5)
    assert rig.send(rig.data(1, 0, 5, [50, 50, 50, 50])) == []
    assert rig.slot_state(1, 5) == before
    assert counts(rig, "duplicate", "aggregated") == {"duplicate": 1, "aggregated": 0}


def test_a_resend_of_a_held_contribution_flushes_the_slot_and_later_packets_follow_it(rig):
    rig.send(rig.data(1, 0, 5, [1, 1, 1, 1], prio=4), rig.data(1, 1, 5, [2, 2, 2, 2]))
    out = rig.send(rig.data(1, 0, 5, [1, 1, 1, 1], resend=True))
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), rig.partial(1, 5, 0b011, [3, 3, 3, 3], prio=4))]
    state = rig.slot_state(1, 5)
    assert state["key"] is None and state["redirect"] == key(1, 5)
    late = rig.data(1, 2, 5)
    assert [(o.addr, o.data) for o in rig.send(late)] == [(ps_addr(1), late.data)]  # forwarded unchanged
    assert counts(rig, "flushed", "redirected") == {"flushed": 1, "redirected": 1}


def test_a_resend_whose_contribution_the_slot_lacks_is_added(rig):
    rig.send(rig.data(1, 0, 5))
    assert rig.send(rig.data(1, 1, 5, resend=True)) == []
    assert rig.slot_state(1, 5)["bitmap"] == 0b011
    assert counts(rig, "aggregated", "flushed") == {"aggregated": 1, "flushed": 0}


def test_a_resend_finding_a_free_slot_goes_to_the_ps_which_holds_any_result(rig):
    resend = rig.data(1, 1, 5, resend=True)
    assert [(o.addr, o.data) for o in rig.send(resend)] == [(ps_addr(1), resend.data)]
    assert rig.slot_state(1, 5)["key"] is None
    assert counts(rig, "resend_forwarded", "claimed") == {"resend_forwarded": 1, "claimed": 0}


def test_a_newer_chunk_of_the_same_job_replaces_a_stale_partial(rig):
    rig.send(rig.data(1, 0, 1, [5, 5, 5, 5], prio=2))
    out = rig.send(rig.data(1, 1, 1 + 8, [6, 6, 6, 6]))  # same slot: seq + pool
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), rig.partial(1, 1, 0b001, [5, 5, 5, 5], prio=2))]
    assert rig.slot_state(1, 9)["key"] == key(1, 9) and rig.slot_state(1, 9)["value"] == [6, 6, 6, 6]
    assert counts(rig, "stale", "claimed") == {"stale": 1, "claimed": 2}


def test_an_old_straggler_or_a_resend_of_another_chunk_of_the_job_goes_to_the_ps(rig):
    rig.send(rig.data(1, 0, 9))
    straggler, resend = rig.data(1, 1, 1), rig.data(1, 2, 17, resend=True)
    assert [(o.addr, o.data) for o in rig.send(straggler, resend)] == [(ps_addr(1), straggler.data), (ps_addr(1), resend.data)]
    assert rig.slot_state(1, 9)["key"] == key(1, 9)
    assert counts(rig, "straggler", "resend_forwarded") == {"straggler": 1, "resend_forwarded": 1}


def test_seq_comparisons_wrap_at_2_to_the_32(rig):
    old = 2**32 - 3
    rig.send(rig.data(1, 0, old, [1, 1, 1, 1]))
    out = rig.send(rig.data(1, 0, old + 8))  # seq 5 after the wrap: newer, same slot
    assert rig.slot(1, old) == rig.slot(1, old + 8)
    assert [o.header.kind for o in out] == [Kind.PARTIAL] and out[0].header.seq == old
    assert rig.slot_state(1, old + 8)["key"] == key(1, 5)


@pytest.fixture
def two_jobs(path):
    """Jobs 1 and 2 sharing one slot (pool 1): every chunk of one meets every chunk of the other."""
    rigs = {}
    for policy in ("esa", "fcfs"):
        r = Rig(pool=1, words=4, policy=policy, path=path)
        r.register(job_spec(1, workers=2, window=1))
        r.register(job_spec(2, workers=2, window=1, priority_cap=6))
        rigs[policy] = r
    return rigs


def test_esa_preempts_a_lower_priority_partial_to_its_ps_and_redirects_its_late_packets(two_jobs):
    rig = two_jobs["esa"]
    rig.send(rig.data(1, 0, 3, [1, 2, 3, 4], prio=2))
    out = rig.send(rig.data(2, 1, 7, [9, 9, 9, 9], prio=3))
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), rig.partial(1, 3, 0b01, [1, 2, 3, 4], prio=2))]
    state = rig.slot_state(2, 7)
    assert state["key"] == key(2, 7) and state["bitmap"] == 0b10 and state["redirect"] == key(1, 3)
    late = rig.data(1, 1, 3)
    assert [(o.addr, o.data) for o in rig.send(late)] == [(ps_addr(1), late.data)]
    assert counts(rig, "preempted", "claimed", "redirected") == {"preempted": 1, "claimed": 2, "redirected": 1}


def test_the_priority_cap_limits_preemption(two_jobs):
    rig = two_jobs["esa"]
    rig.send(rig.data(1, 0, 3, prio=6))
    collided = rig.data(2, 0, 7, prio=200)  # capped at 6: not above the holder's 6
    assert [(o.addr, o.data) for o in rig.send(collided)] == [(ps_addr(2), collided.data)]
    assert counts(rig, "collision", "preempted") == {"collision": 1, "preempted": 0}


@pytest.mark.parametrize("policy", ["esa", "fcfs"])
def test_a_collision_forwards_to_the_ps_and_the_chunk_keeps_following_there(two_jobs, policy):
    rig = two_jobs[policy]
    rig.send(rig.data(1, 0, 3, prio=5))
    first = rig.data(2, 0, 7, prio=5 if policy == "esa" else 6)  # esa: equal priority; fcfs: never preempts
    assert [(o.addr, o.data) for o in rig.send(first)] == [(ps_addr(2), first.data)]
    assert rig.slot_state(2, 7)["redirect"] == key(2, 7) and rig.slot_state(2, 7)["key"] == key(1, 3)
    rig.send(rig.data(1, 1, 3))  # job 1 completes: the slot is free again
    second = rig.data(2, 1, 7)
    assert [(o.addr, o.data) for o in rig.send(second)] == [(ps_addr(2), second.data)]  # no split partial
    assert rig.slot_state(2, 7)["key"] is None
    assert counts(rig, "collision", "redirected", "completed") == {"collision": 1, "redirected": 1, "completed": 1}


def test_a_resend_meeting_another_jobs_chunk_is_forwarded_without_preempting(two_jobs):
    rig = two_jobs["esa"]
    rig.send(rig.data(1, 0, 3, prio=0))
    resend = rig.data(2, 0, 7, prio=6, resend=True)
    assert [(o.addr, o.data) for o in rig.send(resend)] == [(ps_addr(2), resend.data)]
    assert rig.slot_state(1, 3)["key"] == key(1, 3)
    assert counts(rig, "resend_forwarded", "preempted") == {"resend_forwarded": 1, "preempted": 0}


def test_a_flush_request_flushes_its_chunk_and_always_sets_the_redirect(rig):
    rig.send(rig.data(1, 0, 5, [4, 4, 4, 4], prio=1))
    out = rig.send(rig.flush(1, 5))
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), rig.partial(1, 5, 0b001, [4, 4, 4, 4], prio=1))]
    assert rig.slot_state(1, 5)["key"] is None and rig.slot_state(1, 5)["redirect"] == key(1, 5)
    assert rig.send(rig.flush(1, 6)) == []  # not in its slot: only the redirect
    assert rig.slot_state(1, 6)["redirect"] == key(1, 6)
    assert counts(rig, "flush_requests", "flush_hits") == {"flush_requests": 2, "flush_hits": 1}


def test_a_flush_of_another_chunk_leaves_the_slot_alone(rig):
    rig.send(rig.data(1, 0, 5))
    assert rig.send(rig.flush(1, 5, op_max=True)) == []  # same seq, other operation: another key
    assert rig.slot_state(1, 5)["key"] == key(1, 5) and rig.slot_state(1, 5)["redirect"] == key(1, 5, True)


def test_the_idle_sweep_flushes_partials_untouched_for_slot_timeout(path):
    rig = Rig(slot_timeout=0.5, path=path)
    rig.register(job_spec(1, workers=2, window=4))
    rig.send(rig.data(1, 0, 0, [3, 3, 3, 3]), now=10.0)
    rig.send(rig.data(1, 0, 1), now=10.2)
    assert rig.core.next_deadline() == 10.5
    assert rig.tick(10.49) == []
    out = rig.tick(10.5)
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), rig.partial(1, 0, 0b01, [3, 3, 3, 3]))]
    assert rig.slot_state(1, 0)["key"] is None and rig.slot_state(1, 0)["redirect"] == key(1, 0)
    assert rig.core.next_deadline() == pytest.approx(10.7)
    rig.send(rig.data(1, 1, 1), now=10.6)  # completes seq 1: nothing left to sweep
    assert rig.core.next_deadline() is None
    assert counts(rig, "swept") == {"swept": 1}


def test_deregistering_removes_the_table_entry_then_every_slot_and_redirect_of_the_job(path):
    rig = Rig(pool=8, path=path)
    rig.register(job_spec(1, workers=2, window=4))
    rig.register(job_spec(2, workers=2, window=4))
    rig.send(rig.data(1, 0, 0), rig.data(2, 0, 0), rig.flush(1, 1))
    rig.core.deregister(1)
    assert rig.slot_state(1, 0)["key"] is None and rig.slot_state(1, 1)["redirect"] is None
    assert rig.slot_state(2, 0)["key"] == key(2, 0)
    assert rig.send(rig.data(1, 1, 0)) == [] and counts(rig, "unregistered") == {"unregistered": 1}
    rig.register(job_spec(1, workers=2, window=4))  # the id is reused with clean state
    rig.send(rig.data(1, 0, 1))
    assert rig.slot_state(1, 1)["key"] == key(1, 1) and rig.slot_state(1, 1)["bitmap"] == 0b01
    with pytest.raises(ValueError, match="not registered"):
        rig.core.deregister(9)


def test_invalid_packets_are_dropped_by_reason_and_change_nothing(rig):
    ok = rig.data(1, 0, 5)
    malformed = [ok.data[:19], b"\x00" + ok.data[1:], ok.data[:-3], ok.data[:20], ok.data + b"\0\0\0\0",
                 rig.data(1, 0, 5, bitmap=3).data]  # (ok.data[:-4] is a short chunk: valid)
    unexpected = [rig.data(1, 0, 5, kind=Kind.STATUS, bitmap=0).data[:20]]
    cases = {
        "malformed": [(d, worker_addr(1, 0)) for d in malformed],
        "unexpected": [(d, worker_addr(1, 0)) for d in unexpected],
        "unregistered": [(rig.data(1, 0, 5, src=worker_addr(1, 1)).data, worker_addr(1, 1)),  # another rank's address
                         (rig.data(1, 3, 5, bitmap=8).data, worker_addr(1, 3)),  # rank >= n
                         (Header(Kind.DATA, job=7, seq=0, rank=0, bitmap=1, lane_bits=8).pack(bytes(16)), worker_addr(1, 0)),
                         (rig.flush(1, 5).data, worker_addr(1, 0))],  # a FLUSH not from the job's PS
        "bad_slot": [(rig.data(1, 0, 5, slot=6).data, worker_addr(1, 0))],
        "bad_format": [(rig.data(1, 0, 5, index_bits=4).data, worker_addr(1, 0)),
                       (rig.data(1, 0, 5, lane_bits=16).data, worker_addr(1, 0)),
                       (rig.data(1, 0, 5, op_max=True, lane_bits=8).data, worker_addr(1, 0))],
    }  # fmt: skip
    before = rig.core.slots.registers()
    for reason, packets in cases.items():
        assert rig.send(*(Datagram(d, a) for d, a in packets)) == [], reason
        assert rig.core.counters()[reason] == len(packets), reason
    after = rig.core.slots.registers()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    assert rig.core.counters()["rx_packets"] == sum(map(len, cases.values()))


def test_a_batch_is_the_same_as_its_packets_one_at_a_time(rig):
    packets = [rig.data(1, r, s, resend=(s == 2 and r == 0)) for s in range(3) for r in (0, 1, 0, 2)]
    one_by_one = Rig(pool=8, words=4, path=rig.path)
    one_by_one.register(job_spec(1, workers=3, window=4))
    assert rig.send(*packets) == [o for p in packets for o in one_by_one.send(p)]


def test_registration_assigns_slot_bases_that_spread_windows_over_the_pool(path):
    core = switch_core(SwitchConfig(pool=16, words=4), path)
    bases = [core.register(job_spec(j, workers=2, window=4))["slot_base"] for j in range(3)]
    assert bases == [0, 4, 8]
    core.deregister(1)
    assert core.register(job_spec(5, workers=2, window=4))["slot_base"] == 4
    assert core.register(job_spec(6, workers=2, window=8))["slot_base"] == 8  # overlaps 4 slots; so would 12: lowest wins
    assert [j["slot_base"] for j in core.jobs()] == [0, 8, 4, 8]
    assert core.jobs()[0]["workers"][0] == {"host": "127.0.0.1", "port": worker_addr(0, 0)[1]}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"window": 9}, "window 9 exceeds the switch's pool of 8 slots"),
        ({"ps": None}, "has no 'ps'"),
        ({"index_bits": 4, "table": tuple(range(16))}, "index_bits 0"),
        ({"workers": (Endpoint("localhost", 9000),)}, "numeric IPv4"),
    ],
)
def test_registration_errors_say_what_to_change(change, message, path):
    core = switch_core(SwitchConfig(pool=8, words=4), path)
    body = job_spec(1, workers=2, window=4).to_json() | {k: v for k, v in change.items()}
    body = {k: (list(v) if isinstance(v, tuple) else v) for k, v in body.items()}
    body["workers"] = [w if isinstance(w, dict) else {"host": w.host, "port": w.port} for w in body["workers"]]
    with pytest.raises(ValueError, match=message):
        core.register(JobSpec.from_json(body))
    assert core.jobs() == []


def test_a_job_id_cannot_be_registered_twice(rig):
    with pytest.raises(ValueError, match="already registered; deregister it first"):
        rig.core.register(job_spec(1, workers=2, window=2))


@pytest.mark.parametrize(
    ("config", "message"),
    [({"pool": 12}, "power of two"), ({"words": 0}, "words"), ({"policy": "fifo"}, "policy"), ({"slot_timeout": 0}, "slot_timeout")],
)
def test_bad_configuration_is_refused_with_what_to_change(config, message):
    with pytest.raises(ValueError, match=message):
        SwitchConfig(**config)


def test_config_reports_the_deployment(rig):
    assert rig.core.config() == {"pool": 8, "words": 4, "policy": "esa", "slot_timeout": 1.0, "queues": "priority", "result_copies": True}
    assert rig.core.role == "switch"
