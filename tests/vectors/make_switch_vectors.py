"""Generate the shared switch test vectors: `python tests/vectors/make_switch_vectors.py`.

Each scenario drives the reference software switch packet by packet and records every
input (source, time, bytes) with the exact packets it produced (destination, bytes), plus
the configuration, the job table, the final counters and the final non-empty slots.
tests/test_switch_vectors.py replays them against the core; the BMv2 and Tofino tests
replay the same files against the P4 programs (addresses and registers named as here).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from switch_support import Rig, job_spec, worker_addr  # noqa: E402

from ina.net.node import Datagram  # noqa: E402
from ina.protocol import INA_PORT, Header, Kind  # noqa: E402

SWITCH = f"127.0.0.1:{INA_PORT}"


def _addr(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


class Recorder:
    """A Rig whose every step is written down."""

    def __init__(self, name: str, description: str, policy: str = "esa", pool: int = 8, slot_timeout: float = 1.0) -> None:
        self.name, self.description = name, description
        self.rig = Rig(pool=pool, words=4, policy=policy, slot_timeout=slot_timeout)
        self.steps: list[dict[str, Any]] = []

    def job(self, job: int, workers: int, window: int, **options: int) -> None:
        self.rig.register(job_spec(job, workers=workers, window=window, **options))

    def send(self, datagram: Datagram, note: str, time: float = 0.0) -> None:
        out = self.rig.core.receive([datagram], time)
        self.steps.append({"time": time, "note": note, "input": {"src": _addr(datagram.addr), "hex": datagram.data.hex()},
                           "output": [{"dst": _addr(d.addr), "hex": d.data.hex()} for d in out]})  # fmt: skip

    def tick(self, time: float, note: str) -> None:
        out = self.rig.core.tick(time)
        self.steps.append({"time": time, "note": note, "tick": True, "output": [{"dst": _addr(d.addr), "hex": d.data.hex()} for d in out]})

    def document(self) -> dict[str, Any]:
        core = self.rig.core
        slots = [{"slot": s} | core.slots.describe(s) for s in range(core.settings.pool) if core.slots.key[s] or core.slots.redirect[s]]
        return {"name": self.name, "description": self.description, "switch": SWITCH, "config": core.config(),
                "jobs": [entry.to_json() for entry in core.table.entries.values()], "steps": self.steps, "counters": core.counters(), "slots": slots}  # fmt: skip


def claim_and_complete(r: Recorder) -> None:
    r.job(1, workers=3, window=4)
    r.send(r.rig.data(1, 0, 0, [1, 2, 3, 0xFFFFFFFF], prio=2), "rank 0 claims slot 0")
    r.send(r.rig.data(1, 2, 0, [10, 20, 30, 2]), "rank 2 adds")
    r.send(r.rig.data(1, 1, 0, [100, 200, 300, 0]), "rank 1 completes: RESULT to ranks 0..2, copy to the PS; sums wrap mod 2^32")
    r.send(r.rig.data(1, 1, 1), "chunk 1 claims slot 1 and stays there")


def max_chunk(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    norms = [int(np.float32(v).view(np.uint32)) for v in (2.5, 0.75)]
    r.send(r.rig.data(1, 0, 0, [norms[0], 0, 0, 0], op_max=True), "MAX chunk: float32 bits of rank 0's norm")
    r.send(r.rig.data(1, 1, 0, [norms[1], 0, 0, 0], op_max=True), "completes with the unsigned maximum, lane_bits 32")


def word_edges(r: Recorder) -> None:
    """Words whose sums carry out of bit 31 and out of the word, and maxima that differ in the top
    bit or only below it: a target that steps all K words at once (BMv2's) must keep them apart."""
    r.job(1, workers=3, window=2)
    r.send(r.rig.data(1, 0, 0, [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x40000000]), "SUM: rank 0 claims slot 0")
    r.send(r.rig.data(1, 1, 0, [0x00000001, 0x80000000, 0xFFFFFFFF, 0x40000000]), "rank 1 adds: carries out of bit 31")
    r.send(r.rig.data(1, 2, 0, [0x80000000, 0x00000001, 0x00000002, 0x80000000]), "rank 2 completes: every word wraps")
    r.send(r.rig.data(1, 0, 1, [0x80000000, 0x7FFFFFFF, 0xFFFFFFFE, 5], op_max=True), "MAX: rank 0 claims slot 1")
    r.send(r.rig.data(1, 1, 1, [0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 5], op_max=True), "rank 1: top bits differ both ways")
    r.send(r.rig.data(1, 2, 1, [0x00000001, 0xFFFFFFFF, 0x7FFFFFFF, 4], op_max=True), "rank 2 completes: maxima word by word")
    r.send(r.rig.data(1, 0, 2, [0xFFFFFFFF, 0x80000000, 1, 0x7FFFFFFF]), "SUM chunk 2: rank 0 claims slot 2")
    r.send(r.rig.data(1, 1, 2, [0x00000002, 0x80000000, 0xFFFFFFFF, 1]), "rank 1 adds; the partial stays in its slot")


def duplicate(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    r.send(r.rig.data(1, 0, 0, [5, 5, 5, 5]), "claim")
    r.send(r.rig.data(1, 0, 0, [5, 5, 5, 5]), "network duplicate of a first transmission: dropped")
    r.send(r.rig.data(1, 1, 0, [1, 1, 1, 1]), "completes with rank 0 counted once")


def resend_flush(r: Recorder) -> None:
    r.job(1, workers=3, window=4)
    r.send(r.rig.data(1, 0, 0, [1, 1, 1, 1], prio=3), "claim")
    r.send(r.rig.data(1, 1, 0, [2, 2, 2, 2]), "add")
    r.send(r.rig.data(1, 0, 0, [1, 1, 1, 1], resend=True), "RESEND of a held contribution: PARTIAL to the PS, slot freed, redirect set")
    r.send(r.rig.data(1, 2, 0, [4, 4, 4, 4]), "the chunk's late packet follows its partial to the PS")
    r.send(r.rig.data(1, 1, 1, [7, 7, 7, 7], resend=True), "RESEND on a free slot: forwarded to the PS (it holds any result)")
    r.send(r.rig.data(1, 0, 2, [1, 1, 1, 1]), "claim slot 2")
    r.send(r.rig.data(1, 1, 2, [1, 1, 1, 1], resend=True), "RESEND whose contribution the slot lacks: added")


def collision_redirect(r: Recorder) -> None:
    r.job(1, workers=2, window=4)
    r.job(2, workers=2, window=2)  # pool 4: job 2's window overlaps job 1's (both start at slot 0)
    r.send(r.rig.data(1, 0, 0, [1, 1, 1, 1], prio=4), "job 1 claims slot 0")
    r.send(r.rig.data(2, 0, 4, [2, 2, 2, 2], prio=4), "job 2's chunk 4, slot 0, equal priority: collision, forwarded, redirect")
    r.send(r.rig.data(1, 1, 0, [1, 1, 1, 1]), "job 1 completes; the slot is free")
    r.send(r.rig.data(2, 1, 4, [3, 3, 3, 3]), "job 2's chunk follows to its PS instead of claiming: no split aggregation")
    r.send(r.rig.data(2, 0, 5, [1, 1, 1, 1], prio=9), "job 2's chunk 5 claims the free slot 1")
    r.send(r.rig.data(1, 1, 1, [1, 1, 1, 1], prio=9, resend=True), "a RESEND meeting another job's chunk: forwarded")


def preemption(r: Recorder) -> None:
    r.job(1, workers=2, window=4)
    r.job(2, workers=2, window=2, priority_cap=5)  # pool 4: both windows start at slot 0
    r.send(r.rig.data(1, 0, 0, [1, 2, 3, 4], prio=1), "job 1 claims slot 0 with priority 1")
    r.send(r.rig.data(2, 0, 4, [9, 9, 9, 9], prio=7), "job 2, priority 7 capped at 5 > 1: esa preempts (job 1's PARTIAL to its PS); fcfs collides")
    r.send(r.rig.data(1, 1, 0, [4, 3, 2, 1]), "esa: job 1's late packet follows its partial; fcfs: job 1 completes")
    r.send(r.rig.data(2, 1, 4, [1, 1, 1, 1]), "esa: job 2 completes in the switch; fcfs: job 2's packet follows its chunk to the PS")


def stale_and_straggler(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    r.send(r.rig.data(1, 0, 3, [3, 3, 3, 3], prio=2), "a partial of chunk 3")
    r.send(r.rig.data(1, 1, 11, [5, 5, 5, 5]), "chunk 11 (same slot, newer): chunk 3's partial is stale, PARTIAL to the PS, claim")
    r.send(r.rig.data(1, 1, 3, [3, 3, 3, 3]), "chunk 3's old straggler: forwarded")
    r.send(r.rig.data(1, 0, 19, [1, 1, 1, 1], resend=True), "a RESEND of another chunk of the job: forwarded")


def flush_requests(r: Recorder) -> None:
    r.job(1, workers=3, window=4)
    r.send(r.rig.data(1, 0, 0, [6, 6, 6, 6], prio=2), "claim")
    r.send(r.rig.flush(1, 0), "FLUSH from the PS for the chunk in the slot: PARTIAL, slot freed, redirect")
    r.send(r.rig.flush(1, 1), "FLUSH for a chunk not in its slot: only the redirect")
    r.send(r.rig.data(1, 2, 1, [1, 1, 1, 1]), "its packets now go to the PS")
    r.send(r.rig.flush(1, 2, src=worker_addr(1, 0)), "FLUSH from a worker, not the PS: dropped, unregistered")


def drops(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    good = r.rig.data(1, 0, 0)
    r.send(Datagram(good.data[:12], good.addr), "shorter than the header: malformed")
    r.send(Datagram(b"\xa8" + good.data[1:], good.addr), "wrong magic: malformed")
    r.send(Datagram(good.data + b"\0\0\0\0", good.addr), "payload too long: malformed")
    r.send(r.rig.data(1, 0, 0, bitmap=3), "DATA bitmap not 1 << rank: malformed")
    r.send(Datagram(Header(Kind.RESULT, job=1, seq=0, lane_bits=8, bitmap=3).pack(bytes(16)), good.addr), "a RESULT from a worker: unexpected")
    r.send(Datagram(Header(Kind.DATA, job=9, seq=0, rank=0, bitmap=1, lane_bits=8).pack(bytes(16)), good.addr), "unknown job: unregistered")
    r.send(r.rig.data(1, 0, 0, src=("127.0.0.1", 9)), "a registered rank from the wrong address: unregistered")
    r.send(r.rig.data(1, 2, 0, bitmap=4), "rank >= n: unregistered")
    r.send(r.rig.data(1, 0, 0, slot=5), "slot != (slot_base + seq) mod P: bad_slot")
    r.send(r.rig.data(1, 0, 0, index_bits=4), "indices cannot be summed in the switch: bad_format")
    r.send(r.rig.data(1, 0, 0, lane_bits=16), "lane_bits other than the job's: bad_format")
    r.send(good, "the state is untouched: a valid packet claims as usual")


def sweep(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    r.send(r.rig.data(1, 0, 0, [8, 8, 8, 8]), "a partial whose peer never comes", time=1.0)
    r.tick(1.4, "before slot_timeout: nothing")
    r.tick(1.5, "idle for slot_timeout: PARTIAL to the PS, slot freed, redirect")


def single_worker(r: Recorder) -> None:
    r.job(1, workers=2, window=4)
    r.job(2, workers=1, window=2)  # pool 4: both windows start at slot 0
    r.send(r.rig.data(1, 0, 0, [1, 1, 1, 1], prio=1), "job 1 claims slot 0 with priority 1")
    r.send(r.rig.data(2, 0, 4, [5, 6, 7, 8], prio=9), "job 2 has one worker: its chunk would complete at once, so it collides instead of preempting")
    r.send(r.rig.data(2, 0, 5, [9, 9, 9, 9]), "a one-worker chunk on a free slot claims and completes at once")
    r.send(r.rig.data(1, 1, 0, [2, 2, 2, 2]), "job 1's chunk was never evicted: it completes in the switch")


def slot_reuse(r: Recorder) -> None:
    r.job(1, workers=2, window=2)
    r.job(2, workers=2, window=8)  # pool 8: job 1 holds a partition of 2, so job 2 slides over the whole pool (from slot 0)
    norm = int(np.float32(1.5).view(np.uint32))
    r.send(r.rig.data(1, 0, 0, [norm, 0, 0, 0], op_max=True), "a MAX chunk claims slot 0")
    r.send(r.rig.data(1, 1, 0, [norm, 0, 0, 0], op_max=True), "and completes: the slot is free")
    r.send(r.rig.data(1, 0, 8, [1, 2, 3, 4]), "a SUM chunk of the job takes the free slot 0")
    r.send(r.rig.data(1, 1, 8, [4, 3, 2, 1]), "and completes")
    r.send(r.rig.data(1, 0, 8, [1, 2, 3, 4]), "a late duplicate of that chunk claims the free slot (a harmless partial)")
    r.send(r.rig.data(1, 1, 16, [7, 7, 7, 7]), "the job's next chunk there replaces it as stale: PARTIAL to the PS")
    r.send(r.rig.data(1, 0, 0, [norm, 0, 0, 0], op_max=True), "a duplicate of an older chunk: straggler")
    r.send(r.rig.data(1, 0, 16, [1, 1, 1, 1]), "chunk 16 completes")
    r.send(r.rig.data(2, 0, 8, [3, 3, 3, 3]), "another job's chunk takes the slot its last chunk left free")
    r.send(r.rig.data(1, 0, 9, [1, 1, 1, 1], resend=True), "a RESEND of a chunk not in its free slot: forwarded")


def short_chunks(r: Recorder) -> None:
    r.job(1, workers=2, window=4)
    good = r.rig.data(1, 0, 1, [1, 2])
    r.send(r.rig.data(1, 0, 0, [int(np.float32(2.0).view(np.uint32))], op_max=True), "a MAX chunk of one word claims slot 0")
    r.send(r.rig.data(1, 1, 0, [int(np.float32(3.0).view(np.uint32))], op_max=True), "completes: a one-word RESULT")
    r.send(good, "a bucket's tail of 2 words claims slot 1")
    r.send(r.rig.data(1, 1, 1, [5, 6, 7]), "the same chunk cut into 3 words: bad_format, the slot keeps its 2")
    r.send(Datagram(good.data + b"\0\0", good.addr), "a payload not of whole words: malformed")
    r.send(Datagram(good.data[:20], good.addr), "a DATA of no words: malformed")
    r.send(r.rig.data(1, 1, 1, [10, 20]), "completes: a 2-word RESULT")
    r.send(r.rig.data(1, 0, 2, [3, 3, 3]), "chunk 2, 3 words, claims slot 2")
    r.send(r.rig.data(1, 0, 2, [3, 3, 3], resend=True), "its RESEND flushes a 3-word PARTIAL to the PS")
    r.send(r.rig.data(1, 1, 2, [4, 4, 4]), "the late packet follows it to the PS, as it came")


Scenario = tuple[Callable[[Recorder], None], str, dict[str, Any], dict[str, int]]
SCENARIOS: dict[str, Scenario] = {  # name: (steps, description, switch options, counters it must produce)
    "claim_complete": (claim_and_complete, "Claim, add, complete: RESULT to every worker and a copy to the PS.", {},
                       {"claimed": 2, "aggregated": 2, "completed": 1}),
    "max": (max_chunk, "A MAX chunk (the shared norm): unsigned maximum of float32 bit patterns.", {}, {"completed": 1}),
    "word_edges": (word_edges, "Sums that carry out of bit 31 and wrap, maxima that differ above and below bit 31.", {},
                   {"claimed": 3, "aggregated": 5, "completed": 2}),
    "duplicate": (duplicate, "A network duplicate of a first transmission is dropped.", {}, {"duplicate": 1, "completed": 1}),
    "resend_flush": (resend_flush, "RESENDs: flush of a held contribution, forward on a free slot, add when missing.", {},
                     {"flushed": 1, "redirected": 1, "resend_forwarded": 1, "aggregated": 2}),
    "collision_redirect": (collision_redirect, "Two jobs on one slot, equal priorities: collision and redirect.", {"pool": 4},
                           {"collision": 1, "redirected": 1, "completed": 1, "resend_forwarded": 1}),
    "esa_preemption": (preemption, "ESA: a higher (capped) priority preempts; the victim's packets follow its partial.",
                       {"pool": 4}, {"preempted": 1, "redirected": 1, "completed": 1}),
    "fcfs_collision": (preemption, "The preemption scenario under fcfs: a collision instead.", {"pool": 4, "policy": "fcfs"},
                      {"preempted": 0, "collision": 1, "redirected": 1, "completed": 1}),
    "stale": (stale_and_straggler, "Stale replacement within a job, an old straggler, a RESEND of another chunk.", {},
              {"stale": 1, "straggler": 1, "resend_forwarded": 1}),
    "flush": (flush_requests, "FLUSH requests from the PS, hit and miss; a FLUSH from a worker.", {},
              {"flush_requests": 2, "flush_hits": 1, "redirected": 1, "unregistered": 1}),
    "drops": (drops, "Malformed, unexpected, unregistered, bad_slot and bad_format packets are dropped.", {},
              {"malformed": 4, "unexpected": 1, "unregistered": 3, "bad_slot": 1, "bad_format": 2, "claimed": 1}),
    "single_worker": (single_worker, "A one-worker job collides rather than preempt, and completes at once on a free slot.",
                      {"pool": 4}, {"preempted": 0, "collision": 1, "completed": 2}),
    "slot_reuse": (slot_reuse, "Completed slots are free for the next chunk of the job (either operation), a late "
                   "duplicate, and other jobs.", {}, {"claimed": 5, "stale": 1, "straggler": 1, "completed": 3, "resend_forwarded": 1}),
    "sweep": (sweep, "The idle sweep flushes a partial untouched for slot_timeout.", {"slot_timeout": 0.5}, {"swept": 1}),
    "short_chunks": (short_chunks, "Chunks shorter than K (a MAX, a bucket's tail) and their RESULT and PARTIAL; a chunk "
                     "cut two ways; lengths of no chunk. The software switch's only: the P4 programs parse K words.",
                     {}, {"completed": 2, "bad_format": 1, "malformed": 2, "flushed": 1, "redirected": 1}),
}  # fmt: skip
SHORT_CHUNKS = {"short_chunks"}
"""The scenarios whose chunks are shorter than K: a P4 switch, whose parser takes K words, pads them (docs/protocol.md)."""


def generate() -> dict[str, dict[str, Any]]:
    documents = {}
    for name, (scenario, description, options, expected) in SCENARIOS.items():
        recorder = Recorder(name, description, **options)
        scenario(recorder)
        document = recorder.document()
        missed = {k: (v, document["counters"][k]) for k, v in expected.items() if document["counters"][k] != v}
        if missed:
            raise AssertionError(f"scenario {name} did not do what it says (counter: (expected, got)): {missed}")
        documents[f"switch_{name}.json"] = document | {"expect": expected, "short_chunks": name in SHORT_CHUNKS}
    return documents


def main() -> None:
    for filename, document in generate().items():
        (HERE / filename).write_text(json.dumps(document, indent=1) + "\n")
        print(f"wrote {filename}: {len(document['steps'])} steps")


if __name__ == "__main__":
    main()
