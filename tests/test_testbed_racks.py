"""`ina testbed` with racks (topology.racks), on a real Mininet network (root, Debian's mininet package): a leaf
per rack, a spine, shaped uplinks between them. A racked THC job through one switch at the spine's place ends
with the collective's parameters, bit for bit, and the uplinks' counters show each rack's workers' streams
crossing its uplink; the run leaves nothing behind."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_testbed import _run_to_the_end, assert_nothing_left, needs_testbed

RACKS = [[0], [1, 2]]
"""Uneven racks: one worker under leaf 0, two under leaf 1."""


def racked_run(name: str, *jobs: dict, **top) -> dict:
    """A run file's document: 3 worker hosts in RACKS, 100 Mbit/s host links, 50 Mbit/s uplinks, tiny THC jobs."""
    common = {"workers": 3, "batch": 63, "steps": 20, "hook": "thc"}
    return {"name": name, "timeout": 300, "topology": {"racks": RACKS, "link": {"bw": 100}, "uplink": {"bw": 50}},
            "jobs": [common | job for job in jobs], **top}  # fmt: skip


def same_parameters(out: Path, policy: str, *names: str) -> bool:
    import torch

    first, *others = (torch.load(out / policy / name / "params.pt") for name in names)
    return all(first.keys() == other.keys() and all(torch.equal(first[k], other[k]) for k in first) for other in others)


@needs_testbed
def test_a_racked_job_through_one_switch_at_the_spine_trains_as_the_collective_and_each_worker_crosses_its_uplink(tmp_path):
    run = racked_run("racks", {"name": "one_switch", "transport": "switch", "levels": 1},
                     {"name": "collective", "transport": "collective", "phase": 1})  # fmt: skip
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    assert same_parameters(out, "esa", "one_switch", "collective")
    result = json.loads((out / "results.json").read_text())
    jobs = {row["job"]: row for row in result["jobs"]}
    assert jobs["one_switch"]["params_sha256"] == jobs["collective"]["params_sha256"] and jobs["one_switch"]["levels"] == 1
    counters = result["counters"]["esa"]
    assert counters["spine"]["completed"] > 0 and counters["spine"]["unregistered"] == 0, counters["spine"]
    assert all(counters[leaf].get("aggregated", 0) == 0 for leaf in ("leaf0", "leaf1"))  # its workers send past the leaves
    # Rack 1's two workers each send their own stream up its uplink, rack 0's one worker one.
    up = [rack["up"] for rack in jobs["one_switch"]["uplinks"]]
    assert 1.6 < up[1] / up[0] < 2.4, jobs["one_switch"]["uplinks"]
    assert all(rack["up"] > 0 and rack["down"] > 0 for rack in jobs["collective"]["uplinks"])
    with (out / "uplinks.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {(r["job"], int(r["step"]), int(r["rack"])) for r in rows} == {(j, s, r) for j in jobs for s in range(20) for r in (0, 1)}
    assert "one_switch (the spine alone) bytes a step on each rack's uplink" in printed, printed
    created = assert_nothing_left(out, interfaces)
    assert {f"{created['tag']}{node}" for node in ("lf0", "lf1", "sp", "ps", "w0")} <= set(created["nodes"])


@pytest.mark.parametrize("hosts, message", [([[0, 1], [1, 2]], "worker host 1 is in rack 0 and rack 1"), ([[0], [2]], "[1] are in no rack")])
def test_check_refuses_racks_that_do_not_place_every_host_once(tmp_path, hosts, message):
    import subprocess
    import sys

    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(racked_run("bad", {"name": "a"}) | {"topology": {"racks": hosts}}))
    done = subprocess.run([sys.executable, "-m", "ina.cli", "testbed", str(path), "--check"], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr
