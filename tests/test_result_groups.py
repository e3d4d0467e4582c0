"""RESULT groups (docs/protocol.md, section 7): one RESULT datagram per chunk from the PS and the switch,
every worker receives it, sums exact, unicast when a worker cannot join, loss recovered exactly."""

from __future__ import annotations

import socket
from dataclasses import replace

import numpy as np
import pytest
import torch
from ps_support import PS_PATHS
from switch_support import Rig, job_spec, path, ps_addr  # noqa: F401 (path: each switch test on both cores)

from ina.control import Endpoint, JobSpec
from ina.launch import LocalAggregators, run_workers
from ina.net.multicast import heard_probes, job_group, join, send_probe
from ina.net.node import Datagram
from ina.ps.native import ps_core
from ina.protocol import Flag, Header, Kind, parse

GROUP = job_group(7, 47999)
WORKERS = tuple(("10.0.0.1", 5000 + r) for r in range(4))


def _ps_job(group: tuple[str, int] | None) -> JobSpec:
    return JobSpec(job=7, workers=tuple(Endpoint(*w) for w in WORKERS), window=4, lane_bits=8,
                   group=None if group is None else Endpoint(*group))  # fmt: skip


def _data(rank: int, seq: int, resend: bool = False) -> Datagram:
    header = Header(Kind.DATA, 7, seq, Flag.RESEND if resend else Flag.NONE, rank=rank, slot=0, lane_bits=8, bitmap=1 << rank)
    return Datagram(header.pack(np.full(4, rank + 1, dtype=np.uint32)), WORKERS[rank])


@pytest.mark.parametrize("ps_path", PS_PATHS)
def test_the_ps_sends_one_result_per_chunk_to_the_group(ps_path: str) -> None:
    ps = ps_core(4, ps_path)
    ps.register(_ps_job(GROUP))
    out = ps.receive([_data(rank, 0) for rank in range(4)], 0.0)
    assert [d.addr for d in out] == [GROUP]
    header, payload = parse(out[0].data, 4)
    assert header.kind == Kind.RESULT and list(payload) == [10] * 4
    assert ps.counters()["tx"] == 1


@pytest.mark.parametrize("ps_path", PS_PATHS)
def test_the_ps_without_a_group_sends_each_worker_its_copy(ps_path: str) -> None:
    ps = ps_core(4, ps_path)
    ps.register(_ps_job(None))
    assert sorted(d.addr for d in ps.receive([_data(rank, 0) for rank in range(4)], 0.0)) == sorted(WORKERS)


@pytest.mark.parametrize("ps_path", PS_PATHS)
def test_a_lost_group_result_is_replayed_to_the_resending_worker_alone(ps_path: str) -> None:
    ps = ps_core(4, ps_path)
    ps.register(_ps_job(GROUP))
    lost = ps.receive([_data(rank, 0) for rank in range(4)], 0.0)  # the group's copy never arrives
    replay = ps.receive([_data(2, 0, resend=True)], 0.1)
    assert [d.addr for d in replay] == [WORKERS[2]] and replay[0].data == lost[0].data


def test_the_switch_sends_one_result_to_the_group_and_its_copy_to_the_ps(path: str) -> None:  # noqa: F811
    rig = Rig(path=path)
    spec = replace(job_spec(3, 4, 4), group=Endpoint(*GROUP))
    rig.register(spec)
    out = rig.send(*(rig.data(3, rank, 0) for rank in range(4)))
    assert [(o.addr, o.header.kind) for o in out] == [(GROUP, Kind.RESULT), (ps_addr(3), Kind.RESULT)]
    assert list(out[0].payload) == [10] * 4 and out[0].data == out[1].data


def test_a_group_must_be_multicast() -> None:
    with pytest.raises(ValueError, match="multicast"):
        replace(_ps_job(None), group=Endpoint("10.0.0.9", 47999))


