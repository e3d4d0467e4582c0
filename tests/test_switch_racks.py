"""A switch as a racked job's leaf or spine (docs/protocol.md, section 10): a leaf sends its rack's sum up as
one DATA flagged SPINE and passes the spine's RESULT down; a spine takes only SPINE DATA from its leaves and
flags what it sends. Exact bytes, registers and counters, on both cores."""

import numpy as np
import pytest
from switch_support import Rig, decoded, path, ps_addr, worker_addr  # noqa: F401 (path: the fixture running each test on both cores)

from ina.control import Endpoint, JobSpec
from ina.control.jobs import Uplink
from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind
from ina.switch import SwitchConfig
from ina.switch.native import switch_core

SPINE_ADDR = ("127.0.0.1", 47100)
JOB, RACK, RACKS, POOL, WORDS = 5, 1, 3, 8, 4
LEAVES = [("127.0.0.1", 47101 + r) for r in range(RACKS)]


def leaf_spec(workers: int = 2, window: int = 4, slot_base: int = 2, span: int = POOL, rack: int = RACK) -> JobSpec:
    """Rack `rack`'s part of job JOB: its workers, and the way up."""
    return JobSpec(JOB, tuple(Endpoint(*worker_addr(JOB, r)) for r in range(workers)), window, ps=Endpoint(*ps_addr(JOB)),
                   uplink=Uplink(*SPINE_ADDR, rack=rack, racks=RACKS, slot_base=slot_base, span=span, pool=POOL))  # fmt: skip


def spine_spec(window: int = 4) -> JobSpec:
    return JobSpec(JOB, tuple(Endpoint(*leaf) for leaf in LEAVES), window, ps=Endpoint(*ps_addr(JOB)), level="spine")


def leaf_rig(path: str, policy: str = "esa", **spec: int) -> Rig:
    rig = Rig(pool=POOL, words=WORDS, policy=policy, path=path)
    rig.register(leaf_spec(**spec))
    return rig


def spine_rig(path: str, policy: str = "esa") -> Rig:
    rig = Rig(pool=POOL, words=WORDS, policy=policy, path=path)
    rig.register(spine_spec())
    return rig


def sum_up(rig: Rig, seq: int, values: list[int], prio: int = 0, rack: int = RACK, *, op_max: bool = False) -> bytes:
    """The exact DATA a leaf of rack `rack` sends its spine for a completed chunk."""
    flags = Flag.SPINE | (Flag.MAX if op_max else Flag.NONE)
    header = Header(Kind.DATA, job=JOB, seq=seq, flags=flags, rank=rack, priority=prio, slot=rig.slot(JOB, seq),
                    lane_bits=32 if op_max else 8, bitmap=1 << rack)  # fmt: skip
    return header.pack(np.array(values, dtype=np.uint32))


def spine_result(rig: Rig, seq: int, values: list[int], bitmap: int = (1 << RACKS) - 1, flags: Flag = Flag.SPINE) -> bytes:
    header = Header(Kind.RESULT, job=JOB, seq=seq, flags=flags, slot=rig.slot(JOB, seq), lane_bits=8, bitmap=bitmap)
    return header.pack(np.array(values, dtype=np.uint32))


def counts(rig: Rig, *names: str) -> dict[str, int]:
    c = rig.core.counters()
    return {n: c[n] for n in names}


def test_a_leaf_sends_its_racks_sum_up_as_one_spine_data_and_frees_the_slot(path):
    rig = leaf_rig(path)
    assert rig.send(rig.data(JOB, 0, 6, [1, 2, 3, 4], prio=9)) == []
    out = rig.send(rig.data(JOB, 1, 6, [10, 20, 30, 40], prio=3))
    assert [(o.addr, o.data) for o in out] == [(SPINE_ADDR, sum_up(rig, 6, [11, 22, 33, 44], prio=9))]
    assert rig.slot_state(JOB, 6)["key"] is None
    assert counts(rig, "completed", "sent_up", "claimed", "aggregated") == {"completed": 1, "sent_up": 1, "claimed": 1, "aggregated": 1}


