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
from ina.p4.entries import HELD, Route, ip_number, mac_number
from ina.switch.config import SwitchConfig

pytest.importorskip("p4.v1.p4runtime_pb2", reason="needs the 'p4' extra (P4Runtime protobufs)")
from ina.p4.runtime import P4RuntimeClient  # noqa: E402  (after the skip)
from ina.p4.tofino_device import MATCH_PRIORITIES  # noqa: E402

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
        match = {fields[m.field_id]: (int.from_bytes(m.ternary.value, "big"), int.from_bytes(m.ternary.mask, "big"))
                 if m.HasField("ternary") else int.from_bytes(m.exact.value, "big") for m in entry.match}  # fmt: skip
        if entry.priority:  # as BfRt takes it (ina.p4.tofino_device.MATCH_PRIORITIES)
            match["$MATCH_PRIORITY"] = MATCH_PRIORITIES - entry.priority
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


def both_switches(config: SwitchConfig, tmp_path: Path):
    """The controller on BMv2 and on Tofino, each writing through a recording client: (BMv2's, its updates,
    Tofino's, its writes)."""
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    runtime, bfrt_log = RecordingRuntime(), []
    gc = fake_gc(bfrt_log)
    bmv2 = P4Switch(config, Bmv2Device(runtime, ZeroRegisters()), SWITCH_IP, SWITCH_MAC, ROUTES, build(WORDS, POOL))
    tofino_device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port)
    tofino_device.registers = lambda name: [0] * POOL  # no slot holds a job
    tofino = P4Switch(config, tofino_device, SWITCH_IP, SWITCH_MAC, ROUTES, tofino_build(WORDS, POOL, tmp_path))
    return bmv2, runtime.log, tofino, bfrt_log


def tofino_settings(held: int) -> list[tuple]:
    """Tofino's writes after the identity: its own address (the parser's value set) and the held value (`missing`'s
    RegisterParams), which v1model reads from the identity."""
    return [("insert", "ina_own_address", (("f1", (ip_number(SWITCH_IP), 0xFFFFFFFF)),), None, ()),
            *[("modify", name, (), None, (("value", held),)) for name in ("ina_held", "ina_held_copy")]]  # fmt: skip


