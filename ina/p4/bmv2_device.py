"""BMv2 as a `Device`: P4Runtime for the program, table entries, multicast groups and packet-out;
BMv2's Thrift API for what its P4Runtime server does not serve (registers, counters by name,
queue depths); a slot's value words, one register entry wider than Thrift reads, through the
program's peek at the CPU port."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ina.p4.bmv2 import CPU_PORT, Bmv2Process
from ina.p4.build import Build
from ina.p4.device import DELETE, INSERT, MODIFY
from ina.p4.entries import Group, TableEntry
from ina.p4.registers import Bmv2Thrift
from ina.p4.runtime import P4Info, P4RuntimeClient, Update

QUEUE_DEPTH = 4096
"""Packets each BMv2 egress queue holds: a window of RESULT copies to every worker and the PS."""
_UPDATES = {INSERT: Update.INSERT, MODIFY: Update.MODIFY, DELETE: Update.DELETE}
PEEK = struct.Struct("!12xHH")
"""A peek frame (p4src/headers.p4, peek_h): Ethernet with zero addresses, its EtherType, the slot."""
PEEK_ETHERTYPE = 0x88B5
PEEK_TIMEOUT = 5.0
"""Seconds BMv2 has to answer a peek."""


class Bmv2Device:
    """simple_switch_grpc reached over P4Runtime and Thrift; the program's arrays are `ina_<name>`."""

    target = "bmv2"
    cpu_port = CPU_PORT

    def __init__(self, runtime: P4RuntimeClient, thrift: Bmv2Thrift, bmv2: Bmv2Process | None = None) -> None:
        self.runtime, self.thrift, self.bmv2 = runtime, thrift, bmv2
        self.info: P4Info | None = None
        self.program: Build | None = None

    @classmethod
    def start(cls, interfaces: Mapping[int, str], log: Path | None = None, priority_queues: bool = True) -> Bmv2Device:
        """Start simple_switch_grpc on `interfaces` (port -> Linux interface), its ports' egress queues by priority
        or one FIFO each, and connect to it; the device stops it on `close()`."""
        if not interfaces:
            raise ValueError("the BMv2 switch needs ports: give --interface PORT@IFACE for each")
        bmv2 = Bmv2Process(interfaces, log=log, priority_queues=priority_queues)
        opened: list = [bmv2]
        try:
            opened.append(P4RuntimeClient(bmv2.grpc_address))
            opened.append(Bmv2Thrift("127.0.0.1", bmv2.thrift_port))
        except BaseException:
            for part in reversed(opened):
                part.close()
            raise
        return cls(opened[1], opened[2], bmv2)

    def load(self, program: Build) -> None:
        self.thrift.set_queue_depths(QUEUE_DEPTH)
        self.info = self.runtime.set_pipeline(program.p4info, program.pipeline)
        self.program = program

    def updates(self, change: str, items: Sequence[TableEntry | Group]) -> list:
        """The P4Runtime updates that make `change` to `items`."""
        assert self.info is not None, "load() the program first"
        kind = _UPDATES[change]
        return [self.runtime.group_update(kind, item.group, list(item.replicas)) if isinstance(item, Group)
                else self.runtime.table_update(kind, self.info.entry(item.table, item.match, item.action, item.params, item.priority))
                for item in items]  # fmt: skip

    def write(self, change: str, items: Sequence[TableEntry | Group]) -> None:
        self.runtime.write(*self.updates(change, items))

    def serve_queues_by_priority(self, ports: Iterable[int]) -> None:
        """Nothing to set: simple_switch_grpc started with --priority-queues serves its highest first."""

    def take_address(self, ip: int) -> None:
        """Nothing to set: the v1model program compares with the identity's address."""

    def hold_completed(self, held: int) -> None:
        """Nothing to set: the v1model program's `missing` updates read the identity's `held_missing`."""

    def registers(self, name: str) -> list[int]:
        return self._peek_values() if name == "value" else self.thrift.registers(f"ina_{name}")

    def _peek_values(self) -> list[int]:
        """Every slot's K words, word i of slot s at s * K + i: all peeks sent at once, then their
        answers. Each peek reads one register cell: a slot's words, or with word passes one group's,
        group g of slot s in cell s + g * P (p4src/word_passes.p4)."""
        assert self.program is not None, "load() the program first"
        words, pool, step = self.program.words, self.program.pool, self.program.pass_words
        cells = pool * (words // step)
        for cell in range(cells):
            self.runtime.packet_out(PEEK.pack(PEEK_ETHERTYPE, cell))
        values = np.zeros((words // step, pool, step), dtype=np.uint32)
        pending = set(range(cells))
        while pending:
            frame = self.runtime.packet_in(PEEK_TIMEOUT)
            ethertype, cell = PEEK.unpack_from(frame)
            if ethertype == PEEK_ETHERTYPE and cell in pending and len(frame) == PEEK.size + 4 * step:
                values[cell // pool, cell % pool] = np.frombuffer(frame, dtype=">u4", offset=PEEK.size)
                pending.discard(cell)
        return values.transpose(1, 0, 2).ravel().tolist()

    def write_register(self, name: str, index: int, value: int) -> None:
        self.thrift.write_register(f"ina_{name}", index, value)

    def counter(self, name: str, index: int) -> int:
        return self.thrift.counter(f"ina_{name}", index)

    def packet_out(self, frame: bytes) -> None:
        self.runtime.packet_out(frame)

    def close(self) -> None:
        for part in (self.runtime, self.thrift, self.bmv2):
            if part is not None:
                part.close()
