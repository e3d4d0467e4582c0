"""Test doubles of the SDE's BfRt Python client (`bfrt_grpc.client`), recording what the Tofino
controller writes, for the tests that run it without a switch."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ina.p4.build import TOFINO_WORDS_PER_PASS, Build, TofinoOutputs


def tofino_build(words: int, pool: int, folder: Path) -> Build:
    """A Tofino build's record, for a device that never reads its files."""
    outputs = TofinoOutputs(folder / "tofino.bin", folder / "context.json", folder / "bfrt.json", folder / "resources.json")
    return Build("tofino", words, pool, outputs.binary, folder / "ina_tna.p4info.txtpb", "", outputs, TOFINO_WORDS_PER_PASS)


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
        if self.name != "tf1.tm.port.cfg":
            return iter(())
        return ((SimpleNamespace(to_dict=lambda port=dict(key)["dev_port"]: tm_port_config(port)), key) for key in keys)

    def _entries(self, change, keys, datas):
        for key, data in zip(keys, datas):
            self.log.append((change, self.name, key) + (data or (None, ())))


def tm_port_config(port: int) -> dict:
    """A port's traffic-manager configuration as bf_switchd reports it (tf1.tm.port.cfg): four ports a
    port group, eight queues each."""
    return {"pg_id": port // 4, "pg_port_nr": port % 4, "port_queues_count": 8,
            "egress_qid_queues": [8 * (port % 4) + qid for qid in range(8)]}  # fmt: skip


def fake_gc(log: list) -> SimpleNamespace:
    class Tuple:
        def __init__(self, name, value=None, mask=None, int_arr_val=None, bool_arr_val=None, str_val=None):
            self.name = name
            arrays = int_arr_val if int_arr_val is not None else bool_arr_val
            self.value = next(v for v in (value, str_val, None if arrays is None else tuple(arrays)) if v is not None)
            if mask is not None:  # a ternary key field
                self.value = (self.value, mask)

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
    `$pre.mgid` write with its nodes' (port, replica id) pairs; the traffic manager's (tf1.tm.*) left out."""
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
        elif not table.startswith("tf1.tm."):
            view.append((change, table, key, action, data) if change != "delete" else (change, table, key))
    return view
