"""`ina testbed` with racks (topology.racks), on a real Mininet network (root, Debian's mininet package): a leaf
per rack, a spine, shaped uplinks between them. A racked THC job through one switch at the spine's place ends
with the collective's parameters, bit for bit, and the uplinks' counters show each rack's workers' streams
crossing its uplink; aggregated at two levels it ends with the same parameters while each uplink carries one
stream up, and it survives its spine stopped and started again mid-training; through BMv2 at every leaf and the
spine, on lossy links, it ends as the collective does; the runs leave nothing behind. The two-level tests wait for
the workers' transport to aggregate at two levels (INA_SPINE)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from test_testbed import _run_to_the_end, assert_nothing_left, needs_testbed

from ina.testbed import spec
from ina.testbed.network import why_not
from ina.transport import udp_setup

needs_two_levels = pytest.mark.skipif("spine" not in udp_setup.ENVIRONMENT,
                                      reason="the workers' transport does not aggregate at two levels yet (INA_SPINE)")  # fmt: skip

_BMV2 = why_not(spec.parse({"switch": {"target": "bmv2"}, "jobs": [{}]}))
needs_bmv2 = pytest.mark.skipif(_BMV2 is not None, reason=_BMV2 or "")

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


@needs_testbed
@needs_two_levels
def test_a_racked_job_at_two_levels_trains_as_one_switch_does_with_one_stream_up_each_uplink(tmp_path):
    run = racked_run("levels", {"name": "two_levels", "transport": "switch"},
                     {"name": "one_switch", "transport": "switch", "levels": 1, "phase": 1})  # fmt: skip
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    assert same_parameters(out, "esa", "two_levels", "one_switch")
    result = json.loads((out / "results.json").read_text())
    jobs = {row["job"]: row for row in result["jobs"]}
    assert jobs["two_levels"]["levels"] == 2 and jobs["two_levels"]["params_sha256"] == jobs["one_switch"]["params_sha256"]
    counters = result["counters"]["esa"]
    assert counters["leaf1"]["aggregated"] > 0 and counters["leaf0"]["sent_up"] == counters["leaf1"]["sent_up"] > 0, counters
    # Rack 1's leaf sends its two workers' sum up as one stream: half what they send through one switch.
    two, one = ([rack["up"] for rack in jobs[name]["uplinks"]] for name in ("two_levels", "one_switch"))
    assert 0.4 < two[1] / one[1] < 0.6 and 0.8 < two[0] / one[0] < 1.25, (two, one)
    assert "two_levels (leaves, then the spine) bytes a step" in printed, printed
    assert_nothing_left(out, interfaces)


@needs_testbed
@needs_two_levels
def test_a_two_level_job_goes_on_while_its_spine_is_stopped_and_returns_to_it(tmp_path):
    """faults: the spine stops 3 s into training and starts again (from its state file) at 8 s. The two-level job
    goes on meanwhile (its racks' sums lost on their way up are completed by the PS from its workers' resends,
    or it fails over to the PS), returns to its leaves and the spine, and ends with the collective job's parameters."""
    jobs = ({"name": "collective", "transport": "collective", "hosts": [0, 2, 3]},
            {"name": "two_levels", "transport": "switch", "hosts": [1, 4, 5], "failover": 0.5, "failback": 2})  # fmt: skip
    run = racked_run("spine", *({"steps": 3000} | job for job in jobs), faults=[{"at": 3, "stop": "spine"}, {"at": 8, "start": "spine"}])
    run["topology"]["racks"] = [[0, 1], [2, 3, 4, 5]]
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    assert "stop spine at" in printed and "start spine at" in printed, printed
    assert same_parameters(out, "esa", "collective", "two_levels")
    steps = [json.loads(line) for line in (out / "esa" / "two_levels" / "rank0.jsonl").read_text().splitlines()]
    assert sum(4 < step["wall"] < 7 for step in steps) >= 3, "the job stood still while its spine was stopped"
    row = next(r for r in json.loads((out / "results.json").read_text())["jobs"] if r["job"] == "two_levels")
    paths = [segment["path"] for segment in row["paths"]]
    assert paths[0] == paths[-1] == "switch", paths
    counters = json.loads((out / "results.json").read_text())["counters"]["esa"]
    assert counters["spine.1"]["completed"] > 0 and counters["ps"]["completed"] > 0, counters  # before the stop, and meanwhile
    assert counters["spine"]["completed"] > 0 and counters["leaf1"]["sent_up"] > counters["spine"]["completed"], counters  # after
    assert_nothing_left(out, interfaces)


@needs_testbed
@needs_two_levels
@needs_bmv2
def test_through_bmv2_at_every_leaf_and_the_spine_a_two_level_job_on_lossy_links_ends_as_the_collective(tmp_path):
    """BMv2 is about 20x slower than the software switch: a few steps of the small MLP, 1% loss on every link."""
    jobs = ({"name": "two_levels", "transport": "switch", "steps": 8, "warm_up": 2},
            {"name": "collective", "transport": "collective", "steps": 8, "warm_up": 2, "phase": 1})  # fmt: skip
    run = racked_run("bmv2", *jobs, switch={"target": "bmv2", "pool": 64, "words": 64})
    run["topology"]["link"]["loss"] = 1
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    assert same_parameters(out, "esa", "two_levels", "collective")
    for name in ("leaf0", "leaf1", "spine"):  # each its own BMv2, which forwarded the collective's TCP too
        assert ", bmv2, pool 64" in (out / "esa" / f"{name}.log").read_text() and (out / "esa" / f"bmv2.{name}.log").exists()
    counters = json.loads((out / "results.json").read_text())["counters"]
    assert sum(counters["link_loss_drops"].values()) > 0, counters["link_loss_drops"]
    leaf0, leaf1, spine = (counters["esa"][name] for name in ("leaf0", "leaf1", "spine"))
    # Rack 1's leaf summed its two workers and each leaf sent its rack's sums up; the spine completed sums of both racks.
    assert leaf1["aggregated"] > 0 and leaf0["sent_up"] > 0 and leaf1["sent_up"] > 0, (leaf0, leaf1)
    assert spine["completed"] > 0 and spine["aggregated"] > 0 and spine["bad_format"] == spine["unregistered"] == 0, spine
    assert leaf0["descended"] > 0 and leaf1["descended"] > 0, (leaf0, leaf1)  # the spine's RESULTs passed down to the workers
    assert_nothing_left(out, interfaces)


@pytest.mark.parametrize("hosts, message", [([[0, 1], [1, 2]], "worker host 1 is in rack 0 and rack 1"), ([[0], [2]], "[1] are in no rack")])
def test_check_refuses_racks_that_do_not_place_every_host_once(tmp_path, hosts, message):
    import subprocess
    import sys

    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(racked_run("bad", {"name": "a"}) | {"topology": {"racks": hosts}}))
    done = subprocess.run([sys.executable, "-m", "ina.cli", "testbed", str(path), "--check"], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr, done.stderr
