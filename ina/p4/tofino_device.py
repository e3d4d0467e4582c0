"""Tofino as a `Device`, over BfRt gRPC: the control interface that the open-source SDE's
`bf_switchd` (p4lang/open-p4studio) always serves (docs/p4.md, "Tofino control plane").

Why BfRt and not P4Runtime: bf_switchd serves P4Runtime only when the SDE is built with P4RT, which
no stock profile turns on, while BfRt comes with every build and reaches everything the controller
needs, registers included. BfRt has no packet-out (its client's `get_packet_in` says "Not supported"),
so the idle sweep's SWEEP frames enter at the switch's CPU Ethernet port instead: the Linux interface
that bf_kpkt (hardware) or the model's veth (tofino-model) gives the switch's host.

The Python client, `bfrt_grpc.client`, comes with the SDE installation, not with pip: ina finds it
under `$SDE_INSTALL` (`bfrt_client()`), as the SDE's own test scripts do.
"""

from __future__ import annotations

import glob
import importlib
import os
import socket
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Iterable, Sequence

from ina.p4.build import Build
from ina.p4.device import DELETE, INSERT, MODIFY, REGISTERS
from ina.p4.entries import Group, TableEntry, Ternary
from ina.protocol.constants import EGRESS_QUEUES

PROGRAM = "ina_tna"
"""The P4 program's name on the device (p4src/ina_tna.p4)."""
DEFAULT_BFRT = "127.0.0.1:50052"
"""Where bf_switchd serves BfRt gRPC by default."""
PIPE_SHIFT = 7
"""A Tofino 1 device port's pipe is its number >> 7 (128 ports a pipe)."""
NODES_PER_GROUP = 1024
"""Multicast node ids: the k-th replica of group g is node g * 1024 + k (a job's 33 at most; the
flood group's one a port)."""
OWN_ADDRESS = "ina_own_address"
"""The ingress parser's value set of the address whose ina packets are the switch's."""
HELD_PARAMS = ("ina_held", "ina_held_copy")
"""The RegisterParams that hold what a completed chunk leaves in `missing` and its copy (p4src/slots.p4)."""
MATCH_PRIORITIES = 1 << 24
"""A ternary entry's `$MATCH_PRIORITY` is this less its priority: BfRt matches the lowest first, where a
TableEntry's highest priority matches first (P4Runtime's order)."""


class BfrtMissing(RuntimeError):
    """The SDE's BfRt Python client is not where ina looks."""


def bfrt_client() -> ModuleType:
    """`bfrt_grpc.client` from the SDE installation at `$SDE_INSTALL` (or already importable)."""
    try:
        return importlib.import_module("bfrt_grpc.client")
    except ImportError:
        pass
    sde = os.environ.get("SDE_INSTALL")
    if not sde:
        raise BfrtMissing("the Tofino target needs the SDE's BfRt client (bfrt_grpc): set SDE_INSTALL to the SDE's install "
                          "folder (open-p4studio's set_sde.sh does) or put bfrt_grpc on PYTHONPATH")  # fmt: skip
    found = sorted(glob.glob(os.path.join(sde, "lib", "python3*", "site-packages", "tofino")))
    if not found:
        raise BfrtMissing(f"no lib/python3*/site-packages/tofino under SDE_INSTALL={sde!r}: build the SDE with its BfRt "
                          "gRPC client (open-p4studio's default profiles do)")  # fmt: skip
    # the client imports its protobufs (bfruntime_pb2) as top-level modules, hence both folders
    sys.path[:0] = [found[-1], os.path.join(found[-1], "bfrt_grpc")]
    return importlib.import_module("bfrt_grpc.client")


@dataclass(frozen=True, slots=True)
class RegisterField:
    """Where a logical register lives on Tofino: a register array, its data field's short name, and
    which of the array's blocks of P cells (a word group's, p4src/word_passes.p4; else 0)."""

    array: str
    field: str
    group: int = 0


