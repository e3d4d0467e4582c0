"""Replaying a p4testgen case of the TNA program through the software switch.

A case (tests/vectors/p4testgen/, written by make_p4testgen_cases.py) is the Tofino program's
table entries and initial register values, one input frame, and the frame p4testgen says the
program sends (or none). `replay` sets the software switch to the same state, gives it the frame's
UDP datagram, and says what it sent; `skip_reason` says why a case has no software equivalent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ina.control import Endpoint, JobSpec
from ina.net.node import Datagram
from ina.protocol import INA_PORT, HEADER_LEN, Kind
from ina.switch import SwitchConfig
from ina.switch.core import SwitchCore
from ina.switch.state import JobEntry, make_keys

RECIRC_PORT = 68
KEY_VALID, KEY_MAX = 1 << 17, 1 << 16


class NoEquivalent(Exception):
    """The case has no counterpart in the software switch: `why` names the kind of case, the
    message the detail."""

    def __init__(self, why: str, detail: str = "") -> None:
        super().__init__(f"{why}: {detail}" if detail else why)
        self.why = why


def short(name: str) -> str:
    """A BfRt name without its pipe and control prefixes (what the controller writes)."""
    return name.rsplit(".", 1)[-1]


@dataclass
class Frame:
    """An Ethernet frame as far as the switch reads it. Checksums are the hosts' concern, not the
    aggregation's: the replay gives the software switch the datagram as if it arrived intact."""

    raw: bytes
    ina: bool = False
    src: tuple[str, int] = ("", 0)
    dst: tuple[str, int] = ("", 0)
    payload: bytes = b""
    consistent: bool = True  # the IPv4 and UDP lengths agree with the frame (else the kernel drops it)

    @classmethod
    def parse(cls, raw: bytes) -> Frame:
        frame = cls(raw)
        if len(raw) < 42 or raw[12:14] != b"\x08\x00" or raw[14] != 0x45 or raw[23] != 17 or int.from_bytes(raw[20:22], "big") & 0x1FFF:
            return frame
        ip_len, udp_len = int.from_bytes(raw[16:18], "big"), int.from_bytes(raw[38:40], "big")
        frame.ina = int.from_bytes(raw[36:38], "big") == INA_PORT
        frame.src = (".".join(map(str, raw[26:30])), int.from_bytes(raw[34:36], "big"))
        frame.dst = (".".join(map(str, raw[30:34])), int.from_bytes(raw[36:38], "big"))
        frame.consistent = ip_len == 20 + udp_len and len(raw) >= 14 + ip_len and udp_len >= 8
        frame.payload = raw[42 : 14 + ip_len] if frame.consistent else raw[42:]
        return frame


@dataclass
class Case:
    """One generated test, as make_p4testgen_cases.py stored it."""

    name: str
    entries: list[dict[str, Any]]
    registers: list[dict[str, Any]]
    send: dict[str, Any]
    expect: dict[str, Any] | None

    def table(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if short(e["table"]) == name and e.get("key")]

    def default(self, name: str) -> dict[str, Any] | None:
        return next((e for e in self.entries if short(e["table"]) == name and not e.get("key")), None)

    def register(self, name: str, words: int, pool: int) -> dict[int, dict[str, int]]:
        """Initial values of register `name` by index, fields by short name (f1 for a scalar)."""
        cells: dict[int, dict[str, int]] = {}
        for reg in self.registers:
            if short(reg["register"]) == name:
                cells[reg["index"]] = {short(k): v for k, v in reg["fields"].items()}
        return cells


def _ip(number: int) -> str:
    return ".".join(str((number >> s) & 0xFF) for s in (24, 16, 8, 0))


def switch_for(case: Case, words: int, pool: int) -> tuple[SwitchCore, set[int]]:
    """The software switch in the case's state, and the ports the control plane's packets enter at."""
    identity = case.default("ina_switch")
    settings = identity["params"] if identity else {}
    if settings.get("held_missing", 0):
        raise NoEquivalent("atp (held_missing): its returns are the level table's entries, which the BMv2 tests replay")
    if any(short(e["action"] or "") != "ina_only" or e["params"]["release"] for e in case.table("ina_levels")):
        raise NoEquivalent("a level table entry of a racked job or of atp's returns: the BMv2 tests replay those")
    queues = "priority" if settings.get("priority_queues", 1) else "fifo"
    core = SwitchCore(SwitchConfig(pool=pool, words=words, policy="esa" if settings.get("esa", 1) else "fcfs", queues=queues))
    cpu_ports = {e["key"]["port"] for e in case.table("ina_cpu_ports")}
    for entry in case.table("ina_jobs"):
        if short(entry["action"] or "") == "ina_job":
            _register(core, case, entry["key"]["job"], entry["key"]["op"], entry["params"], pool)
    _set_slots(core, case, words, pool)
    return core, cpu_ports


def _register(core: SwitchCore, case: Case, job: int, op: int, p: dict[str, int], pool: int) -> None:
    fanin, full, span = p["fanin"], p["full"], p["span_mask"] + 1
    if (p["key_id"], p["key_id_other_op"]) != (KEY_VALID | op * KEY_MAX | job, KEY_VALID | (1 - op) * KEY_MAX | job):
        raise NoEquivalent("a job entry no registration writes", f"job {job}: key ids {p['key_id']:#x}, {p['key_id_other_op']:#x}")
    if not 1 <= fanin <= 32 or full != (1 << fanin) - 1:
        raise NoEquivalent("a job entry no registration writes", f"job {job}: full {full:#x}, fanin {fanin}")
    if span & (span - 1) or span > pool or p["lane_bits"] not in (8, 16, 32) or p["ps_ip"] == 0:
        raise NoEquivalent("a job entry no registration writes", f"job {job}: span {span}, lane_bits {p['lane_bits']}, PS {p['ps_ip']}")
    slot_base = -p["neg_slot_base"] % pool
    if p["neg_slot_base"] >= pool or (span < pool and slot_base % span):
        raise NoEquivalent("a job entry no registration writes", f"job {job}: -slot_base {p['neg_slot_base']}")
    workers = {e["key"]["rank"]: Endpoint(_ip(e["key"]["src"]), e["key"]["src_port"]) for e in case.table("ina_workers")
               if e["key"]["job"] == job and short(e["action"] or "") == "ina_worker"}  # fmt: skip
    if any(rank >= fanin for rank in workers) or any(w.port == 0 for w in workers.values()):
        raise NoEquivalent("a worker entry no registration writes", f"job {job}")
    # ranks p4testgen gave no entry: addresses no packet of the case comes from
    ranks = [workers.get(r, Endpoint(f"192.0.2.{r + 1}", 40000 + job)) for r in range(fanin)]
    for source in case.table("ina_sources"):  # the PS's, or one that says what a miss does
        from_ps = (source["key"]["src"], source["key"]["src_port"]) == (p["ps_ip"], p["ps_port"])
        if source["key"]["job"] == job and source["params"] != ({"ps": 1, "up": 1} if from_ps else {"ps": 0, "up": 0}):
            raise NoEquivalent("a source entry no registration writes", f"job {job}: {source['key']} {source['params']}")
    for victim in case.table("ina_victims"):
        if victim["key"]["job"] == job and short(victim["action"] or "") == "ina_victim" and victim["params"] != \
                {"full": full, "lane_bits": p["lane_bits"], "ps_ip": p["ps_ip"], "ps_port": p["ps_port"], "flags": 0}:  # fmt: skip
            raise NoEquivalent("a victim entry that disagrees with its job entry", f"job {job}")
    try:
        spec = JobSpec(job, tuple(ranks), window=min(span, pool), lane_bits=p["lane_bits"], priority_cap=p["priority_cap"],
                       ps=Endpoint(_ip(p["ps_ip"]), p["ps_port"] or 1))  # fmt: skip
    except ValueError as error:
        raise NoEquivalent("a job entry no registration writes", f"job {job}: {error}") from None
    core.table.entries[job] = JobEntry(spec, slot_base, span if span < pool else None)
    core.table._rebuild()


