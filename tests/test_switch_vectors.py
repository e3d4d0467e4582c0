"""Replay the shared test vectors (tests/vectors/switch_*.json) against the switch core.

The BMv2 and Tofino tests replay the same files against the P4 programs."""

import importlib.util
import json
from pathlib import Path

import pytest
from switch_support import path, register_vector_jobs  # noqa: F401 (path: the fixture replaying each vector on both cores)

from ina.net.node import Datagram
from ina.switch import SwitchConfig
from ina.switch.native import switch_core

VECTORS = Path(__file__).parent / "vectors"
FILES = sorted(VECTORS.glob("switch_*.json"))


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def test_the_vectors_cover_every_scenario_the_spec_names():
    names = {json.loads(f.read_text())["name"] for f in FILES}
    assert {"claim_complete", "duplicate", "resend_flush", "collision_redirect", "esa_preemption", "fcfs_collision",
            "stale", "flush", "drops", "max", "sweep"} <= names  # fmt: skip


@pytest.mark.parametrize("vector_file", FILES, ids=[f.stem for f in FILES])
def test_replaying_a_vector_gives_exactly_its_output_packets_counters_and_slots(vector_file, path):
    vector = json.loads(vector_file.read_text())
    core = switch_core(SwitchConfig(**vector["config"]), path)
    register_vector_jobs(core, vector)
    for number, step in enumerate(vector["steps"]):
        if step.get("tick"):
            out = core.tick(step["time"])
        else:
            packet = step["input"]
            out = core.receive([Datagram(bytes.fromhex(packet["hex"]), _addr(packet["src"]))], step["time"])
        assert [{"dst": "%s:%d" % d.addr, "hex": d.data.hex()} for d in out] == step["output"], f"step {number}: {step['note']}"
    assert core.counters() == vector["counters"]
    assert all(core.counters()[name] == value for name, value in vector["expect"].items())
    slots = core.slots
    held = [s for s in range(core.settings.pool) if slots.key[s] or slots.redirect[s]]
    assert [{"slot": s} | slots.describe(s) for s in held] == vector["slots"]


def test_the_checked_in_vectors_are_what_the_generator_writes_now():
    spec = importlib.util.spec_from_file_location("make_switch_vectors", VECTORS / "make_switch_vectors.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    generated = generator.generate()
    assert sorted(generated) == [f.name for f in FILES]
    for name, document in generated.items():
        assert json.loads(json.dumps(document)) == json.loads((VECTORS / name).read_text()), f"regenerate {name}"
