"""One job-to-entries translation for every P4 target: what the controller gives BMv2 (P4Runtime
updates) and Tofino (BfRt writes), decoded back from each device's own wire form, is the same
through registrations and removals under every policy."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from bfrt_fakes import fake_gc, tofino_build, tofino_view

from ina.control import Endpoint, JobSpec
from ina.p4 import toolchain
from ina.p4.entries import Route
from ina.switch.config import SwitchConfig

pytest.importorskip("p4.v1.p4runtime_pb2", reason="needs the 'p4' extra (P4Runtime protobufs)")
from ina.p4.runtime import P4RuntimeClient  # noqa: E402  (after the skip)

needs_p4c = pytest.mark.skipif(toolchain.missing("p4c") is not None, reason=toolchain.missing("p4c") or "")

POOL, WORDS = 8, 4
SWITCH_IP, SWITCH_MAC = "10.0.0.254", "02:00:00:00:00:fe"
ROUTES = [Route("10.0.0.1", "02:00:00:00:00:01", 1), Route("10.0.0.2", "02:00:00:00:00:02", 2), Route("10.0.0.3", "02:00:00:00:00:03", 3)]


# -- BMv2: a P4Runtime client that records its updates, decoded through the P4Info --------------------


class RecordingRuntime:
    def __init__(self) -> None:
        self.log: list[tuple] = []

    def set_pipeline(self, p4info: Path, pipeline: Path):
        from ina.p4.runtime import P4Info

        self.info = P4Info.load(p4info)
        return self.info

    def write(self, *updates) -> None:
        self.log += [self._decode(update) for update in updates]

    def _decode(self, update) -> tuple:
        from ina.p4.runtime import DELETE, INSERT, MODIFY

        change = {INSERT: "insert", MODIFY: "modify", DELETE: "delete"}[update.type]
        entity = update.entity
        if entity.HasField("packet_replication_engine_entry"):
            group = entity.packet_replication_engine_entry.multicast_group_entry
            return change, "group", group.multicast_group_id, tuple((r.egress_port, r.instance) for r in group.replicas)
        entry = entity.table_entry
        table = next(t for t in self.info.tables.values() if t.preamble.id == entry.table_id)
        fields = {f.id: f.name for f in table.match_fields}
        action = next(a for a in self.info.actions.values() if a.preamble.id == entry.action.action.action_id)
        params = {p.id: p.name for p in action.params}
        match = {fields[m.field_id]: int.from_bytes(m.exact.value, "big") for m in entry.match}
        values = {params[p.param_id]: int.from_bytes(p.value, "big") for p in entry.action.action.params}
        return change, table.preamble.name, tuple(sorted(match.items())), action.preamble.name, tuple(sorted(values.items()))

    table_update = staticmethod(P4RuntimeClient.table_update)
    group_update = staticmethod(P4RuntimeClient.group_update)

    def close(self) -> None:
        pass


class ZeroRegisters:
    """BMv2's Thrift API with every register at 0 (no slot holds a job)."""

    def set_queue_depths(self, packets: int) -> None:
        pass

    def registers(self, name: str) -> list[int]:
        return [0] * POOL

    def close(self) -> None:
        pass


def bmv2_view(log: list[tuple]) -> list[tuple]:
    """Deletions without their data, as BfRt takes them."""
    return [entry[:3] if entry[0] == "delete" and entry[1] != "group" else
            (entry[0], "group", entry[2], None) if entry[0] == "delete" else entry for entry in log]  # fmt: skip


def jobs() -> list[JobSpec]:
    def spec(job: int, hosts: list[str], window: int, priority_cap: int = 255) -> JobSpec:
        return JobSpec(job, tuple(Endpoint(h, 10000 + job * 10 + r) for r, h in enumerate(hosts)), window,
                       priority_cap=priority_cap, ps=Endpoint("10.0.0.3", 20000 + job))  # fmt: skip

    return [spec(1, ["10.0.0.1", "10.0.0.2"], 2, 9), spec(2, ["10.0.0.1", "10.0.0.1", "10.0.0.2"], 3), spec(3, ["10.0.0.2"], 2)]


@needs_p4c
@pytest.mark.parametrize("policy", ["esa", "fcfs", "static"])
def test_both_targets_are_given_the_same_entries_for_every_registration_and_removal(policy, tmp_path):
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    config = SwitchConfig(pool=POOL, words=WORDS, policy=policy)
    runtime, bfrt_log = RecordingRuntime(), []
    gc = fake_gc(bfrt_log)
    bmv2 = P4Switch(config, Bmv2Device(runtime, ZeroRegisters()), SWITCH_IP, SWITCH_MAC, ROUTES, build(WORDS, POOL))
    tofino_device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port)
    tofino_device.registers = lambda name: [0] * POOL  # no slot holds a job
    tofino = P4Switch(config, tofino_device, SWITCH_IP, SWITCH_MAC, ROUTES, tofino_build(WORDS, POOL, tmp_path))

    first, second, third = jobs()
    for step in (lambda s: s.register(first), lambda s: s.register(second), lambda s: s.deregister(1),
                 lambda s: s.register(third), lambda s: s.deregister(2), lambda s: s.register(first)):  # fmt: skip
        assert step(bmv2) == step(tofino)
    written, tofino_written = bmv2_view(runtime.log), tofino_view(bfrt_log)
    assert written[1:] == tofino_written[1:]
    # the identity first, with the queues on both; BMv2's also says whether it holds results (atp)
    (change, table, match, action, params), tofino_identity = written[0], tofino_written[0]
    assert (change, table) == ("modify", "ina_switch")
    assert (change, table, match, action, tuple(p for p in params if p[0] != "hold")) == tofino_identity
    assert dict(params)["hold"] == 0 and dict(params)["priority_queues"] == 1
    changes = Counter(entry[0] for entry in written)
    assert changes["delete"] > 0 and changes["insert"] > changes["delete"]
    tables = {entry[1] for entry in written}
    assert {"ina_jobs", "ina_workers", "ina_victims", "ina_replicas", "ina_routes", "ina_l2", "ina_cpu_ports", "group"} <= tables