@needs_p4c
@pytest.mark.parametrize("policy", ["esa", "fcfs", "static"])
def test_both_targets_are_given_the_same_entries_for_every_registration_and_removal(policy, tmp_path):
    bmv2, runtime_log, tofino, bfrt_log = both_switches(SwitchConfig(pool=POOL, words=WORDS, policy=policy), tmp_path)
    first, second, third = jobs()
    for step in (lambda s: s.register(first), lambda s: s.register(second), lambda s: s.deregister(1),
                 lambda s: s.register(third), lambda s: s.deregister(2), lambda s: s.register(first)):  # fmt: skip
        assert step(bmv2) == step(tofino)
    written, tofino_written = bmv2_view(runtime_log), tofino_view(bfrt_log)
    # the identity first (the held value 0: no atp), then Tofino's own address and held value, then the same on both
    assert written[0] == tofino_written[0] and written[0][:2] == ("modify", "ina_switch")
    assert dict(written[0][4])["held_missing"] == 0 and dict(written[0][4])["priority_queues"] == 1
    assert tofino_written[1:4] == tofino_settings(0)
    assert written[1:] == tofino_written[4:]
    changes = Counter(entry[0] for entry in written)
    assert changes["delete"] > 0 and changes["insert"] > changes["delete"]
    tables = {entry[1] for entry in written}
    assert {"ina_jobs", "ina_workers", "ina_sources", "ina_victims", "ina_replicas", "ina_routes", "ina_l2", "ina_cpu_ports",
            "ina_levels", "group"} <= tables  # fmt: skip
    # each job's PS is where its FLUSHes come from (and its RESULTs would: it is no leaf)
    assert ("insert", "ina_sources", (("job", 1), ("src", ip_number("10.0.0.3")), ("src_port", 20001)), "ina_source",
            (("ps", 1), ("up", 1))) in written  # fmt: skip


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
def test_both_targets_are_given_a_racked_jobs_levels(tmp_path):
    """A leaf's rack, its spine and the route there, its spine's RESULT passed down only flagged SPINE with every
    rack's bit, a DATA flagged SPINE misleveled; its sources (the PS, the spine) and its group of the workers
    alone. A spine's DATA taken only flagged SPINE and not resent, its flag for its PARTIALs and its victims'.
    Below every job's, the switch's own: a DATA flagged SPINE is misleveled where no entry says otherwise."""
    from ina.control.jobs import Uplink
    from ina.protocol import Flag, Kind

    bmv2, runtime_log, tofino, bfrt_log = both_switches(SwitchConfig(pool=POOL, words=WORDS), tmp_path)
    workers, ps = (Endpoint("10.0.0.1", 10040), Endpoint("10.0.0.2", 10041)), Endpoint("10.0.0.3", 20004)
    leaf = JobSpec(4, workers, 2, ps=ps, uplink=Uplink("10.0.0.3", 47100, rack=1, racks=3, slot_base=2, span=POOL, pool=POOL))
    spine = JobSpec(5, (Endpoint("10.0.0.1", 47100), Endpoint("10.0.0.2", 47100)), 2, ps=ps, level="spine")
    for switch in (bmv2, tofino):
        assert switch.register(leaf)["slot_base"] == 2
        switch.register(spine)
    written = bmv2_view(runtime_log)
    assert written[1:] == tofino_view(bfrt_log)[4:]
    levels = [entry for entry in written if entry[1] in ("ina_levels", "ina_sources")]

    def level(priority: int, job: int | None, kind: int, flags: tuple[int, int] | None, bitmap: int | None, action: str, **params):
        match = {"$MATCH_PRIORITY": MATCH_PRIORITIES - priority, "kind": (kind, 0xFF)} | ({"job": (job, 0xFFFF)} if job else {})
        match |= ({"flags": flags} if flags else {}) | ({"bitmap": (bitmap, 0xFFFFFFFF)} if bitmap is not None else {})
        return ("insert", "ina_levels", tuple(sorted(match.items())), action, tuple(sorted(params.items())))

    way_up = {"rack": 1, "rack_bit": 0b010, "spine_ip": ip_number("10.0.0.3"), "spine_port": 47100, "spine_egress": 3,
              "spine_mac": mac_number("02:00:00:00:00:03")}  # fmt: skip
    spine_flag = (int(Flag.SPINE), int(Flag.SPINE))
    assert levels[0] == level(2, None, Kind.DATA, spine_flag, None, "ina_only", release=0, misleveled=1)
    assert levels[1:] == [
        ("insert", "ina_sources", (("job", 4), ("src", ip_number("10.0.0.3")), ("src_port", 20004)), "ina_source", (("ps", 1), ("up", 0))),
        ("insert", "ina_sources", (("job", 4), ("src", ip_number("10.0.0.3")), ("src_port", 47100)), "ina_source", (("ps", 0), ("up", 1))),
        level(6, 4, Kind.RESULT, spine_flag, 0b111, "ina_leaf", **way_up, descend=1, misleveled=0),
        level(5, 4, Kind.RESULT, None, None, "ina_leaf", **way_up, descend=1, misleveled=1),
        level(4, 4, Kind.DATA, spine_flag, None, "ina_leaf", **way_up, descend=0, misleveled=1),
        ("insert", "ina_levels", (("$MATCH_PRIORITY", MATCH_PRIORITIES - 3), ("job", (4, 0xFFFF))), "ina_leaf",
         tuple(sorted((way_up | {"descend": 0, "misleveled": 0}).items()))),
        ("insert", "ina_sources", (("job", 5), ("src", ip_number("10.0.0.3")), ("src_port", 20004)), "ina_source", (("ps", 1), ("up", 1))),
        level(5, 5, Kind.DATA, (int(Flag.SPINE), int(Flag.SPINE | Flag.RESEND)), None, "ina_spine", release=0, misleveled=0),
        level(4, 5, Kind.DATA, None, None, "ina_spine", release=0, misleveled=1),
        ("insert", "ina_levels", (("$MATCH_PRIORITY", MATCH_PRIORITIES - 3), ("job", (5, 0xFFFF))), "ina_spine",
         (("misleveled", 0), ("release", 0))),
    ]  # fmt: skip
    victims = {entry[2]: dict(entry[4])["flags"] for entry in written if entry[1] == "ina_victims"}
    assert victims == {(("job", 4),): 0, (("job", 5),): int(Flag.SPINE)}  # a claim evicting the spine's partial flags it
    groups = [entry for entry in written if entry[1] == "group"]
    assert [len(group[3]) for group in groups[1:]] == [2, 3]  # the leaf's workers; the spine's leaves and its PS
    for switch in (bmv2, tofino):
        switch.deregister(4)
    assert [entry for entry in bmv2_view(runtime_log) if entry[0] == "delete" and entry[1] in ("ina_levels", "ina_sources")] == \
        [("delete", "ina_sources", entry[2]) for entry in levels[1:3]] + [("delete", "ina_levels", entry[2]) for entry in levels[3:7]]  # fmt: skip
    assert bmv2_view(runtime_log)[1:] == tofino_view(bfrt_log)[4:]


