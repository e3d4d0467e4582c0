"""The one layer that differs between P4 targets: how entries, groups, registers, counters and
packet-outs reach a device. `ina.p4.controller.P4Switch` speaks only this interface, so BMv2
(`ina.p4.bmv2_device`) and Tofino (`ina.p4.tofino_device`) share every decision above it.

Registers and counters go by their logical names below; each device maps them onto the arrays its
program declares (one array per register on BMv2; 64-bit pairs on Tofino, docs/p4.md).
"""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence

from ina.p4.build import Build
from ina.p4.entries import Group, TableEntry

INSERT, MODIFY, DELETE = "insert", "modify", "delete"
"""How `Device.write` changes what it is given (a default entry is only ever modified)."""

REGISTERS = ("redirect_id", "redirect_seq", "key_id", "key_id_copy", "key_seq", "key_seq_copy", "missing", "missing_copy",
             "prio", "value", "touched")  # fmt: skip
"""Per-slot registers (docs/p4.md, "State"); `value` holds word i of slot s at s * K + i."""
CLEARED_ON_REMOVAL = (("key_id", "key_id_copy", "key_seq", "key_seq_copy", "missing", "missing_copy"), ("redirect_id", "redirect_seq"))
"""What removing a job zeroes: a slot's key and bitmap, and a redirect (docs/p4.md, "Control plane")."""

COUNTERS = ("rx", "tx", "outcomes", "events")
OUTCOMES = ("malformed", "unexpected", "unregistered", "bad_slot", "bad_format", "duplicate", "redirected", "flushed",
            "aggregated", "claimed", "resend_forwarded", "straggler", "collision", "flush_requests")  # fmt: skip
"""p4src/metadata.p4's OUTCOME_* indices, in order."""
EVENTS = ("completed", "preempted", "stale", "flush_hits", "swept")
"""p4src/metadata.p4's EVENT_* indices, in order."""
RACK_OUTCOMES, RACK_EVENTS = ("descended",), ("sent_up",)
"""The indices after those in a program that serves racked roles (p4src/racks.p4; ina.p4.build.RACKED_TARGETS)."""
HOLD_OUTCOMES, HOLD_EVENTS = ("releases",), ("release_hits",)
"""... and after those, atp's (p4src/'s INA_HOLD, which comes with the racks; ina.p4.build.HOLD_TARGETS)."""


class Device(Protocol):
    """A switch running one of ina's P4 programs."""

    target: str
    """The `ina p4 build --target` its program is built for."""
    cpu_port: int
    """The port its control plane's packets enter at."""

    def load(self, program: Build) -> None:
        """Load the compiled program (and the target's settings that go with it)."""

    def write(self, change: str, items: Sequence[TableEntry | Group]) -> None:
        """INSERT, MODIFY or DELETE table entries and multicast groups, in order."""

    def serve_queues_by_priority(self, ports: Iterable[int]) -> None:
        """Serve each port's egress queues strict-priority, the highest queue id first."""

    def registers(self, name: str) -> list[int]:
        """Every cell of logical register `name` (one of REGISTERS), by slot."""

    def write_register(self, name: str, index: int, value: int) -> None: ...

    def counter(self, name: str, index: int) -> int:
        """Packets counted at `index` of counter `name` (one of COUNTERS)."""

    def packet_out(self, frame: bytes) -> None:
        """Inject an Ethernet frame at the switch's CPU port (the idle sweep's SWEEP)."""

    def close(self) -> None: ...