def test_a_leaf_sends_a_short_max_chunk_up_as_long_as_it_came(path):
    rig = leaf_rig(path)
    rig.send(rig.data(JOB, 0, 2, [7], op_max=True))
    out = rig.send(rig.data(JOB, 1, 2, [9], op_max=True))
    assert [o.data for o in out] == [sum_up(rig, 2, [9], op_max=True)]


def test_a_leaf_passes_the_spines_result_down_to_its_rack_unchanged(path):
    rig = leaf_rig(path)
    result = spine_result(rig, 6, [1, 2, 3, 4])
    out = rig.send(Datagram(result, SPINE_ADDR))
    assert [(o.addr, o.data) for o in out] == [(worker_addr(JOB, 0), result), (worker_addr(JOB, 1), result)]
    assert counts(rig, "descended", "unexpected") == {"descended": 1, "unexpected": 0}


@pytest.mark.parametrize("why, packet, counter", [
    ("not from the spine", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS), ps_addr(JOB)), "unregistered"),
    ("without SPINE", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS, flags=Flag.NONE), SPINE_ADDR), "bad_format"),
    ("a bitmap of other racks", lambda rig: Datagram(spine_result(rig, 6, [1] * WORDS, bitmap=0b11), SPINE_ADDR), "bad_format"),
    ("a worker's DATA flagged SPINE", lambda rig: rig.data(JOB, 0, 6, flags=Flag.SPINE), "bad_format"),
])  # fmt: skip
def test_a_leaf_drops_and_counts_what_is_not_its_racks(path, why, packet, counter):
    rig = leaf_rig(path)
    assert rig.send(packet(rig)) == [], why
    assert rig.core.counters()[counter] == 1
    assert rig.slot_state(JOB, 6)["key"] is None


def test_under_atp_a_leaf_holds_its_sum_until_the_spines_result_passes_down(path):
    rig = leaf_rig(path, policy="atp")
    rig.send(rig.data(JOB, 0, 6, [1, 1, 1, 1]))
    out = rig.send(rig.data(JOB, 1, 6, [2, 2, 2, 2]))
    assert [(o.addr, o.data) for o in out] == [(SPINE_ADDR, sum_up(rig, 6, [3, 3, 3, 3]))]
    assert rig.slot_state(JOB, 6)["bitmap"] == 0b11  # held
    rig.send(Datagram(spine_result(rig, 6, [9, 9, 9, 9]), SPINE_ADDR))
    assert rig.slot_state(JOB, 6)["key"] is None
    assert counts(rig, "descended", "release_hits") == {"descended": 1, "release_hits": 1}


def test_a_spine_sums_its_leaves_and_flags_its_result_to_every_leaf_and_the_ps(path):
    rig = spine_rig(path)
    leaf = lambda rack, values: Datagram(sum_up(rig, 4, values, prio=rack, rack=rack), LEAVES[rack])  # noqa: E731
    assert rig.send(leaf(0, [1, 1, 1, 1]), leaf(2, [2, 2, 2, 2])) == []
    out = rig.send(leaf(1, [4, 4, 4, 4]))
    result = spine_result(rig, 4, [7, 7, 7, 7])
    assert [(o.addr, o.data) for o in out] == [*((leaf_addr, result) for leaf_addr in LEAVES), (ps_addr(JOB), result)]


def test_a_spine_takes_no_unflagged_data_and_no_resend(path):
    rig = spine_rig(path)
    plain = Header(Kind.DATA, job=JOB, seq=4, rank=0, slot=rig.slot(JOB, 4), lane_bits=8, bitmap=1).pack(np.ones(WORDS, np.uint32))
    resend = Header(Kind.DATA, job=JOB, seq=4, flags=Flag.SPINE | Flag.RESEND, rank=0, slot=rig.slot(JOB, 4), lane_bits=8,
                    bitmap=1).pack(np.ones(WORDS, np.uint32))  # fmt: skip
    assert rig.send(Datagram(plain, LEAVES[0]), Datagram(resend, LEAVES[0])) == []
    assert counts(rig, "bad_format", "claimed") == {"bad_format": 2, "claimed": 0}


