"""The P4 switch on BMv2 end to end: real packets over veth links between network namespaces
this test creates, `ina ps` on its own host, workers on another, the controller's control API on a
management link. Two jobs of different priorities contend for a small pool under loss,
duplication and reordering, and every sum is exact; DDP through BMv2 ends bit-identical to the
collective transport.

The kernel here has no netem: tests/bmv2_support.py impairs links with nftables and HTB."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from bmv2_support import Host, needs_bmv2, run

from ina.protocol import INA_PORT
from ina.switch import SwitchConfig

pytestmark = needs_bmv2

WORDS, POOL = 18, 8
WORD_GROUPS = {"one-pass": 0, "word-passes": 6}
"""How many words a pass steps: all, or six, the rest on word passes (three groups, as the Tofino program's K = 64)."""
SWITCH_IP, SWITCH_MAC = "10.99.0.254", "02:00:00:00:00:fe"
WORKERS_IP, PS_IP = "10.99.0.1", "10.99.0.2"
PS_PORT, PS_CONTROL = 47101, 47181
HOSTS = Path(__file__).parent / "p4_hosts.py"
SLOT_TIMEOUT = 3600.0
"""No idle sweep in these runs (the sweep has its vector, tests/vectors/switch_sweep.json): the two-job
run keeps partials in the switch until the next job's packets meet them, however long that takes."""
TOKEN = secrets.token_hex(16)
"""The operator's token: the control APIs listen beyond loopback, so they require one."""


def management_subnet() -> str:
    """A 10.98.X.0/24 that no route here covers yet, for the management link: its switch side is in this
    namespace, where another run's (a concurrent one's) would otherwise take the same addresses."""
    routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=True).stdout
    free = [x for x in range(1, 255) if f"10.98.{x}.0/24" not in routes]
    assert free, "every 10.98.X.0/24 has a route here"
    return f"10.98.{random.choice(free)}"


class Network:
    """BMv2 with the workers' host on port 1 and the PS's on port 2, the controller in this process;
    BMv2's program steps `word_group` words a pass (0: all). What it started is stopped, and what it
    made is removed, also when starting fails."""

    def __init__(self, word_group: int) -> None:
        self.parts: list = []
        self.switch = self.ps = None
        try:
            self._open(word_group)
        except BaseException:
            self.close()
            raise

    def _open(self, word_group: int) -> None:
        from ina.control.auth import Access
        from ina.p4.bmv2_device import Bmv2Device
        from ina.p4.build import build
        from ina.p4.entries import Route
        from ina.control.registry import JobStore, Registry
        from ina.p4.server import P4SwitchServer

        self.workers = self._keep(Host("w", WORKERS_IP))
        self.ps_host = self._keep(Host("p", PS_IP))
        subnet = management_subnet()
        self.management = self._keep(Host("m", f"{subnet}.1", netns=self.workers.netns))
        run("ip", "addr", "add", f"{subnet}.254/24", "dev", self.management.veth.switch_side)
        for host in (self.workers, self.ps_host):
            host.neighbour(SWITCH_IP, SWITCH_MAC)
        self.workers.neighbour(PS_IP, self.ps_host.mac)
        self.ps_host.neighbour(WORKERS_IP, self.workers.mac)
        routes = [Route(WORKERS_IP, self.workers.mac, 1), Route(PS_IP, self.ps_host.mac, 2)]
        config = SwitchConfig(pool=POOL, words=WORDS, policy="esa", slot_timeout=SLOT_TIMEOUT)
        interfaces = {1: self.workers.veth.switch_side, 2: self.ps_host.veth.switch_side}
        state = Path(tempfile.mkdtemp(prefix="ina-p4-state-")) / "switch.json"  # the job table a restart restores
        program = build(WORDS, POOL, word_group=word_group)
        self._start = lambda control: P4SwitchServer(config, (SWITCH_IP, INA_PORT), control, lambda: Bmv2Device.start(interfaces), routes, SWITCH_MAC,
                                                     access=Access(token=TOKEN), registry=Registry(store=JobStore(state)), program=program).start()  # fmt: skip
        self.switch = self._start((f"{subnet}.254", 0))
        self.ps = subprocess.Popen(self.ps_host.netns.command(sys.executable, "-m", "ina.ps", "--listen", f"{PS_IP}:{PS_PORT}",
                                                               "--control", f"{PS_IP}:{PS_CONTROL}", "--words", str(WORDS)),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | {"INA_TOKEN": TOKEN})  # fmt: skip
        line = self.ps.stdout.readline()
        while line.startswith("ina: warning"):  # a token over plain HTTP beyond loopback: said loudly first
            line = self.ps.stdout.readline()
        assert line.startswith("ina ps: data"), line

    def restart_switch(self, down: float) -> None:
        """Stop the controller and BMv2, and `down` seconds later start both again on the same addresses
        from the state file."""
        control = self.switch.control_address
        self.switch.close()
        time.sleep(down)
        self.switch = self._start(control)

    def _keep(self, part):
        self.parts.append(part)
        return part

    @property
    def environment(self) -> dict[str, str]:
        return {"INA_SWITCH_CONTROL": "%s:%d" % self.switch.control_address, "INA_PS_CONTROL": f"{PS_IP}:{PS_CONTROL}", "INA_TOKEN": TOKEN}

    def on_workers(self, command: str, options: dict, timeout: float = 600) -> dict:
        done = subprocess.run(self.workers.netns.command(sys.executable, str(HOSTS), command, json.dumps(options)),
                              capture_output=True, text=True, timeout=timeout, env=os.environ | self.environment)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def close(self) -> None:
        if self.ps is not None:
            self.ps.terminate()
            self.ps.wait(timeout=10)
        if self.switch is not None:
            self.switch.close()
        for part in reversed(self.parts):
            part.close()


