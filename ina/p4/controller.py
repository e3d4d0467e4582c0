"""The P4 switch's control plane: the same ControlTarget as the software switch, on any P4 target.

It loads the compiled program, programs the job tables, multicast groups and routes, reads counters
and slot registers, and does the idle sweep (docs/p4.md, "Control plane"): the data plane has no
timers, so the controller watches each partial's registers and, when one has not changed for
`slot_timeout`, sends a SWEEP packet-out that flushes it only if it is still unchanged. Everything
here is shared by BMv2 and Tofino; what differs is the `Device` it writes through.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable

import numpy as np

from ina.control import JobSpec
from ina.control.watch import Waiting
from ina.p4 import entries
from ina.p4.build import Build, build
from ina.p4.device import CLEARED_ON_REMOVAL, DELETE, EVENTS, INSERT, MODIFY, OUTCOMES, Device
from ina.p4.entries import KEY_MAX, Route
from ina.protocol import INA_PORT, Flag, Header, Kind
from ina.switch.config import SwitchConfig
from ina.switch.core import COUNTERS
from ina.switch.state import Jobs

HELD_FANIN = range(2, 32)
"""The workers of a job under atp on a P4 target: a held result is bit 31 of the slot's `missing` bitmap (p4src/metadata.p4,
HELD), which no worker may have; and one pass sends one packet, where a one-worker chunk evicting its job's held result
would send two (the PARTIAL and its own held RESULT)."""
def _key(key_id: int, seq: int) -> dict[str, Any]:
    return {"job": key_id & 0xFFFF, "seq": seq, "max": bool(key_id & KEY_MAX)}


class P4Switch:
    """A ControlTarget for a switch running ina's P4 program, written through `device`. Thread-safe."""

    role = "switch"
    watch_period = 0.5
    """Seconds between the watch's reads of the slot registers (three register reads of the pool each)."""

    def __init__(self, config: SwitchConfig, device: Device, ip: str, mac: str, routes: Iterable[Route],
                 program: Build | None = None) -> None:  # fmt: skip
        """Load `program` (default: p4src/ built for the device's target, P and K) and program the switch."""
        self.settings = config
        self.ip, self.mac = ip, mac
        self.routes = {route.ip: route for route in routes}
        self.device = device
        self.table = Jobs(config.pool, config.policy)
        self._groups: dict[int, int] = {}
        self._seen: dict[int, tuple[tuple[int, ...], float]] = {}
        self._lock = threading.Lock()
        # under atp the PS takes its RESULT flagged HOLD, unicast, and the group passes its return on to the workers alone
        self._hold = config.policy == "atp"
        self._copies = config.result_copies and not self._hold
        device.load(program or build(config.words, config.pool, device.target))
        forwarding, flood = entries.forwarding(self.routes.values())
        device.write(MODIFY, [entries.identity(ip, mac, config.policy, config.queues)])
        device.take_address(entries.ip_number(ip))
        device.hold_completed(entries.HELD if self._hold else 0)
        device.write(INSERT, [flood, *forwarding, entries.cpu_port(device.cpu_port), *entries.switch_levels(self._hold)])
        device.serve_queues_by_priority({route.port for route in self.routes.values()})

    # -- ControlTarget ---------------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        # Its parser takes K words a chunk: workers pad every DATA to K (docs/protocol.md, section 2).
        target = {"target": self.device.target, "listen": f"{self.ip}:{INA_PORT}", "short_chunks": False}
        return self.settings.to_json() | target

    def register(self, spec: JobSpec) -> dict[str, Any]:
        if self.settings.policy == "atp" and spec.fanin not in HELD_FANIN:
            raise ValueError(f"job {spec.job}: under atp the {self.device.target} program takes jobs of {HELD_FANIN.start}.."
                             f"{HELD_FANIN.stop - 1} workers (a switch's own: at a leaf its rack's, at a spine its racks), got "
                             f"{spec.fanin}; the software switch (--target software) takes every size (docs/p4.md, \"atp\")")  # fmt: skip
        with self._lock:
            entry = self.table.add(spec)
            try:
                unrouted = sorted({e.host for e in (*spec.workers, spec.ps, spec.uplink) if e is not None and e.host not in self.routes})
                if unrouted:
                    raise ValueError(f"job {spec.job}: the switch has no route to {', '.join(unrouted)}; start it with "
                                     "--route IP=MAC@PORT for every worker, PS and spine host")  # fmt: skip
                group = min(set(range(entries.FLOOD_GROUP + 1, entries.FLOOD_GROUP + 2 + len(self._groups))) - set(self._groups.values()))
                job_entries, job_group = entries.job(entry, self.settings.pool, group, self.routes, self._copies, self._hold)
                self._check_levels_fit(spec.job, job_entries)
                self.device.write(INSERT, [*job_entries, job_group])
            except BaseException:
                self.table.remove(spec.job)
                raise
            self._groups[spec.job] = group
        return {"job": spec.job, "slot_base": entry.slot_base, "span": entry.span or self.settings.pool}

    def _check_levels_fit(self, job: int, job_entries: list[entries.TableEntry]) -> None:
        """ValueError where the job's level entries would overflow the level table (p4src/racks.p4)."""
        def levels(items: Iterable[entries.TableEntry]) -> int:
            return sum(item.table == "ina_levels" for item in items)

        used = levels(entries.switch_levels(self._hold))
        used += sum(levels(entries.levels(e.spec, self._hold, self.routes)) for j, e in self.table.entries.items() if j != job)
        if used + levels(job_entries) > entries.LEVEL_ENTRIES:
            raise ValueError(f"job {job}: the switch's level table is full ({used} of its {entries.LEVEL_ENTRIES} entries used: "
                             "a leaf's job takes 4, a spine's 3 (5 under atp), any other job 0 (2 under atp)); deregister a racked job or one under atp first, "
                             "or run this one on another switch")  # fmt: skip

    def deregister(self, job: int) -> None:
        """Table entries first (the job's packets are then unregistered), then its slots and redirects,
        then its multicast group."""
        with self._lock:
            entry = self.table.check_removal(job)  # registered, and the caller may remove it
            job_entries, job_group = entries.job(entry, self.settings.pool, self._groups[job], self.routes, self._copies, self._hold)
            self.device.write(DELETE, job_entries)
            self._forget_slots(job)
            self.device.write(DELETE, [job_group])
            self.table.remove(job)
            del self._groups[job]

    def jobs(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry.to_json() for entry in self.table.entries.values()]

    def counters(self) -> dict[str, int]:
        with self._lock:
            read = self.device.counter
            counts = {"rx_packets": read("rx", 0), "tx_packets": read("tx", 0), "sent_up": read("sent_up", 0)}
            counts |= {name: read("outcomes", i) for i, name in enumerate(OUTCOMES)}
            counts |= {name: read("events", i) for i, name in enumerate(EVENTS)}
        return {name: counts[name] for name in COUNTERS}

    def waiting(self) -> Waiting:
        """The partials in the slot registers (a slot holds one while some worker is missing), for the watch."""
        with self._lock:
            ids, seqs, missing = (np.array(self.device.registers(name), dtype=np.uint64) for name in ("key_id", "key_seq", "missing"))
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
            regs = {name: self.device.registers(name) for name in
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
            ids, seqs, missing, touched = (self.device.registers(name) for name in ("key_id", "key_seq", "missing", "touched"))
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
        self.device.packet_out(self._frame(header.pack()))
        return 1

    def _frame(self, payload: bytes) -> bytes:
        """An Ethernet/IPv4/UDP frame from and to the switch itself, carrying `payload` to INA_PORT."""
        from scapy.layers.inet import IP, UDP
        from scapy.layers.l2 import Ether

        return bytes(Ether(src=self.mac, dst=self.mac) / IP(src=self.ip, dst=self.ip) / UDP(sport=INA_PORT, dport=INA_PORT) / payload)

    def _forget_slots(self, job: int) -> None:
        """Free every slot and clear every redirect that holds `job`, so a reused job id meets no stale state."""
        for names in CLEARED_ON_REMOVAL:
            for slot, key in enumerate(self.device.registers(names[0])):
                if key and key & 0xFFFF == job:
                    for name in names:
                        self.device.write_register(name, slot, 0)
        self._seen.clear()
