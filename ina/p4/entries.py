"""What the control plane writes into a P4 switch, whatever the target: the switch's identity, its
routes and each job translated into table entries and multicast groups (docs/p4.md, "Control plane").

BMv2 (P4Runtime) and Tofino (BfRt) take these very entries; only the layer that writes them to a
device differs (`ina.p4.bmv2_device`, `ina.p4.tofino_device`). Table, action and parameter names are
the P4 programs' own (`@name` annotations that p4src/ina_v1model.p4 and p4src/ina_tna.p4 share).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ina.control import JobSpec
from ina.protocol.constants import Flag, Kind
from ina.switch.state import JobEntry

FLOOD_GROUP = 1
"""The multicast group of plain Ethernet flooding: every routed port."""
KEY_VALID, KEY_MAX = 1 << 17, 1 << 16
"""The valid and operation bits of a key id in the slot registers (p4src/headers.p4)."""


@dataclass(frozen=True, slots=True)
class Route:
    """Where the switch reaches an IPv4 address: a switch port and the next hop's MAC."""

    ip: str
    mac: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Route:
        """From 'IP=MAC@PORT', with a clear error."""
        try:
            ip, rest = text.split("=", 1)
            mac, port = rest.rsplit("@", 1)
            route = cls(ip, mac, int(port))
            ip_number(route.ip), mac_number(route.mac)
        except ValueError:
            raise ValueError(f"--route {text!r}: expected IP=MAC@PORT, e.g. 10.0.0.2=02:00:00:00:00:02@2") from None
        return route


@dataclass(frozen=True, slots=True)
class Ternary:
    """A ternary key field's value and mask: the bits of `mask` must equal `value`'s."""

    value: int
    mask: int


@dataclass(frozen=True, slots=True)
class TableEntry:
    """An entry of `table` (an empty `match`: the table's default action). A ternary table's fields are
    `Ternary` (a field left out matches anything) and its entries match in order of `priority`, the
    highest first."""

    table: str
    match: Mapping[str, int | Ternary]
    action: str
    params: Mapping[str, int] = field(default_factory=dict)
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Group:
    """A multicast group of the packet replication engine: (egress port, replica id) pairs."""

    group: int
    replicas: tuple[tuple[int, int], ...]


def ip_number(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def mac_number(text: str) -> int:
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"{text!r} is not a MAC address")
    return int.from_bytes(bytes(int(p, 16) for p in parts), "big")


HELD = 1 << 31
"""What a slot's `missing` holds for a held result under atp (p4src/metadata.p4's HELD): no worker's bit."""


def key_id(job: int, op: int) -> int:
    """A chunk key's id as the slot registers hold it: valid bit, operation bit (1: MAX), job."""
    return KEY_VALID | op * KEY_MAX | job


def identity(ip: str, mac: str, policy: str, queues: str) -> TableEntry:
    """The default entry of `ina_switch`: the switch's own address, whether it preempts (esa), whether it holds
    completed chunks (atp: what `missing` becomes) and whether its egress queues go by priority (docs/protocol.md,
    "Egress queues": whatever the policy)."""
    params = {"ip": ip_number(ip), "mac": mac_number(mac), "held_missing": HELD if policy == "atp" else 0, "esa": int(policy == "esa"),
              "priority_queues": int(queues == "priority")}  # fmt: skip
    return TableEntry("ina_switch", {}, "ina_identity", params)


def cpu_port(port: int) -> TableEntry:
    """The port the control plane's packets (the idle sweep's SWEEP) enter at."""
    return TableEntry("ina_cpu_ports", {"port": port}, "ina_from_cpu")


def forwarding(routes: Iterable[Route]) -> tuple[list[TableEntry], Group]:
    """Plain Ethernet forwarding to every routed MAC, the routes to every worker and PS host, and
    the flood group over their ports."""
    routes = list(routes)
    entries = [TableEntry("ina_l2", {"dst": mac_number(mac)}, "ina_l2_port", {"port": port})
               for mac, port in {route.mac: route.port for route in routes}.items()]  # fmt: skip
    entries += [TableEntry("ina_routes", {"dst": ip_number(r.ip)}, "ina_route", {"port": r.port, "mac": mac_number(r.mac)})
                for r in routes]  # fmt: skip
    return entries, Group(FLOOD_GROUP, tuple((port, 0) for port in sorted({route.port for route in routes})))


def job(entry: JobEntry, pool: int, group: int, routes: Mapping[str, Route], copies: bool = True,
        hold: bool = False) -> tuple[list[TableEntry], Group]:  # fmt: skip
    """A registered job as the table granted it: its job, worker, source, victim, level and replica entries, and
    the multicast group of its RESULTs (replica `rank` is that worker, replica n the PS where `copies`; a
    leaf's group, which passes its spine's RESULT down, has the workers alone)."""
    spec, ps = entry.spec, entry.spec.ps
    assert ps is not None
    settings = {"full": spec.full_bitmap, "fanin": spec.fanin, "neg_slot_base": -entry.slot_base % pool,
                "span_mask": (entry.span or pool) - 1, "priority_cap": spec.priority_cap,
                "lane_bits": spec.lane_bits, "ps_ip": ip_number(ps.host), "ps_port": ps.port, "group": group}  # fmt: skip
    entries = [TableEntry("ina_jobs", {"job": spec.job, "op": op}, "ina_job", {
        "key_id": key_id(spec.job, op), "key_id_other_op": key_id(spec.job, 1 - op)} | settings) for op in (0, 1)]  # fmt: skip
    entries += [TableEntry("ina_workers", {"job": spec.job, "rank": rank, "src": ip_number(w.host), "src_port": w.port}, "ina_worker")
                for rank, w in enumerate(spec.workers)]  # fmt: skip
    entries.append(TableEntry("ina_victims", {"job": spec.job}, "ina_victim", {
        "full": spec.full_bitmap, "lane_bits": spec.lane_bits, "ps_ip": ip_number(ps.host), "ps_port": ps.port,
        "flags": Flag.SPINE if spec.level == "spine" else 0}))  # fmt: skip
    entries += sources(spec)
    entries += levels(spec, hold, routes)
    members = [*spec.workers, ps] if copies and spec.uplink is None else list(spec.workers)
    entries += [TableEntry("ina_replicas", {"group": group, "replica": rid}, "ina_replica", {
        "ip": ip_number(e.host), "port": e.port, "mac": mac_number(routes[e.host].mac)}) for rid, e in enumerate(members)]  # fmt: skip
    return entries, Group(group, tuple((routes[e.host].port, rid) for rid, e in enumerate(members)))