@needs_p4c
def test_both_targets_are_given_atps_hold_and_its_queues(tmp_path):
    """The identity says whether the switch holds completed chunks (atp) and whether its queues go by priority,
    apart, and Tofino's `missing` registers are given the held value; under atp a job's group has its workers
    alone (the PS gets its RESULT flagged HOLD, unicast) and 2..31 of them, and a RESULT from its PS is its
    return, passed on only flagged HOLD with every worker's bit (below it, anyone's RESULT is a return, which
    Admission then finds unregistered)."""
    from ina.protocol import Flag, Kind

    config = SwitchConfig(pool=POOL, words=WORDS, policy="atp", queues="fifo")
    bmv2, runtime_log, tofino, bfrt_log = both_switches(config, tmp_path)
    assert dict(runtime_log[0][4]) | {"ip": 0, "mac": 0} == {"ip": 0, "mac": 0, "esa": 0, "held_missing": HELD, "priority_queues": 0}
    assert tofino_view(bfrt_log)[1:4] == tofino_settings(HELD)
    first, _, one = jobs()
    many = JobSpec(4, tuple(Endpoint("10.0.0.1", 10000 + r) for r in range(32)), 2, ps=Endpoint("10.0.0.3", 20004))
    for switch in (bmv2, tofino):
        switch.register(first)
        for spec, workers in ((one, 1), (many, 32)):
            with pytest.raises(ValueError, match=rf"job {spec.job}: under atp the \w+ program takes jobs of 2..31 workers .*got {workers}"):
                switch.register(spec)
        assert [job["job"] for job in switch.jobs()] == [1]
    written = bmv2_view(runtime_log)
    assert written[1:] == tofino_view(bfrt_log)[4:]
    assert [len(entry[3]) for entry in written if entry[1] == "group"][1:] == [2]  # the workers, no PS
    result = ("kind", (int(Kind.RESULT), 0xFF))
    assert [entry[2:] for entry in written if entry[1] == "ina_levels"] == [
        ((("$MATCH_PRIORITY", MATCH_PRIORITIES - 2), ("flags", (int(Flag.SPINE), int(Flag.SPINE))), ("kind", (int(Kind.DATA), 0xFF))),
         "ina_only", (("misleveled", 1), ("release", 0))),
        ((("$MATCH_PRIORITY", MATCH_PRIORITIES - 1), result), "ina_only", (("misleveled", 0), ("release", 1))),
        ((("$MATCH_PRIORITY", MATCH_PRIORITIES - 4), ("bitmap", (0b11, 0xFFFFFFFF)), ("flags", (int(Flag.HOLD), int(Flag.HOLD))),
          ("job", (1, 0xFFFF)), result), "ina_only", (("misleveled", 0), ("release", 1))),
        ((("$MATCH_PRIORITY", MATCH_PRIORITIES - 3), ("job", (1, 0xFFFF)), result), "ina_only", (("misleveled", 1), ("release", 1))),
    ]  # fmt: skip


def test_a_full_level_table_refuses_a_racked_job_with_what_to_change(tmp_path):
    """The level table holds LEVEL_ENTRIES entries: a registration that would overflow it is refused, naming
    what each kind of job takes, and nothing of it is written."""
    from ina.control.jobs import Uplink
    from ina.p4 import entries
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    bfrt_log: list = []
    gc = fake_gc(bfrt_log)
    tofino_device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port)
    tofino_device.registers = lambda name: [0] * 4096
    switch = P4Switch(SwitchConfig(pool=4096, words=WORDS), tofino_device, SWITCH_IP, SWITCH_MAC, ROUTES, tofino_build(WORDS, 4096, tmp_path))
    workers, ps = (Endpoint("10.0.0.1", 10040), Endpoint("10.0.0.2", 10041)), Endpoint("10.0.0.3", 20004)
    fits = (entries.LEVEL_ENTRIES - 1) // 4  # the switch's own entry, then four a leaf
    for job in range(1, fits + 2):
        spec = JobSpec(job, workers, 2, ps=ps, uplink=Uplink("10.0.0.3", 47100, rack=0, racks=2, slot_base=0, span=2, pool=4096))
        if job <= fits:
            switch.register(spec)
            continue
        written = len(bfrt_log)
        with pytest.raises(ValueError, match=rf"job {job}: the switch's level table is full \({4 * fits + 1} of its 1024 entries used.*"
                                             r"deregister a racked job"):  # fmt: skip
            switch.register(spec)
        assert len(bfrt_log) == written and len(switch.jobs()) == fits