def register_layout(words: int, pass_words: int) -> dict[str, list[RegisterField]]:
    """Each logical register's arrays (p4src/slots.p4, values.p4): value word i is cell slot + g * P
    of array ina_value_j, where i = j + g * pass_words (a pass steps that many words, in the word passes'
    groups), every other register one array of its own name."""
    layout = {name: [RegisterField(f"ina_{name}", "f1")] for name in REGISTERS if name != "value"}
    layout["value"] = [RegisterField(f"ina_value_{i % pass_words}", "f1", i // pass_words) for i in range(words)]
    return layout


COUNTER_ARRAYS = {"rx": "ina_rx", "tx": "ina_tx", "outcomes": "ina_outcomes", "events": "ina_events", "sent_up": "ina_sent_up"}


class TofinoDevice:
    """bf_switchd's BfRt server at `address`, and the switch's CPU Ethernet port `cpu_interface`.

    Registers are read from `pipe`, the pipe whose ports carry ina's traffic: each Tofino pipe keeps
    registers of its own, so every worker and PS must be reached through ports of that one pipe."""

    target = "tofino"

    def __init__(self, client: Any, gc: ModuleType, cpu_interface: str, cpu_port: int, pipe: int = 0, device_id: int = 0) -> None:
        self.client, self.gc = client, gc
        self.cpu_interface, self.cpu_port = cpu_interface, cpu_port
        self.all_pipes = gc.Target(device_id=device_id, pipe_id=0xFFFF)
        self.pipe = gc.Target(device_id=device_id, pipe_id=pipe)
        self.pipe_index = pipe
        self.info: Any = None
        self.layout: dict[str, list[RegisterField]] = {}

    @classmethod
    def connect(cls, address: str, cpu_interface: str, cpu_port: int, pipe: int = 0, device_id: int = 0) -> TofinoDevice:
        gc = bfrt_client()
        try:
            client = gc.ClientInterface(address, client_id=0, device_id=device_id)
        except Exception as error:  # the client raises RuntimeError or a gRPC error, by version
            raise RuntimeError(f"no BfRt gRPC server (bf_switchd) answers at {address}: {error}") from None
        return cls(client, gc, cpu_interface, cpu_port, pipe, device_id)

    def load(self, program: Build) -> None:
        """Push tofino.bin, context.json and bfrt.json to bf_switchd and bind to the program."""
        assert program.tofino is not None, "a Tofino build has its compiler outputs"
        profile = self.gc.ProfileInfo("pipe", str(program.tofino.context), str(program.tofino.binary), [0, 1, 2, 3])
        config = self.gc.ForwardingConfig(PROGRAM, str(program.tofino.bfrt), [profile])
        request = self.client.send_set_forwarding_pipeline_config_request
        done = request(self._pipeline_action("VERIFY_AND_WARM_INIT_BEGIN_AND_END"), str(program.tofino.bfrt.parent), [config])
        if not done:
            raise RuntimeError(f"bf_switchd did not finish loading {PROGRAM} (tofino.bin {program.tofino.binary})")
        self.client.bind_pipeline_config(PROGRAM)
        self.info = self.client.bfrt_info_get(PROGRAM)
        self.layout = register_layout(program.words, program.pass_words)

    def _pipeline_action(self, name: str) -> int:
        return getattr(self.gc.bfruntime_pb2.SetForwardingPipelineConfigRequest, name)

    # -- tables and groups ----------------------------------------------------------------------

    def write(self, change: str, items: Sequence[TableEntry | Group]) -> None:
        for item in items:
            if isinstance(item, Group):
                self._write_group(change, item)
            else:
                self._write_entry(change, item)

    def _write_entry(self, change: str, entry: TableEntry) -> None:
        gc, table = self.gc, self.info.table_get(entry.table)
        data = table.make_data([gc.DataTuple(name, value) for name, value in entry.params.items()], entry.action)
        if not entry.match:
            assert change == MODIFY, "a default entry is only ever modified"
            table.default_entry_set(self.all_pipes, data)
            return
        key = table.make_key([gc.KeyTuple(name, value.value & value.mask, mask=value.mask) if isinstance(value, Ternary)
                              else gc.KeyTuple(name, value) for name, value in entry.match.items()]
                             + ([gc.KeyTuple("$MATCH_PRIORITY", MATCH_PRIORITIES - entry.priority)] if entry.priority else []))  # fmt: skip
        if change == INSERT:
            table.entry_add(self.all_pipes, [key], [data])
        elif change == MODIFY:
            table.entry_mod(self.all_pipes, [key], [data])
        else:
            table.entry_del(self.all_pipes, [key])

    def _write_group(self, change: str, group: Group) -> None:
        """A group is a `$pre.mgid` entry over one `$pre.node` per replica (that replica id, one port)."""
        gc = self.gc
        nodes, mgid = self.info.table_get("$pre.node"), self.info.table_get("$pre.mgid")
        ids = [group.group * NODES_PER_GROUP + k for k in range(len(group.replicas))]
        node_keys = [nodes.make_key([gc.KeyTuple("$MULTICAST_NODE_ID", node)]) for node in ids]
        group_key = mgid.make_key([gc.KeyTuple("$MGID", group.group)])
        if change == DELETE:
            mgid.entry_del(self.all_pipes, [group_key])
            nodes.entry_del(self.all_pipes, node_keys)
            return
        node_data = [nodes.make_data([gc.DataTuple("$MULTICAST_RID", rid), gc.DataTuple("$MULTICAST_LAG_ID", int_arr_val=[]),
                                      gc.DataTuple("$DEV_PORT", int_arr_val=[port])]) for port, rid in group.replicas]  # fmt: skip
        group_data = mgid.make_data([gc.DataTuple("$MULTICAST_NODE_ID", int_arr_val=ids),
                                     gc.DataTuple("$MULTICAST_NODE_L1_XID_VALID", bool_arr_val=[False] * len(ids)),
                                     gc.DataTuple("$MULTICAST_NODE_L1_XID", int_arr_val=[0] * len(ids))])  # fmt: skip
        write_nodes, write_group = (nodes.entry_add, mgid.entry_add) if change == INSERT else (nodes.entry_mod, mgid.entry_mod)
        write_nodes(self.all_pipes, node_keys, node_data)
        write_group(self.all_pipes, [group_key], [group_data])

    # -- registers and counters -----------------------------------------------------------------

    def _read_array(self, array: str, index_field: str) -> dict[int, dict[str, Any]]:
        """Every cell of a register or counter array, read from the hardware, by index: data fields by short name."""
        table = self.info.table_get(array)
        cells = {}
        for data, key in table.entry_get(self.pipe, None, {"from_hw": True}):
            index = key.to_dict()[index_field]["value"]
            cells[index] = {name.rsplit(".", 1)[-1]: value for name, value in data.to_dict().items()}
        return cells

    def _pipe_value(self, value: Any) -> int:
        """A register read answers one value per pipe of the read's target: ours."""
        return int(value[0] if isinstance(value, list) else value)

    def registers(self, name: str) -> list[int]:
        fields = self.layout[name]
        arrays = {array: self._read_array(array, "$REGISTER_INDEX") for array in dict.fromkeys(f.array for f in fields)}
        pool = len(next(iter(arrays.values()))) // (1 + max(f.group for f in fields))
        if name != "value":
            (field,) = fields
            return [self._pipe_value(arrays[field.array][slot][field.field]) for slot in range(pool)]
        return [self._pipe_value(arrays[f.array][f.group * pool + slot][f.field]) for slot in range(pool) for f in fields]

    def write_register(self, name: str, index: int, value: int) -> None:
        """Write one cell; a pair's other half is written back as it is (BfRt writes whole entries)."""
        (field,) = self.layout[name]
        gc, table = self.gc, self.info.table_get(field.array)
        cell = {field.field: value}
        if field.field != "f1":
            other = "lo" if field.field == "hi" else "hi"
            cell[other] = self._pipe_value(self._read_array(field.array, "$REGISTER_INDEX")[index][other])
        data = table.make_data([gc.DataTuple(part, v) for part, v in cell.items()])
        table.entry_mod(self.pipe, [table.make_key([gc.KeyTuple("$REGISTER_INDEX", index)])], [data])

    def counter(self, name: str, index: int) -> int:
        gc, table = self.gc, self.info.table_get(COUNTER_ARRAYS[name])
        key = table.make_key([gc.KeyTuple("$COUNTER_INDEX", index)])
        for data, _ in table.entry_get(self.all_pipes, [key], {"from_hw": True}):
            return int(data.to_dict()["$COUNTER_SPEC_PKTS"])
        return 0

    # -- the traffic manager ----------------------------------------------------------------------

    def serve_queues_by_priority(self, ports: Iterable[int]) -> None:
        """Each port's egress queues strict-priority, queue id 7 first: the program puts a packet in
        the queue of its priority under `--queues priority`, whatever the policy (ig_tm_md.qid; docs/p4.md,
        "Egress queues"). The traffic manager addresses a port's queues as (port group, queue in the group),
        which the port's configuration maps from the queue ids (the SDE's bf_rt_tm_tf1.json)."""
        gc = self.gc
        ports_cfg, queues = self.info.table_get("tf1.tm.port.cfg"), self.info.table_get("tf1.tm.queue.sched_cfg")
        for port in sorted(set(ports)):
            key = ports_cfg.make_key([gc.KeyTuple("dev_port", port)])
            config = next((data.to_dict() for data, _ in ports_cfg.entry_get(self.all_pipes, [key], {"from_hw": False})), None)
            if config is None:
                raise RuntimeError(f"bf_switchd has no traffic-manager configuration for port {port} (tf1.tm.port.cfg)")
            if config["port_queues_count"] < EGRESS_QUEUES:
                raise RuntimeError(f"port {port} has {config['port_queues_count']} egress queues; ina's program uses "
                                   f"{EGRESS_QUEUES} (give the port {EGRESS_QUEUES} queues in bf_switchd, tf1.tm.port.cfg)")  # fmt: skip
            group_queues = list(config["egress_qid_queues"])[:EGRESS_QUEUES]
            for qid, queue in enumerate(group_queues):
                level = str(qid)
                queue_key = queues.make_key([gc.KeyTuple("pg_id", config["pg_id"]), gc.KeyTuple("pg_queue", queue)])
                data = queues.make_data([gc.DataTuple("min_priority", str_val=level), gc.DataTuple("max_priority", str_val=level)])
                queues.entry_mod(self.all_pipes, [queue_key], [data])

    def take_address(self, ip: int) -> None:
        """The parser's value set of the switch's own address (p4src/parser_tna.p4): a table stage would cost the
        ina tables a stage."""
        table = self.info.table_get(OWN_ADDRESS)
        key = table.make_key([self.gc.KeyTuple("f1", ip, mask=0xFFFFFFFF)])
        table.entry_add(self.all_pipes, [key], [table.make_data([])])

    def hold_completed(self, held: int) -> None:
        """The held value of each `missing` register, a RegisterParam (p4src/arch_tna.p4): its stateful ALU reads
        two packet fields already, the bitmap and what a claim leaves (p4src/slots.p4)."""
        for name in HELD_PARAMS:
            table = self.info.table_get(name)
            table.default_entry_set(self.all_pipes, table.make_data([self.gc.DataTuple("value", held)]))

    # -- the CPU port -----------------------------------------------------------------------------

    def packet_out(self, frame: bytes) -> None:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
            raw.bind((self.cpu_interface, 0))
            raw.send(frame)

    def close(self) -> None:
        self.client.tear_down_stream()