def test_a_spines_partial_carries_spine_and_its_racks(path):
    rig = spine_rig(path)
    rig.send(Datagram(sum_up(rig, 4, [5, 5, 5, 5], prio=2, rack=2), LEAVES[2]))
    out = rig.send(rig.flush(JOB, 4))
    partial = Header(Kind.PARTIAL, job=JOB, seq=4, flags=Flag.SPINE, priority=2, slot=rig.slot(JOB, 4), lane_bits=8,
                     bitmap=0b100).pack(np.full(WORDS, 5, np.uint32))  # fmt: skip
    assert [(o.addr, o.data) for o in out] == [(ps_addr(JOB), partial)]


def test_two_levels_chained_give_the_flat_sum(path):
    """Three leaves and a spine, every packet handed on: each worker gets the sum of all seven workers once."""
    sizes = (2, 3, 2)
    spine = spine_rig(path)
    leaves = []
    for rack, size in enumerate(sizes):
        rig = Rig(pool=POOL, words=WORDS, path=path)
        rig.register(JobSpec(JOB, tuple(Endpoint("127.0.0.%d" % (rack + 2), 9000 + r) for r in range(size)), 4,
                             ps=Endpoint(*ps_addr(JOB)), uplink=Uplink(*SPINE_ADDR, rack, RACKS, spine.bases[JOB], POOL, POOL)))  # fmt: skip
        leaves.append(rig)
    rng = np.random.default_rng(0)
    values = {(rack, r): rng.integers(0, 30, WORDS).tolist() for rack, size in enumerate(sizes) for r in range(size)}
    up = []
    for (rack, r), v in values.items():
        data = Header(Kind.DATA, job=JOB, seq=9, rank=r, slot=spine.slot(JOB, 9), lane_bits=8, bitmap=1 << r).pack(np.array(v, np.uint32))
        up += [Datagram(o.data, LEAVES[rack]) for o in leaves[rack].send(Datagram(data, ("127.0.0.%d" % (rack + 2), 9000 + r)))]
    assert len(up) == RACKS
    results = spine.send(*up)
    flat = np.sum([v for v in values.values()], axis=0).tolist()
    assert {o.data for o in results} == {spine_result(spine, 9, flat)}
    down = [o for rack, leaf in enumerate(leaves) for o in leaf.send(Datagram(results[rack].data, SPINE_ADDR))]
    assert sorted(o.addr for o in down) == sorted(("127.0.0.%d" % (rack + 2), 9000 + r) for rack, r in values)
    assert all(o.payload == tuple(flat) for o in down)


@pytest.mark.parametrize("policy, spec, message", [
    ("esa", dict(slot_base=0, span=POOL), None),
    ("fcfs", dict(slot_base=3, span=POOL), None),
    ("static", dict(slot_base=4, span=4, window=4), None),
    ("static", dict(slot_base=3, span=POOL), "has not free as a partition"),
])  # fmt: skip
def test_a_leaf_gives_the_job_the_slots_its_spine_chose(path, policy, spec, message):
    core = switch_core(SwitchConfig(POOL, WORDS, policy), path)
    if message:
        with pytest.raises(ValueError, match=message):
            core.register(leaf_spec(**spec))
        return
    answer = core.register(leaf_spec(**spec))
    assert (answer["slot_base"], answer["span"]) == (spec["slot_base"], spec["span"])


def test_a_leaf_of_another_pool_size_is_refused_with_what_to_change(path):
    core = switch_core(SwitchConfig(16, WORDS), path)
    with pytest.raises(ValueError, match="same --pool"):
        core.register(leaf_spec())
