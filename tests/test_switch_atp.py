"""ATP's deallocation (docs/protocol.md, section 5, policy `atp`): a completed slot stays held until the PS
returns its RESULT, which frees it and goes on to the workers. Exact bytes, registers and counters, on
both cores; and the PS's half, returning what the switch flagged HOLD."""

import numpy as np
import pytest
from switch_support import Rig, job_spec, path, ps_addr, worker_addr  # noqa: F401 (path: the fixture running each test on both cores)

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind
from ina.ps.native import ps_core


def held(data: bytes) -> bytes:
    """`data` (a RESULT) with its HOLD flag set."""
    return data[:3] + bytes([data[3] | Flag.HOLD]) + data[4:]


def counts(rig: Rig, *names: str) -> dict[str, int]:
    c = rig.core.counters()
    return {n: c[n] for n in names}


@pytest.fixture
def rig(path):
    r = Rig(pool=1, words=4, policy="atp", path=path)
    r.register(job_spec(1, workers=2, window=1))
    r.register(job_spec(2, workers=2, window=1))
    return r


def test_a_completed_chunk_goes_to_the_ps_alone_flagged_hold_and_keeps_its_slot(rig):
    rig.send(rig.data(1, 0, 3, [1, 2, 3, 4]))
    out = rig.send(rig.data(1, 1, 3, [10, 20, 30, 40]))
    result = rig.result(1, 3, [11, 22, 33, 44])
    assert [(o.addr, o.data) for o in out] == [(ps_addr(1), held(result))]
    assert rig.slot_state(1, 3)["key"] == {"job": 1, "seq": 3, "max": False} and rig.slot_state(1, 3)["bitmap"] == 0b11
    other = rig.data(2, 0, 7)
    assert [(o.addr, o.data) for o in rig.send(other)] == [(ps_addr(2), other.data)]  # the held slot is taken
    assert counts(rig, "completed", "collision") == {"completed": 1, "collision": 1}


def test_the_ps_returning_the_result_frees_the_slot_and_sends_it_to_every_worker(rig):
    rig.send(rig.data(1, 0, 3, [1, 2, 3, 4]), rig.data(1, 1, 3, [10, 20, 30, 40]))
    result = rig.result(1, 3, [11, 22, 33, 44])
    out = rig.send(Datagram(held(result), ps_addr(1)))
    assert [(o.addr, o.data) for o in out] == [(worker_addr(1, 0), result), (worker_addr(1, 1), result)]
    assert rig.slot_state(1, 3)["key"] is None
    assert counts(rig, "releases", "release_hits") == {"releases": 1, "release_hits": 1}
    again = rig.send(Datagram(held(result), ps_addr(1)))  # a duplicate return: to the workers, nothing freed twice
    assert [o.data for o in again] == [result, result]
    assert counts(rig, "releases", "release_hits") == {"releases": 2, "release_hits": 1}
    rig.send(rig.data(2, 0, 7, [5, 5, 5, 5]))
    assert rig.slot_state(2, 7)["key"] == {"job": 2, "seq": 7, "max": False}


def test_a_return_frees_only_the_chunk_it_names(rig):
    rig.send(rig.data(1, 0, 3))  # a partial, not a held result
    out = rig.send(Datagram(held(rig.result(1, 3, [3, 3, 3, 3])), ps_addr(1)))
    assert len(out) == 2 and rig.slot_state(1, 3)["bitmap"] == 0b01
    assert counts(rig, "releases", "release_hits") == {"releases": 1, "release_hits": 0}


def test_a_return_from_elsewhere_unflagged_or_partial_is_dropped(rig):
    rig.send(rig.data(1, 0, 3, [1, 2, 3, 4]), rig.data(1, 1, 3, [10, 20, 30, 40]))
    result = rig.result(1, 3, [11, 22, 33, 44])
    partial = Header(Kind.RESULT, job=1, seq=3, slot=rig.slot(1, 3), lane_bits=8, bitmap=0b01).pack(np.array([11, 22, 33, 44], np.uint32))
    assert rig.send(Datagram(held(result), worker_addr(1, 0))) == []
    assert rig.send(Datagram(result, ps_addr(1)), Datagram(held(partial), ps_addr(1))) == []
    assert counts(rig, "unregistered", "bad_format", "releases") == {"unregistered": 1, "bad_format": 2, "releases": 0}
    assert rig.slot_state(1, 3)["bitmap"] == 0b11


def test_a_held_result_left_unreturned_is_swept(rig):
    rig.send(rig.data(1, 0, 3, [1, 2, 3, 4]), rig.data(1, 1, 3, [10, 20, 30, 40]), now=1.0)
    swept = rig.tick(2.5)
    assert [(o.addr, o.data) for o in swept] == [(ps_addr(1), rig.partial(1, 3, 0b11, [11, 22, 33, 44]))]
    assert rig.slot_state(1, 3)["key"] is None


@pytest.mark.parametrize("policy", ["esa", "fcfs", "static"])
def test_only_atp_takes_a_result(path, policy):
    rig = Rig(pool=2, words=4, policy=policy, path=path)
    rig.register(job_spec(1, workers=2, window=1))
    assert rig.send(Datagram(held(rig.result(1, 0, [1, 1, 1, 1])), ps_addr(1))) == []
    assert counts(rig, "unexpected", "releases") == {"unexpected": 1, "releases": 0}


@pytest.mark.parametrize("ps_path", ["python", "native"])
def test_the_ps_returns_a_held_result_to_the_switch_and_keeps_it(ps_path):
    switch = ("127.0.0.1", 47100)
    ps = ps_core(4, ps_path)
    spec = JobSpec(job=1, workers=(Endpoint("127.0.0.1", 21000), Endpoint("127.0.0.1", 21001)), window=1, lane_bits=8,
                   ps=Endpoint("127.0.0.1", 20001), switch=Endpoint(*switch))  # fmt: skip
    ps.register(spec)
    result = Header(Kind.RESULT, job=1, seq=0, lane_bits=8, bitmap=0b11).pack(np.full(4, 4, np.uint32))
    for _ in range(2):  # stored once; returned each time, since the switch may hold the slot still
        out = ps.receive([Datagram(held(result), switch)], 0.0)
        assert [(d.addr, d.data) for d in out] == [(switch, held(result))]
    assert {k: ps.counters()[k] for k in ("results_returned", "result_copies", "duplicate")} == \
        {"results_returned": 2, "result_copies": 1, "duplicate": 1}
    plain = Header(Kind.RESULT, job=1, seq=1, lane_bits=8, bitmap=0b11).pack(np.full(4, 4, np.uint32))
    assert ps.receive([Datagram(plain, switch)], 0.0) == []  # a copy under the other policies: kept, not returned