def test_without_result_copies_a_jobs_result_group_holds_its_workers_alone():
    from ina.p4 import entries
    from ina.switch.state import Jobs

    entry = Jobs(POOL).add(jobs()[0])
    routes = {route.ip: route for route in ROUTES}
    _, copied = entries.job(entry, POOL, 5, routes)
    _, alone = entries.job(entry, POOL, 5, routes, copies=False)
    workers = len(entry.spec.workers)
    assert copied.replicas[:workers] == alone.replicas and len(alone.replicas) == workers
    assert copied.replicas[workers] == (3, workers)  # the PS's port (10.0.0.3), replica n


@needs_p4c
def test_bmv2_is_given_a_racked_jobs_level_and_tofino_refuses_it(tmp_path):
    """A leaf's rack and spine, and its group of the workers alone (it passes the spine's RESULT down); a spine's
    flag for its PARTIALs, its victims' too (p4src/racks.p4). The TNA program serves no racked role."""
    from ina.control.jobs import Uplink
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.entries import ip_number
    from ina.p4.tofino_device import TofinoDevice

    config = SwitchConfig(pool=POOL, words=WORDS)
    runtime = RecordingRuntime()
    bmv2 = P4Switch(config, Bmv2Device(runtime, ZeroRegisters()), SWITCH_IP, SWITCH_MAC, ROUTES, build(WORDS, POOL))
    workers, ps = (Endpoint("10.0.0.1", 10040), Endpoint("10.0.0.2", 10041)), Endpoint("10.0.0.3", 20004)
    leaf = JobSpec(4, workers, 2, ps=ps, uplink=Uplink("10.0.0.3", 47100, rack=1, racks=3, slot_base=2, span=POOL, pool=POOL))
    spine = JobSpec(5, (Endpoint("10.0.0.1", 47100), Endpoint("10.0.0.2", 47100)), 2, ps=ps, level="spine")
    assert bmv2.register(leaf)["slot_base"] == 2
    bmv2.register(spine)
    levels = [entry for entry in runtime.log if entry[1] in ("ina_levels", "ina_victim_levels")]
    assert levels == [
        ("insert", "ina_levels", (("job", 4),), "ina_leaf", (("rack", 1), ("racks_full", 0b111), ("spine_ip", ip_number("10.0.0.3")), ("spine_port", 47100))),
        ("insert", "ina_levels", (("job", 5),), "ina_spine", ()),
        ("insert", "ina_victim_levels", (("job", 5),), "ina_victim_spine", ()),
    ]  # fmt: skip
    groups = [entry for entry in runtime.log if entry[1] == "group"]
    assert [len(group[3]) for group in groups[1:]] == [2, 3]  # the leaf's workers; the spine's leaves and its PS
    bmv2.deregister(4)
    assert ("delete", "ina_levels", (("job", 4),), "ina_leaf", (("rack", 1), ("racks_full", 0b111), ("spine_ip", ip_number("10.0.0.3")),
                                                                 ("spine_port", 47100))) in runtime.log  # fmt: skip

    gc = fake_gc([])
    tofino_device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port)
    tofino = P4Switch(config, tofino_device, SWITCH_IP, SWITCH_MAC, ROUTES, tofino_build(WORDS, POOL, tmp_path))
    for spec in (leaf, spine):
        with pytest.raises(ValueError, match=r"the tofino program serves a job as its only switch.*docs/p4.md, \"Racks\""):
            tofino.register(spec)
    assert tofino.jobs() == []


@needs_p4c
def test_bmv2_is_given_atps_hold_and_its_queues_and_tofino_refuses_atp():
    """BMv2's identity says whether it holds completed chunks (atp) and whether its queues go by priority, apart;
    under atp a job's group has its workers alone (the PS gets its RESULT flagged HOLD, unicast) and 2..31 of them."""
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    runtime = RecordingRuntime()
    bmv2 = P4Switch(SwitchConfig(pool=POOL, words=WORDS, policy="atp", queues="fifo"), Bmv2Device(runtime, ZeroRegisters()),
                    SWITCH_IP, SWITCH_MAC, ROUTES, build(WORDS, POOL))  # fmt: skip
    assert dict(runtime.log[0][4]) | {"ip": 0, "mac": 0} == {"ip": 0, "mac": 0, "esa": 0, "hold": 1, "priority_queues": 0}
    first, _, one = jobs()
    bmv2.register(first)
    assert [len(entry[3]) for entry in runtime.log if entry[1] == "group"][1:] == [2]  # the workers, no PS
    many = JobSpec(4, tuple(Endpoint("10.0.0.1", 10000 + r) for r in range(32)), 2, ps=Endpoint("10.0.0.3", 20004))
    for spec, workers in ((one, 1), (many, 32)):
        with pytest.raises(ValueError, match=rf"job {spec.job}: under atp the bmv2 program takes jobs of 2..31 workers .*got {workers}"):
            bmv2.register(spec)
    assert [job["job"] for job in bmv2.jobs()] == [1]

    gc = fake_gc([])
    with pytest.raises(ValueError, match=r"--policy atp: the tofino program implements esa, fcfs and static.*docs/p4.md, \"atp\""):
        P4Switch(SwitchConfig(pool=POOL, words=WORDS, policy="atp"), TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port),
                 SWITCH_IP, SWITCH_MAC, ROUTES)  # fmt: skip