def _set_slots(core: SwitchCore, case: Case, words: int, pool: int) -> None:
    names = ("key_id", "key_id_copy", "key_seq", "key_seq_copy", "missing", "missing_copy", "prio", "redirect")
    regs = {name: case.register(f"ina_{name}", words, pool) for name in names}
    slots = core.slots
    for s in range(pool):
        get = lambda name, f="f1": regs[name].get(s, {}).get(f, 0)  # noqa: E731
        missing, key_id = get("missing"), get("key_id")
        for name in ("key_id", "key_seq", "missing"):
            if get(name) != get(f"{name}_copy"):
                raise NoEquivalent("registers the switch never holds (a copy unlike its register)", f"slot {s}: {name}")
        if missing:
            job = core.table.entries.get(key_id & 0xFFFF)
            if key_id & ~(KEY_VALID | KEY_MAX | 0xFFFF) or not key_id & KEY_VALID or job is None or missing & ~job.spec.full_bitmap:
                raise NoEquivalent("registers the switch never holds", f"slot {s}: key {key_id:#x}, missing {missing:#x}")
            if get("prio") > 255:
                raise NoEquivalent("registers the switch never holds", f"slot {s}: prio {get('prio')}")
            slots.key[s] = make_keys(np.array([key_id & 0xFFFF]), np.array([get("key_seq")]), np.array([bool(key_id & KEY_MAX)]))[0]
            slots.bitmap[s] = job.spec.full_bitmap & ~missing
            slots.prio[s] = get("prio")
            slots.value[s] = [case.register(f"ina_value_{i}", words, pool).get(s, {}).get("f1", 0) for i in range(words)]
        redirect_id = get("redirect", "hi")
        if redirect_id:
            if redirect_id & ~(KEY_VALID | KEY_MAX | 0xFFFF) or not redirect_id & KEY_VALID:
                raise NoEquivalent("registers the switch never holds", f"slot {s}: redirect {redirect_id:#x}")
            slots.redirect[s] = make_keys(np.array([redirect_id & 0xFFFF]), np.array([get("redirect", "lo")]),
                                          np.array([bool(redirect_id & KEY_MAX)]))[0]  # fmt: skip


def replay(case: Case, words: int, pool: int) -> list[Datagram]:
    """What the software switch sends for the case's frame, or NoEquivalent."""
    if case.send["port"] == RECIRC_PORT:
        raise NoEquivalent("a frame on the recirculation port: a later pass of the program's own packets")
    frame = Frame.parse(bytes.fromhex(case.send["hex"]))
    if not frame.ina:
        raise NoEquivalent("plain Ethernet forwarding, which the software switch does not do")
    core, cpu_ports = switch_for(case, words, pool)
    if case.send["port"] in cpu_ports and len(frame.payload) > 2 and frame.payload[2] == Kind.SWEEP:
        raise NoEquivalent("a SWEEP from the control plane's port: the software switch sweeps by its own timer")
    if not frame.consistent:
        return []  # the kernel would drop it before the software switch saw it
    return core.receive([Datagram(frame.payload, frame.src)], 0.0)


def expected(case: Case) -> list[tuple[tuple[str, int], bytes, bytes]] | None:
    """The TNA program's output as (destination, UDP payload, mask), or None where it is a later pass."""
    if case.expect is None:
        return []
    if case.expect["port"] == RECIRC_PORT:
        return None
    raw = bytes.fromhex(case.expect["hex"])
    mask = bytearray(b"\xff" * len(raw))
    for start, length in case.expect.get("masks", []):
        mask[start : start + length] = bytes(length)
    frame = Frame.parse(raw)
    return [(frame.dst, frame.payload, bytes(mask[42 : 42 + len(frame.payload)]))]


def sent_result(datagrams: list[Datagram]) -> bool:
    return any(len(d.data) >= HEADER_LEN and d.data[2] == Kind.RESULT for d in datagrams)
