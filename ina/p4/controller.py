"""The P4 switch's control plane: the same ControlTarget as the software switch, on BMv2.

It pushes the compiled program over P4Runtime, programs the job tables, multicast groups and
routes, reads counters and slot registers over BMv2's Thrift API, and does the idle sweep
(docs/p4.md, "Control plane"): the data plane has no timers, so the controller watches each
partial's registers and, when one has not changed for `slot_timeout`, sends a SWEEP packet-out
that flushes it only if it is still unchanged.
"""

from __future__ import annotations

import ipaddress
import threading
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ina.control import JobSpec
from ina.control.watch import Waiting
from ina.p4.build import build
from ina.p4.registers import Bmv2Thrift
from ina.p4.runtime import DELETE, INSERT, MODIFY, P4RuntimeClient
from ina.protocol import INA_PORT, Flag, Header, Kind
from ina.switch.config import SwitchConfig
from ina.switch.core import COUNTERS
from ina.switch.state import JobEntry, Jobs

OUTCOMES = ("malformed", "unexpected", "unregistered", "bad_slot", "bad_format", "duplicate", "redirected", "flushed",
            "aggregated", "claimed", "resend_forwarded", "straggler", "collision", "flush_requests")  # fmt: skip
"""p4src/metadata.p4's OUTCOME_* indices, in order."""
EVENTS = ("completed", "preempted", "stale", "flush_hits", "swept")
"""p4src/metadata.p4's EVENT_* indices, in order."""
FLOOD_GROUP = 1
QUEUE_DEPTH = 4096
"""Packets each BMv2 egress queue holds: a window of RESULT copies to every worker and the PS."""
KEY_MAX = 1 << 16


@dataclass(frozen=True, slots=True)
class Route:
    """Where the switch reaches an IPv4 address: a BMv2 port and the next hop's MAC."""

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
            _ip(route.ip), _mac(route.mac)
        except ValueError:
            raise ValueError(f"--route {text!r}: expected IP=MAC@PORT, e.g. 10.0.0.2=02:00:00:00:00:02@2") from None
        return route


def _ip(text: str) -> int:
    return int(ipaddress.IPv4Address(text))


def _key(key_id: int, seq: int) -> dict[str, Any]:
    return {"job": key_id & 0xFFFF, "seq": seq, "max": bool(key_id & KEY_MAX)}


def _mac(text: str) -> int:
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError(f"{text!r} is not a MAC address")
    return int.from_bytes(bytes(int(p, 16) for p in parts), "big")