LEVEL_ENTRIES = 1024
"""The level table's size (p4src/metadata.p4): a leaf's job takes four entries, a spine's three (five under atp), a job
of one switch none (two under atp); below them the switch's own (`switch_levels`)."""
ALL_BITS = 0xFFFFFFFF


def levels(spec: JobSpec, hold: bool, routes: Mapping[str, Route]) -> list[TableEntry]:
    """What a packet of the job is at this switch (p4src/racks.p4, table `ina_levels`): at a leaf its rack, its
    spine and the route there (its sum up takes no second route lookup), and a RESULT from there passed down if
    flagged SPINE with every rack's bit; at its spine a DATA taken only flagged SPINE and not resent, and the SPINE
    flag of its PARTIALs and RESULTs (the victim entry's `flags` flag the PARTIAL another job's claim evicts);
    under atp (`hold`) a RESULT the PS returns, released if flagged HOLD with every worker's bit. Anything else of
    those kinds is of the wrong level (bad_format). None for a job of one switch without atp: the switch-wide
    entries (`switch_levels`) serve it."""
    job, up = Ternary(spec.job, 0xFFFF), spec.uplink
    data, result = Ternary(Kind.DATA, 0xFF), Ternary(Kind.RESULT, 0xFF)
    spine_flag = Ternary(Flag.SPINE, Flag.SPINE)
    if up is not None:
        route = routes[up.host]
        where = {"rack": up.rack, "rack_bit": 1 << up.rack, "spine_ip": ip_number(up.host), "spine_port": up.port,
                 "spine_egress": route.port, "spine_mac": mac_number(route.mac)}  # fmt: skip
        rows = [({"kind": result, "flags": spine_flag, "bitmap": Ternary((1 << up.racks) - 1, ALL_BITS)}, 1, 0),
                ({"kind": result}, 1, 1), ({"kind": data, "flags": spine_flag}, 0, 1), ({}, 0, 0)]  # fmt: skip
        return [TableEntry("ina_levels", {"job": job} | match, "ina_leaf", where | {"descend": descend, "misleveled": misleveled},
                           len(rows) - i + 2) for i, (match, descend, misleveled) in enumerate(rows)]  # fmt: skip
    rows = _releases(spec) if hold else []
    if spec.level == "spine":
        rows = [({"kind": data, "flags": Ternary(Flag.SPINE, Flag.SPINE | Flag.RESEND)}, 0, 0), ({"kind": data}, 0, 1), *rows, ({}, 0, 0)]
    action = "ina_spine" if spec.level == "spine" else "ina_only"
    entries = [TableEntry("ina_levels", {"job": job} | match, action, {"release": release, "misleveled": misleveled}, len(rows) - i + 2)
               for i, (match, release, misleveled) in enumerate(rows)]  # fmt: skip
    return entries


def _releases(spec: JobSpec) -> list[tuple[dict[str, Ternary], int, int]]:
    """atp: the job's RESULTs are the PS's returns, of the right format if flagged HOLD with every worker's bit."""
    result = Ternary(Kind.RESULT, 0xFF)
    return [({"kind": result, "flags": Ternary(Flag.HOLD, Flag.HOLD), "bitmap": Ternary(spec.full_bitmap, ALL_BITS)}, 1, 0),
            ({"kind": result}, 1, 1)]  # fmt: skip


def switch_levels(hold: bool) -> list[TableEntry]:
    """The level table's entries for every job, below each job's own: a DATA flagged SPINE is of the wrong level
    where the switch is not the job's spine; under atp a RESULT is a return to pass on (then unregistered unless
    from the job's PS), where without atp it is unexpected."""
    entries = [TableEntry("ina_levels", {"kind": Ternary(Kind.DATA, 0xFF), "flags": Ternary(Flag.SPINE, Flag.SPINE)}, "ina_only",
                          {"release": 0, "misleveled": 1}, 2)]  # fmt: skip
    if hold:
        entries.append(TableEntry("ina_levels", {"kind": Ternary(Kind.RESULT, 0xFF)}, "ina_only", {"release": 1, "misleveled": 0}, 1))
    return entries


def sources(spec: JobSpec) -> list[TableEntry]:
    """Where the job's FLUSHes and the RESULTs it passes on may come from (table `ina_sources`): its PS, and at a
    leaf its spine, the only source of its RESULTs there."""
    ps = spec.ps
    assert ps is not None
    up = spec.uplink
    entries = [TableEntry("ina_sources", {"job": spec.job, "src": ip_number(ps.host), "src_port": ps.port}, "ina_source",
                          {"ps": 1, "up": int(up is None)})]  # fmt: skip
    if up is not None:
        entries.append(TableEntry("ina_sources", {"job": spec.job, "src": ip_number(up.host), "src_port": up.port}, "ina_source", {"ps": 0, "up": 1}))
    return entries
