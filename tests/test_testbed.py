"""`ina testbed` end to end, on a real Mininet network (root, Debian's mininet package):
testbed/ci.yaml (4 workers on 100 Mbit/s links with 1% loss, THC through the software switch
beside THC over the collective) ends with bit-identical parameters, writes its results, and
leaves no namespace, interface or process behind; so do a run stopped by Ctrl-C and one that
overruns its timeout. Without p4c a BMv2 run is refused, saying why."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from ina.testbed.network import why_not
from ina.testbed.results import occupancy

ROOT = Path(__file__).parent.parent
_REASON = why_not()
needs_testbed = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def ina_testbed(*arguments: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ina.cli", "testbed", *arguments], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **options)  # fmt: skip


def namespaces_in_use() -> set[int]:
    """The network namespace of every process on the machine (inode numbers)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            found.add(os.stat(f"/proc/{pid}/ns/net").st_ino)
        except OSError:
            pass
    return found


def command_lines() -> dict[int, str]:
    lines = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            lines[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
    return lines


def root_interfaces() -> set[str]:
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}


def assert_nothing_left(out: Path, interfaces_before: set[str]) -> dict:
    """Everything the run recorded as created is gone: its processes, namespaces and interfaces."""
    created = json.loads((out / "created.json").read_text())
    tag, running = created["tag"], command_lines()
    assert created["namespaces"] and created["process_pids"] and created["interfaces"]
    for pid in created["shell_pids"] + created["process_pids"]:
        assert pid not in running or (f"mininet:{tag}" not in running[pid] and str(out) not in running[pid]), running[pid]
    assert not [c for c in running.values() if f"mininet:{tag}" in c or f"{out}/" in c]
    assert not set(created["namespaces"]) & namespaces_in_use()
    assert not {name for name in root_interfaces() - interfaces_before if name.startswith(tag)}
    assert not set(created["interfaces"]) & root_interfaces()
    return created