@pytest.fixture(scope="module", params=list(WORD_GROUPS.values()), ids=list(WORD_GROUPS))
def network(request):
    net = Network(request.param)
    yield net
    net.close()


def test_two_jobs_of_different_priorities_are_exact_through_bmv2_under_loss_duplication_and_reordering(network):
    """Each job's partials wait in the switch for its last worker, their RESENDs held at the workers'
    host until the next step has happened (tests/p4_hosts.py, `sums`): the high-priority job's first
    packets preempt every partial of the low one's first window, and when the low job's last worker
    joins, its later chunks collide with the high job's partials. Loss, duplication and reordering on
    every link start once those partials are in place, and every sum must be exact."""
    jobs = [dict(workers=2, window=POOL, priority=1, reductions=6, coordinates=4 * WORDS * 6, holds_slots=True, rto=0.5),
            dict(workers=3, window=POOL, priority=9, reductions=6, coordinates=4 * WORDS * 5, holds_slots=True, rto=0.5)]  # fmt: skip
    environment = network.environment
    links = [dataclasses.replace(host.link, root=f"/proc/{os.getpid()}/ns/net") for host in (network.workers, network.ps_host)]
    options = dict(host=WORKERS_IP, seed=7, jobs=jobs, switch_control=environment["INA_SWITCH_CONTROL"], ps_control=environment["INA_PS_CONTROL"],
                   device=network.workers.veth.host_side, impair=dict(links=[dataclasses.astuple(link) for link in links],
                                                                      loss=0.02, duplicate=0.02, reorder=0.05))  # fmt: skip
    try:
        result = network.on_workers("sums", options)
    finally:
        for host in (network.workers, network.ps_host):
            host.link.repair()
    assert result["failures"] == []
    assert result["checked"] == sum(2 * job["reductions"] * job["workers"] for job in jobs)
    switch, ps = result["counters"]["switch"], result["counters"]["ps"]
    print({"switch": {k: switch[k] for k in ("rx_packets", "completed", "preempted", "collision", "redirected", "flushed")},
           "ps": {k: ps[k] for k in ("completed", "pieces")}, "checked": result["checked"]})  # fmt: skip (shown by pytest -s)
    assert switch["preempted"] >= POOL and switch["collision"] > 0, switch  # every slot of the low job's first window
    assert switch["completed"] > 0 and switch["unregistered"] == 0 and switch["malformed"] == 0, switch
    assert ps["completed"] > 0, ps  # the chunks the switch handed on completed at the PS


def test_bmv2_restarted_mid_training_with_its_registers_empty_costs_a_failover_and_nothing_else(network):
    """The controller and BMv2 stop mid-training, once the job has reduced through the switch, and
    start again (the program pushed anew, every register empty, the job's tables and multicast groups
    back from the state file). The PS's host reaches the workers through the switch, so the job fails
    over to the PS and, the PS silent too, goes on over the collective; it returns to the switch (the
    workers train on until it has) and ends with the collective's parameters."""
    worker = subprocess.Popen(network.workers.netns.command(sys.executable, str(HOSTS), "across_a_restart",
                                                             json.dumps({"workers": 2, "steps": 120, "environment": network.environment})),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ | network.environment)  # fmt: skip
    try:
        completed = network.switch.counters()["completed"]
        deadline = time.monotonic() + 120
        while network.switch.counters()["completed"] == completed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert network.switch.counters()["completed"] > completed, "the job never reduced through the switch"
        network.restart_switch(down=2.0)  # longer than the workers' failover
        out, err = worker.communicate(timeout=300)
    finally:
        worker.kill()
    assert worker.returncode == 0, out + err
    for rank in json.loads(out.strip().splitlines()[-1])["ranks"]:
        assert rank["equal"], rank
        assert rank["paths"][0] == "switch" and "collective" in rank["paths"] and rank["paths"][-1] == "switch", rank["paths"]
        assert rank["counters"]["failovers"] >= 1 and rank["counters"]["collective_failbacks"] >= 1, rank["counters"]
    assert network.switch.counters()["completed"] > 0  # the restarted switch aggregated again


def test_ddp_through_bmv2_ends_with_exactly_the_collective_transports_parameters(network):
    result = network.on_workers("ddp", {"workers": 2, "environment": network.environment})
    for losses in result["losses"]:
        assert losses["switch"] == losses["collective"] and losses["ps"] == losses["collective"], losses