def test_the_probe_reaches_every_member_on_loopback() -> None:
    members = [join(GROUP, "127.0.0.1") for _ in range(3)]
    assert all(members), "loopback multicast should join here"
    try:
        assert send_probe("127.0.0.1", GROUP, 42) == 3
        assert all(heard_probes(m, {42, 43}, wait=0.2) == {42} for m in members)
    finally:
        for m in members:
            m.close()


# --- through the transports, 4 worker processes -----------------------------------------

_dropped: list[socket.socket] = []


def _leave_after_probe(group: tuple[str, int], interface: str) -> socket.socket | None:
    """Join as usual, so the probe passes; the test leaves the group later (every group RESULT lost)."""
    member = join(group, interface)
    _dropped.append(member)
    return member


def _reduce(rank: int, workers: int, name: str, options: dict, cannot_join: int, drop_group: int, min_rto: float) -> tuple[list[int], int]:
    import torch.distributed as dist

    import ina.transport.groups as groups
    from ina.compression import THCCodec, THCConfig
    from ina.transport import create_transport

    if rank == cannot_join:
        groups.join = lambda group, interface: None  # this worker cannot join: the job must fall back to unicast
    if rank == drop_group:
        groups.join = _leave_after_probe
    codec = THCCodec(THCConfig(bits=4, granularity=30))
    transport = create_transport(name, dist.group.WORLD, min_rto=min_rto, **options)
    transport.attach(codec, dist.group.WORLD)
    for member in _dropped:
        membership = socket.inet_aton(member.getsockname()[0]) + socket.inet_aton("127.0.0.1")
        member.setsockopt(socket.IPPROTO_IP, socket.IP_DROP_MEMBERSHIP, membership)
    sums = []
    for step in range(3):
        indices = torch.randint(0, 16, (1 << 15,), dtype=torch.uint8, generator=torch.Generator().manual_seed(10 * step + rank))
        encoded = codec.table_values(indices) if transport.takes_values else indices
        sums.append(int(transport.table_sum(encoded, codec, workers, bucket=0).wait().to(torch.int64).sum()))
    resent = transport.counters.get("resent", 0)
    dist.barrier()
    transport.close()
    return sums, resent


def _expected(workers: int) -> list[int]:
    from ina.compression import THCCodec, THCConfig

    codec = THCCodec(THCConfig(bits=4, granularity=30))
    return [sum(int(codec.table_values(torch.randint(0, 16, (1 << 15,), dtype=torch.uint8,
                                                     generator=torch.Generator().manual_seed(10 * step + rank))).to(torch.int64).sum())
                for rank in range(workers)) for step in range(3)]  # fmt: skip


@pytest.mark.parametrize("name", ["ps", "switch"])
@pytest.mark.parametrize(("cannot_join", "drop_group"), [(-1, -1), (2, -1), (-1, 1)], ids=["group", "unicast-fallback", "group-lost"])
def test_transports_sum_exactly_with_one_send_per_chunk(name: str, cannot_join: int, drop_group: int) -> None:
    # where nothing is lost, a resend timeout no loaded machine reaches, so that every send is counted once;
    # where a worker hears no RESULT, a short one, so that it resends soon
    min_rto = 0.005 if drop_group >= 0 else 0.5
    with LocalAggregators(words=64, pool=256) as local:
        reports = run_workers(_reduce, 4, name, local.options(name), cannot_join, drop_group, min_rto)
        ps, switch = local.ps.counters(), local.switch.counters()
        registered = local.ps.jobs()
    assert all(sums == _expected(4) for sums, _ in reports)
    grouped = cannot_join < 0
    sender = switch if name == "switch" else ps
    sent = sender["tx_packets" if name == "switch" else "tx"]
    completed = sender["completed"]
    if name == "switch":
        sent -= completed  # the PS's copy of each RESULT, unicast
    if drop_group < 0:
        assert sent == completed * (1 if grouped else 4)
        assert all(resent == 0 for _, resent in reports)
    else:  # rank 1 heard none of the group's RESULTs: it resent, and the PS answered it from its ring
        assert reports[drop_group][1] > 0 and ps["results_replayed"] > 0
    assert not registered  # every job deregistered
