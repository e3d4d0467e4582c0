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
class TableEntry:
    """An exact-match entry of `table` (an empty `match`: the table's default action)."""

    table: str
    match: Mapping[str, int]
    action: str
    params: Mapping[str, int] = field(default_factory=dict)


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


def key_id(job: int, op: int) -> int:
    """A chunk key's id as the slot registers hold it: valid bit, operation bit (1: MAX), job."""
    return KEY_VALID | op * KEY_MAX | job


def identity(ip: str, mac: str, policy: str, queues: str, holds: bool) -> TableEntry:
    """The default entry of `ina_switch`: the switch's own address, whether it preempts (esa), whether its egress
    queues go by priority (docs/protocol.md, "Egress queues": whatever the policy) and, for a program that `holds`
    (ina.p4.build.HOLD_TARGETS), whether it holds completed chunks (atp)."""
    params = {"ip": ip_number(ip), "mac": mac_number(mac), "esa": int(policy == "esa"), "priority_queues": int(queues == "priority")}
    if holds:
        params["hold"] = int(policy == "atp")
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


def job(entry: JobEntry, pool: int, group: int, routes: Mapping[str, Route], copies: bool = True) -> tuple[list[TableEntry], Group]:
    """A registered job as the table granted it: its job, worker, victim, level and replica entries, and
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
        "full": spec.full_bitmap, "lane_bits": spec.lane_bits, "ps_ip": ip_number(ps.host), "ps_port": ps.port}))  # fmt: skip
    entries += levels(spec)
    members = [*spec.workers, ps] if copies and spec.uplink is None else list(spec.workers)
    entries += [TableEntry("ina_replicas", {"group": group, "replica": rid}, "ina_replica", {
        "ip": ip_number(e.host), "port": e.port, "mac": mac_number(routes[e.host].mac)}) for rid, e in enumerate(members)]  # fmt: skip
    return entries, Group(group, tuple((routes[e.host].port, rid) for rid, e in enumerate(members)))


def levels(spec: JobSpec) -> list[TableEntry]:
    """A racked job's role (docs/protocol.md, section 10; p4src/racks.p4, BMv2 only): at a leaf its rack and
    spine; at its spine the SPINE flag of its PARTIALs and RESULTs, the PARTIAL's too when another job's
    claim evicts its partial. None for a job of one switch."""
    up = spec.uplink
    if up is not None:
        return [TableEntry("ina_levels", {"job": spec.job}, "ina_leaf", {
            "rack": up.rack, "racks_full": (1 << up.racks) - 1, "spine_ip": ip_number(up.host), "spine_port": up.port})]  # fmt: skip
    if spec.level == "spine":
        return [TableEntry("ina_levels", {"job": spec.job}, "ina_spine"), TableEntry("ina_victim_levels", {"job": spec.job}, "ina_victim_spine")]
    return []