@needs_testbed
def test_ci_run_through_the_software_switch_ends_exactly_as_the_collective_and_leaves_nothing(tmp_path):
    import torch

    out = tmp_path / "ci"
    interfaces = root_interfaces()
    done = ina_testbed(str(ROOT / "testbed" / "ci.yaml"), "--out", str(out))
    printed, _ = done.communicate(timeout=300)
    assert done.returncode == 0, printed
    assert "[esa] switch: step" in printed or "[esa] collective: step" in printed  # progress while it runs
    result = json.loads((out / "results.json").read_text())
    jobs = {row["job"]: row for row in result["jobs"]}
    assert jobs["switch"]["params_sha256"] == jobs["collective"]["params_sha256"]
    a, b = (torch.load(out / "esa" / name / "params.pt") for name in ("collective", "switch"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert jobs["switch"]["final_loss"] == jobs["collective"]["final_loss"]
    assert jobs["switch"]["accuracy"] > 0.5  # it trained
    # The links really lost packets, the switch really aggregated, and the PS answered the resends the
    # switch forwarded: it completes a chunk whose slot was flushed, and replays the RESULT of one whose
    # RESULT a link lost (which of the two a run's losses cause is chance).
    counters = result["counters"]
    assert sum(counters["link_loss_drops"].values()) > 100, counters["link_loss_drops"]
    switch, ps = counters["esa"]["switch"], counters["esa"]["ps"]
    assert switch["completed"] > 0 and switch["aggregated"] > 0 and switch["unregistered"] == 0, switch
    assert switch["resend_forwarded"] > 0 and ps["completed"] + ps["results_replayed"] > 0, (switch, ps)
    # A reader's files: per-step CSV for both jobs, per-job rows, plots.
    with (out / "steps.csv").open() as f:
        steps = list(csv.DictReader(f))
    assert {(r["job"], int(r["step"])) for r in steps} == {(j, s) for j in ("collective", "switch") for s in range(30)}
    assert all(float(r["tx_bytes_per_worker"]) > 0 and float(r["step_time"]) > 0 for r in steps)
    # THC moves 1 byte a coordinate here, about a quarter of fp32's 4 (19,210 parameters).
    assert 10_000 < jobs["collective"]["hook_bytes_per_worker_step"] < 4 * 19_210 / 2
    for plot in ("loss_vs_time.png", "jct.png", "step_time.png", "slot_occupancy.png"):
        assert (out / plot).stat().st_size > 1000
    # The switch's and the PS's /metrics, recorded over the run (too short for a scrape to catch the switch job
    # registered every time; the failover run's does).
    scrapes = [json.loads(line) for line in (out / "esa" / "metrics.jsonl").read_text().splitlines()]
    assert {s["role"] for s in scrapes if "role" in s} == {"switch", "ps"}
    tally = scrapes[-1]["tally"]
    assert tally["scrapes"] > 20 and tally["failed"] <= tally["scrapes"] // 20, tally  # a loaded machine may miss one
    completed = [s["samples"]["ina_switch_completed_total"] for s in scrapes if s.get("role") == "switch"]
    assert completed == sorted(completed) and completed[-1] > 0  # a counter, recorded as it grew
    assert_nothing_left(out, interfaces)


def _run_to_the_end(tmp_path: Path, run: dict) -> tuple[Path, set[str], str]:
    """`ina testbed` on `run` (a run file's document): its results folder, the root interfaces before, what it printed."""
    path = tmp_path / f"{run['name']}.yaml"
    path.write_text(json.dumps(run))
    out, interfaces = tmp_path / "out", root_interfaces()
    done = ina_testbed(str(path), "--out", str(out))
    printed, _ = done.communicate(timeout=300)
    assert done.returncode == 0, printed
    return out, interfaces, printed


def _start_short_run(tmp_path: Path, **top) -> tuple[Path, set[str], subprocess.Popen]:
    """A run of one endless job through the switch: (its results folder, the root interfaces before, the CLI)."""
    interfaces = root_interfaces()
    return tmp_path / "out", interfaces, ina_testbed(str(_short_run(tmp_path, **top)), "--out", str(tmp_path / "out"))


def _ends(process: subprocess.Popen, status: int, saying: str | Callable[[], str], out: Path, interfaces: set[str]) -> None:
    """The run ends with `status`, printing `saying` (or what `saying()` says, asked once it has ended)."""
    printed, _ = process.communicate(timeout=120)
    assert process.returncode == status, printed
    assert (saying() if callable(saying) else saying) in printed
    assert_nothing_left(out, interfaces)


def _short_run(tmp_path: Path, **top) -> Path:
    run = {"name": "short", "topology": {"workers": 2, "link": {"bw": 100, "loss": 1}},
           "jobs": [{"name": "long", "workers": 2, "hook": "thc", "transport": "switch", "steps": 100000}], **top}  # fmt: skip
    path = tmp_path / "short.yaml"
    path.write_text(json.dumps(run))
    return path


@needs_testbed
def test_ctrl_c_stops_the_run_and_removes_everything(tmp_path):
    out, interfaces, process = _start_short_run(tmp_path)
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "long: step" in line:  # training, through the switch
            break
    else:
        pytest.fail("".join(lines))
    process.send_signal(signal.SIGINT)
    _ends(process, 130, "every process and interface of the run was removed", out, interfaces)


@needs_testbed
def test_a_run_past_its_timeout_fails_clearly_and_removes_everything(tmp_path):
    # 20 s: past the jobs' start (torch, the process groups), which took 14 s on the 2-core machine under a build
    out, interfaces, process = _start_short_run(tmp_path, timeout=20)

    def saying() -> str:
        """What the run says depends on whether its ranks had all set up (the phase's go file was written)
        before the 20 s passed, which a loaded machine decides, not the test."""
        if any(out.glob("*/go.*")):
            return "timeout of 20 s passed with jobs ['long'] unfinished"
        return "the run's timeout passed while its jobs were starting"

    _ends(process, 1, saying, out, interfaces)


@needs_testbed
def test_check_accepts_the_ci_run_and_refuses_bmv2_without_p4c():
    done = subprocess.run([sys.executable, "-m", "ina.cli", "testbed", "testbed/ci.yaml", "--check"], cwd=ROOT,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0 and "is valid and this machine can run it" in done.stdout, done.stderr
    env = {**os.environ, "INA_P4C": "/nonexistent/p4c"}
    done = subprocess.run([sys.executable, "-m", "ina.cli", "testbed", "testbed/bmv2.yaml", "--check"], cwd=ROOT,
                          capture_output=True, text=True, env=env)  # fmt: skip
    assert done.returncode == 2
    assert "needs p4c" in done.stderr or "needs the 'p4' extra" in done.stderr, done.stderr


@needs_testbed
def test_aggregators_stopped_and_started_again_mid_run_cost_a_failover_a_fallback_and_nothing_else(tmp_path):
    """faults: the switch stops 3 s into training, the PS 2 s later, and both start again (from their
    state files) at 8 s; the switch job fails over to the PS, falls back to the collective, returns
    to the aggregators, and ends with the collective job's parameters."""
    import torch

    run = {"name": "failover", "topology": {"workers": 4, "link": {"bw": 100}}, "timeout": 300,
           "faults": [{"at": 3, "stop": "switch"}, {"at": 5, "stop": "ps"}, {"at": 8, "start": "ps"}, {"at": 8, "start": "switch"}],
           "jobs": [{"name": "collective", "workers": 2, "hosts": [0, 1], "steps": 3000, "hook": "thc", "transport": "collective"},
                    {"name": "switch", "workers": 2, "hosts": [2, 3], "steps": 3000, "hook": "thc", "transport": "switch",
                     "failover": 0.5, "failback": 2}]}  # fmt: skip
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    assert "stop switch at" in printed and "start switch at" in printed, printed
    events = json.loads((out / "esa" / "faults.json").read_text())
    assert [(e["action"], e["service"]) for e in events] == [("stop", "switch"), ("stop", "ps"), ("start", "ps"), ("start", "switch")]
    summary = json.loads((out / "esa" / "switch" / "summary.json").read_text())
    counted = summary["transport_counters"]
    assert counted["failovers"] >= 1 and counted["collective_fallbacks"] == 1 and counted["collective_failbacks"] == 1, counted
    jobs = {row["job"]: row for row in json.loads((out / "results.json").read_text())["jobs"]}
    paths = [segment["path"] for segment in jobs["switch"]["paths"]]
    assert paths[:3] == ["switch", "ps", "collective"] and paths[-1] != "collective", paths
    assert "switch paths: switch from step 0" in printed, printed
    a, b = (torch.load(out / "esa" / name / "params.pt") for name in ("collective", "switch"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    counters = json.loads((out / "results.json").read_text())["counters"]["esa"]
    assert counters["switch.1"]["completed"] > 0  # the instance the fault stopped had aggregated (the restarted one
    # does once every rank is back, if training lasts that long)
    first, restarted = ((out / "esa" / name).read_text() for name in ("switch.log", "switch.2.log"))
    job = int(re.findall(r"job (\d+) registered by", first)[0])
    assert max(held for _, held in occupancy(out / "esa" / "metrics.jsonl")[job]) > 0  # /metrics saw its slots
    assert f"job {job} restored from" in restarted, restarted  # from its state file
    again = json.loads((out / "esa" / "switch" / "summary.json").read_text())["job_id"]
    assert f"job {again} registered by" in restarted, restarted  # rank 0 registered it again on the way back
    assert_nothing_left(out, interfaces)


@needs_testbed
def test_two_ranks_on_each_host_sum_inside_the_host_first_and_train_as_the_flat_collective(tmp_path):
    """A host of several ranks is a multi-GPU node: hierarchy 'auto' sums its ranks first, so the
    switch sees one worker per host, and the job ends with the flat collective job's parameters."""
    import torch

    run = {"name": "nodes", "topology": {"workers": 6, "link": {"bw": 100}}, "timeout": 300,
           "jobs": [{"name": "flat", "workers": 4, "hosts": [0, 1, 2, 3], "steps": 20, "hook": "thc", "transport": "collective"},
                    {"name": "nodes", "workers": 4, "hosts": [4, 4, 5, 5], "steps": 20, "hook": "thc", "transport": "switch"}]}  # fmt: skip
    out, interfaces, printed = _run_to_the_end(tmp_path, run)
    a, b = (torch.load(out / "esa" / name / "params.pt") for name in ("flat", "nodes"))
    assert all(torch.equal(a[k], b[k]) for k in a)
    job = json.loads((out / "esa" / "nodes" / "summary.json").read_text())["job_id"]
    registered = re.findall(rf"ina switch: job {job} registered by .*: (\d+) workers", (out / "esa" / "switch.log").read_text())
    assert registered == ["2"], registered  # one worker per host
    assert_nothing_left(out, interfaces)


@needs_testbed
def test_links_that_reorder_keep_their_slow_class_under_either_queues_count_what_it_sent_and_drain():
    """No jobs, the network alone: every end of a link that reorders, shaped or not (the PS's), has the slow class
    that its rule marks packets for, which the switch ports' priority queues and their FIFO leave in place; a burst
    from worker 0 to worker 1 and to the PS puts marked packets through it at both ends of each link, and the
    network drains them."""
    from ina.testbed import spec
    from ina.testbed.network import SLOW_CLASS, Network, _check

    run = spec.parse({"topology": {"workers": 2, "link": {"bw": 10, "reorder": 10}, "ps_link": {"bw": 0}}, "jobs": [{"workers": 2}]})
    burst = "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor _ in range(300): s.sendto(bytes(400), (sys.argv[1], 9))"
    with Network(run) as network:
        sender, receiver = network.workers
        for priority in (True, False):
            network.prioritize(priority)
            before = sum(network.reordered().values())
            for ip in (receiver.ip, network.ps.ip):
                _check(sender.node, sys.executable, "-c", burst, ip)
            assert network.drain(timeout=30) < 30
            assert sum(network.reordered().values()) - before > 20, network.reordered()
        ends = [intf for pair in network.links for intf in pair]
        assert all(SLOW_CLASS in _check(intf.node, "tc", "class", "show", "dev", intf.name) for intf in ends)
        sent = network.reordered()  # the host's end and the switch's ports toward worker 1 and the PS
        assert sent[sender.interface] > 0 and sum(count for name, count in sent.items() if name.startswith(f"{network.tag}sw")) > 0, sent