class P4Switch:
    """A ControlTarget for a BMv2 switch running p4src/ina_v1model.p4. Thread-safe."""

    role = "switch"
    watch_period = 0.5
    """Seconds between the watch's reads of the slot registers (three Thrift reads of the pool each)."""

    def __init__(self, config: SwitchConfig, runtime: P4RuntimeClient, registers: Bmv2Thrift,
                 ip: str, mac: str, routes: Iterable[Route]) -> None:  # fmt: skip
        self.settings = config
        self.ip, self.mac = ip, mac
        self.routes = {route.ip: route for route in routes}
        self.runtime, self.registers = runtime, registers
        self.table = Jobs(config.pool, config.policy)
        self._groups: dict[int, int] = {}
        self._seen: dict[int, tuple[tuple[int, ...], float]] = {}
        self._lock = threading.Lock()
        registers.set_queue_depths(QUEUE_DEPTH)
        program = build(config.words, config.pool)
        self.info = runtime.set_pipeline(program.p4info, program.pipeline)
        self._program_switch()

    def _program_switch(self) -> None:
        info = self.info
        identity = info.entry("ina_switch", {}, "ina_identity", {"ip": _ip(self.ip), "mac": _mac(self.mac),
                                                                "esa": int(self.settings.policy == "esa")})  # fmt: skip
        updates = [self.runtime.table_update(MODIFY, identity)]
        ports = sorted({route.port for route in self.routes.values()})
        updates.append(self.runtime.group_update(INSERT, FLOOD_GROUP, [(port, 0) for port in ports]))
        for mac, port in {route.mac: route.port for route in self.routes.values()}.items():
            updates.append(self.runtime.table_update(INSERT, info.entry("ina_l2", {"dst": _mac(mac)}, "ina_l2_port", {"port": port})))
        for route in self.routes.values():
            updates.append(self.runtime.table_update(INSERT, info.entry(
                "ina_routes", {"dst": _ip(route.ip)}, "ina_route", {"port": route.port, "mac": _mac(route.mac)})))  # fmt: skip
        self.runtime.write(*updates)

    # -- ControlTarget ---------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        # Its parser takes K words a chunk: workers pad every DATA to K (docs/protocol.md, section 2).
        return self.settings.to_json() | {"target": "bmv2", "listen": f"{self.ip}:{INA_PORT}", "short_chunks": False}

    def register(self, spec: JobSpec) -> dict[str, Any]:
        with self._lock:
            entry = self.table.add(spec)
            try:
                unrouted = sorted({e.host for e in (*spec.workers, spec.ps) if e is not None and e.host not in self.routes})
                if unrouted:
                    raise ValueError(f"job {spec.job}: the switch has no route to {', '.join(unrouted)}; start it with "
                                     "--route IP=MAC@PORT for every worker and PS host")  # fmt: skip
                group = min(set(range(FLOOD_GROUP + 1, FLOOD_GROUP + 2 + len(self._groups))) - set(self._groups.values()))
                self.runtime.write(*self._job_updates(INSERT, entry, group))
            except BaseException:
                self.table.remove(spec.job)
                raise
            self._groups[spec.job] = group
        return {"job": spec.job, "slot_base": entry.slot_base, "span": entry.span or self.settings.pool}

    def deregister(self, job: int) -> None:
        """Table entries first (the job's packets are then unregistered), then its slots and redirects."""
        with self._lock:
            entry = self.table.check_removal(job)  # registered, and the caller may remove it
            updates = self._job_updates(DELETE, entry, self._groups[job])
            self.runtime.write(*updates[:-1])  # every table entry; the group goes last
            self._forget_slots(job)
            self.runtime.write(updates[-1])
            self.table.remove(job)
            del self._groups[job]

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry.to_json() for entry in self.table.entries.values()]

    def counters(self) -> dict[str, int]:
        with self._lock:
            counts = {"rx_packets": self.registers.counter("ina_rx", 0), "tx_packets": self.registers.counter("ina_tx", 0)}
            counts |= {name: self.registers.counter("ina_outcomes", i) for i, name in enumerate(OUTCOMES)}
            counts |= {name: self.registers.counter("ina_events", i) for i, name in enumerate(EVENTS)}
        return {name: counts[name] for name in COUNTERS}

    def waiting(self) -> Waiting:
        """The partials in the slot registers (a slot holds one while some worker is missing), for the watch."""
        with self._lock:
            ids, seqs, missing = (np.array(self.registers.registers(f"ina_{name}"), dtype=np.uint64)
                                  for name in ("key_id", "key_seq", "missing"))  # fmt: skip
            full = {job: entry.spec.full_bitmap for job, entry in self.table.entries.items()}
        held = np.flatnonzero(missing)
        job = (ids[held] & np.uint64(0xFFFF)).astype(np.int64)
        present = np.array([full.get(j, 0) for j in job.tolist()], dtype=np.uint64) & ~missing[held]
        return Waiting(job, ids[held] << np.uint64(32) | seqs[held], present.astype(np.uint32))

    def slots(self) -> list[dict[str, Any]]:
        """The slots holding a partial or a redirect, as the software switch's `Slots.describe` gives
        them (without `touched`); a slot holds a partial when some worker is missing, and `key` is
        None for a free one, whatever the key registers still hold."""
        with self._lock:
            regs = {name: self.registers.registers(f"ina_{name}") for name in
                    ("key_id", "key_seq", "missing", "prio", "value", "redirect_id", "redirect_seq")}  # fmt: skip
        words, described = self.settings.words, []
        for slot in range(self.settings.pool):
            missing, redirect = regs["missing"][slot], regs["redirect_id"][slot]
            if not (missing or redirect):
                continue
            key_id = regs["key_id"][slot]
            entry = self.table.entries.get(key_id & 0xFFFF)
            full = entry.spec.full_bitmap if entry else 0
            described.append({
                "slot": slot,
                "key": _key(key_id, regs["key_seq"][slot]) if missing else None,
                "prio": regs["prio"][slot],
                "bitmap": full & ~missing,
                "value": regs["value"][slot * words : (slot + 1) * words],
                "redirect": _key(redirect, regs["redirect_seq"][slot]) if redirect else None,
            })  # fmt: skip
        return described

    # -- the idle sweep ---------------------------------------------------------------------

    def tick(self, now: float) -> int:
        """Sweep every partial whose registers have not changed for `slot_timeout`; returns how many were sent."""
        with self._lock:
            ids, seqs, missing, touched = (self.registers.registers(name) for name in
                                           ("ina_key_id", "ina_key_seq", "ina_missing", "ina_touched"))  # fmt: skip
            held = {s for s, m in enumerate(missing) if m}
            for slot in set(self._seen) - held:
                del self._seen[slot]
            sent = 0
            for slot in sorted(held):
                version = (ids[slot], seqs[slot], missing[slot], touched[slot])
                seen = self._seen.get(slot)
                if seen is None or seen[0] != version:
                    self._seen[slot] = (version, now)
                elif now - seen[1] >= self.settings.slot_timeout:
                    sent += self._sweep(slot, *version[:3])
                    del self._seen[slot]
            return sent

    def _sweep(self, slot: int, key_id: int, seq: int, missing: int) -> int:
        entry = self.table.entries.get(key_id & 0xFFFF)
        if entry is None:
            return 0
        flags = Flag.MAX if key_id & KEY_MAX else Flag.NONE
        header = Header(Kind.SWEEP, job=key_id & 0xFFFF, seq=seq, flags=flags, slot=slot, lane_bits=32,
                        bitmap=entry.spec.full_bitmap & ~missing)  # fmt: skip
        self.runtime.packet_out(self._frame(header.pack()))
        return 1

    def _frame(self, payload: bytes) -> bytes:
        """An Ethernet/IPv4/UDP frame from and to the switch itself, carrying `payload` to INA_PORT."""
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether

        return bytes(Ether(src=self.mac, dst=self.mac) / IP(src=self.ip, dst=self.ip) / UDP(sport=INA_PORT, dport=INA_PORT) / payload)

    # -- tables ----------------------------------------------------------------------------

    def _job_updates(self, kind: int, entry: JobEntry, group: int) -> list:
        """Every entity of a job as the table granted it: its table entries, then its multicast group (last)."""
        info, spec = self.info, entry.spec
        ps = spec.ps
        assert ps is not None
        entries = [info.entry("ina_jobs", {"job": spec.job}, "ina_job", {
            "full": spec.full_bitmap, "fanin": spec.fanin, "slot_base": entry.slot_base,
            "span_mask": (entry.span or self.settings.pool) - 1, "priority_cap": spec.priority_cap,
            "lane_bits": spec.lane_bits, "ps_ip": _ip(ps.host), "ps_port": ps.port, "group": group})]  # fmt: skip
        entries += [info.entry("ina_workers", {"job": spec.job, "rank": rank, "src": _ip(w.host), "src_port": w.port}, "NoAction", {})
                    for rank, w in enumerate(spec.workers)]  # fmt: skip
        entries.append(info.entry("ina_victims", {"job": spec.job}, "ina_victim", {
            "full": spec.full_bitmap, "lane_bits": spec.lane_bits, "ps_ip": _ip(ps.host), "ps_port": ps.port}))  # fmt: skip
        members = [*spec.workers, ps]
        entries += [info.entry("ina_replicas", {"group": group, "replica": rid}, "ina_replica", {
            "ip": _ip(e.host), "port": e.port, "mac": _mac(self.routes[e.host].mac)}) for rid, e in enumerate(members)]  # fmt: skip
        updates = [self.runtime.table_update(kind, e) for e in entries]
        replicas = [(self.routes[e.host].port, rid) for rid, e in enumerate(members)]
        return updates + [self.runtime.group_update(kind, group, replicas)]

    def _forget_slots(self, job: int) -> None:
        """Free every slot and clear every redirect that holds `job`, so a reused job id meets no stale state."""
        regs = self.registers
        ids, redirects = regs.registers("ina_key_id"), regs.registers("ina_redirect_id")
        for slot, key in enumerate(ids):
            if key and key & 0xFFFF == job:
                for name in ("ina_key_id", "ina_key_seq", "ina_missing"):
                    regs.write_register(name, slot, 0)
        for slot, key in enumerate(redirects):
            if key and key & 0xFFFF == job:
                for name in ("ina_redirect_id", "ina_redirect_seq"):
                    regs.write_register(name, slot, 0)
        self._seen.clear()
