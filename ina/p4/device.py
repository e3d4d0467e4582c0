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

COUNTERS = ("rx", "tx", "outcomes", "events", "sent_up")
OUTCOMES = ("malformed", "unexpected", "unregistered", "bad_slot", "bad_format", "duplicate", "redirected", "flushed",
            "aggregated", "claimed", "resend_forwarded", "straggler", "collision", "flush_requests", "descended", "releases")  # fmt: skip
"""p4src/metadata.p4's OUTCOME_* indices, in order: a leaf's RESULTs passed down (racks.p4) and atp's returns last. A
leaf counts its sums up on a counter of its own, `sent_up` (a TNA counter counts once a packet)."""
EVENTS = ("completed", "preempted", "stale", "flush_hits", "swept", "release_hits")
"""p4src/metadata.p4's EVENT_* indices, in order."""


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

    def take_address(self, ip: int) -> None:
        """Take the ina packets addressed to `ip` (the switch's own) as its protocol, and forward the others as any
        other packet (docs/p4.md, "Own address")."""

    def hold_completed(self, held: int) -> None:
        """What a completing contribution leaves in a slot's `missing` beyond the identity's `held_missing`, which
        carries it on v1model: HELD under atp (a held result), else 0 (free)."""

    def registers(self, name: str) -> list[int]:
        """Every cell of logical register `name` (one of REGISTERS), by slot."""

    def write_register(self, name: str, index: int, value: int) -> None: ...

    def counter(self, name: str, index: int) -> int:
        """Packets counted at `index` of counter `name` (one of COUNTERS)."""

    def packet_out(self, frame: bytes) -> None:
        """Inject an Ethernet frame at the switch's CPU port (the idle sweep's SWEEP)."""

    def close(self) -> None: ...
