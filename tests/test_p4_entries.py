"""One job-to-entries translation for every P4 target: what the controller gives BMv2 (P4Runtime
updates) and Tofino (BfRt writes), decoded back from each device's own wire form, is the same
through registrations and removals under every policy."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from ina.control import Endpoint, JobSpec
from ina.p4 import toolchain
from ina.p4.build import Build, TofinoOutputs
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


# -- Tofino: the SDE's bfrt_grpc.client, recording what it is asked to write ------------------------


class FakeTable:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def make_key(self, fields):
        return tuple(sorted((f.name, f.value) for f in fields))

    def make_data(self, fields, action=None):
        return action, tuple(sorted((f.name, f.value) for f in fields))

    def entry_add(self, target, keys, datas):
        self._entries("insert", keys, datas)

    def entry_mod(self, target, keys, datas):
        self._entries("modify", keys, datas)

    def entry_del(self, target, keys):
        self._entries("delete", keys, [None] * len(keys))

    def default_entry_set(self, target, data):
        self.log.append(("modify", self.name, (), data[0], data[1]))

    def entry_get(self, target, keys, flags):
        return iter(())

    def _entries(self, change, keys, datas):
        for key, data in zip(keys, datas):
            self.log.append((change, self.name, key) + (data or (None, ())))


def fake_gc(log: list) -> SimpleNamespace:
    class Tuple:
        def __init__(self, name, value=None, int_arr_val=None, bool_arr_val=None):
            self.name = name
            self.value = value if value is not None else tuple(int_arr_val if int_arr_val is not None else bool_arr_val)

    tables: dict[str, FakeTable] = {}
    info = SimpleNamespace(table_get=lambda name: tables.setdefault(name, FakeTable(name, log)))
    client = SimpleNamespace(send_set_forwarding_pipeline_config_request=lambda *args: True,
                             bind_pipeline_config=lambda name: None, bfrt_info_get=lambda name: info,
                             tear_down_stream=lambda: None)  # fmt: skip
    request = SimpleNamespace(VERIFY_AND_WARM_INIT_BEGIN_AND_END=0)
    return SimpleNamespace(KeyTuple=Tuple, DataTuple=Tuple, Target=lambda **kw: kw, client=client,
                           ProfileInfo=lambda *args: args, ForwardingConfig=lambda *args: args,
                           bfruntime_pb2=SimpleNamespace(SetForwardingPipelineConfigRequest=request))  # fmt: skip


def tofino_view(log: list) -> list[tuple]:
    """The BfRt writes in the P4Runtime decoding's form: table entries as they are, each group as the
    `$pre.mgid` write with its nodes' (port, replica id) pairs."""
    nodes: dict[int, tuple[int, int]] = {}
    view = []
    for change, table, key, action, data in log:
        if table == "$pre.node":
            fields = dict(data)
            if change != "delete":
                nodes[dict(key)["$MULTICAST_NODE_ID"]] = (fields["$DEV_PORT"][0], fields["$MULTICAST_RID"])
        elif table == "$pre.mgid":
            group = dict(key)["$MGID"]
            ids = dict(data).get("$MULTICAST_NODE_ID", ())
            replicas = tuple(nodes[node] for node in ids) if change != "delete" else None
            view.append((change, "group", group, replicas))
        else:
            view.append((change, table, key, action, data) if change != "delete" else (change, table, key))
    return view


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
@pytest.mark.parametrize("policy", ["esa", "atp", "static"])
def test_both_targets_are_given_the_same_entries_for_every_registration_and_removal(policy, tmp_path):
    from ina.p4.bmv2_device import Bmv2Device
    from ina.p4.build import build
    from ina.p4.controller import P4Switch
    from ina.p4.tofino_device import TofinoDevice

    config = SwitchConfig(pool=POOL, words=WORDS, policy=policy)
    runtime, bfrt_log = RecordingRuntime(), []
    gc = fake_gc(bfrt_log)
    tofino_build = Build("tofino", WORDS, POOL, tmp_path / "tofino.bin", tmp_path / "p4info", "",
                         TofinoOutputs(tmp_path / "tofino.bin", tmp_path / "context.json", tmp_path / "bfrt.json", tmp_path / "r.json"))  # fmt: skip
    bmv2 = P4Switch(config, Bmv2Device(runtime, ZeroRegisters()), SWITCH_IP, SWITCH_MAC, ROUTES, build(WORDS, POOL))
    tofino_device = TofinoDevice(gc.client, gc, "cpu0", cpu_port=Bmv2Device.cpu_port)
    tofino_device.registers = lambda name: [0] * POOL  # no slot holds a job
    tofino = P4Switch(config, tofino_device, SWITCH_IP, SWITCH_MAC, ROUTES, tofino_build)

    first, second, third = jobs()
    for step in (lambda s: s.register(first), lambda s: s.register(second), lambda s: s.deregister(1),
                 lambda s: s.register(third), lambda s: s.deregister(2), lambda s: s.register(first)):  # fmt: skip
        assert step(bmv2) == step(tofino)
    written = bmv2_view(runtime.log)
    assert written == tofino_view(bfrt_log)
    assert written[0][:2] == ("modify", "ina_switch")
    changes = Counter(entry[0] for entry in written)
    assert changes["delete"] > 0 and changes["insert"] > changes["delete"]
    tables = {entry[1] for entry in written}
    assert {"ina_jobs", "ina_workers", "ina_victims", "ina_replicas", "ina_routes", "ina_l2", "ina_cpu_ports", "group"} <= tables
