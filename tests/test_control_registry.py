"""Registrations that outlive a restart and leave with their workers (docs/protocol.md, section 7,
"Leases and restarts"): a switch or PS restarted on its state file serves the same jobs, with the
same owners and slots; a job whose rank 0 stops renewing it is removed within its lease."""

from __future__ import annotations

import argparse
import json
import threading
import time

import pytest
from conftest import thc_state
from control_support import OPERATOR_TOKEN, TOKENS, spec, write_policy

from ina.control.auth import Access
from ina.control.http import ControlClient, ControlError
from ina.control.policy import Policy
from ina.control.registry import JobStore, Registry
from ina.launch import LocalAggregators, WorkerError, run_workers
from ina.ps.native import ps_core
from ina.ps.server import PSServer
from ina.switch import SwitchConfig
from ina.switch import cli as switch_cli
from ina.switch.server import SwitchServer

LOOPBACK = ("127.0.0.1", 0)


def _switch(registry: Registry, access: Access, policy: str = "esa") -> SwitchServer:
    return SwitchServer(SwitchConfig(pool=32, words=8, policy=policy), LOOPBACK, LOOPBACK, access=access, registry=registry)


def _listed(server) -> list[tuple]:
    return [(j["job"], j.get("owner"), j.get("slot_base"), j.get("span"), j["priority_cap"]) for j in server.jobs()]


@pytest.mark.parametrize("policy", ["esa", "static"])
def test_a_restarted_switch_serves_the_same_jobs_with_the_same_owners_slots_and_quotas(tmp_path, policy):
    access = Access(OPERATOR_TOKEN, Policy(write_policy(tmp_path)))  # tenant a: cap 100, 8 slots, jobs 100-199
    registry = Registry(store=JobStore(tmp_path / "switch.json"))
    with _switch(registry, access, policy) as first:
        operator, a = (ControlClient(*first.control_address, token=token) for token in (OPERATOR_TOKEN, TOKENS["a"]))
        for job, window in ((1, 4), (2, 8), (3, 2)):
            operator.register(spec(job, window=window))
        a.register(spec(100, window=4, priority_cap=200))
        operator.deregister(2)  # job 3's slots were chosen beside job 2's: a replay in order would place it elsewhere
        before = _listed(first)
    with _switch(registry, access, policy) as second:
        assert _listed(second) == before
        a = ControlClient(*second.control_address, token=TOKENS["a"])
        with pytest.raises(ControlError, match="403"):  # its 4 restored slots count: 4 + 8 > 8
            a.register(spec(101, window=8))
        a.register(spec(101, window=4))
        with pytest.raises(ControlError, match="403"):  # still the owner's
            ControlClient(*second.control_address, token=TOKENS["b"]).deregister(100)
    saved = json.loads((tmp_path / "switch.json").read_text())["jobs"]
    assert [job["registration"]["job"] for job in saved] == [1, 3, 100, 101]
    assert (tmp_path / "switch.json").stat().st_mode & 0o777 == 0o600


def test_a_restarted_ps_serves_the_same_jobs(tmp_path):
    registry = Registry(store=JobStore(tmp_path / "ps.json"))
    with PSServer(ps_core(8), LOOPBACK, LOOPBACK, access=Access(OPERATOR_TOKEN), registry=registry) as first:
        client = ControlClient(*first.control_address, token=OPERATOR_TOKEN)
        client.register(spec(5))
        client.register(spec(6, workers=3))
        before = [(j["job"], j["workers"], j["owner"]) for j in first.jobs()]
    with PSServer(ps_core(8), LOOPBACK, LOOPBACK, access=Access(OPERATOR_TOKEN), registry=registry) as second:
        assert [(j["job"], j["workers"], j["owner"]) for j in second.jobs()] == before


def test_a_state_file_that_cannot_be_served_stops_the_service_at_start(tmp_path, capsys):
    state = tmp_path / "state.json"
    state.write_text("{not json")
    arguments = ["--listen", "127.0.0.1:0", "--control", "127.0.0.1:0", "--state", str(state)]
    assert switch_cli.run(switch_cli.configure(argparse.ArgumentParser()).parse_args(arguments)) == 2
    assert f"--state {state} is not a job table" in capsys.readouterr().err
    registry = Registry(store=JobStore(state))
    state.unlink()  # moved away: a fresh table
    with _switch(registry, Access()) as server:
        ControlClient(*server.control_address).register(spec(1, window=32))
    with pytest.raises(ValueError, match="job 1 cannot be restored.*window 32 exceeds the switch's pool of 16"):
        SwitchServer(SwitchConfig(pool=16, words=8), LOOPBACK, LOOPBACK, registry=registry)


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_lease_not_renewed_ends_the_registration_and_frees_its_slots(tmp_path):
    access = Access(OPERATOR_TOKEN, Policy(write_policy(tmp_path)))
    registry = Registry(lease=0.6, store=JobStore(tmp_path / "switch.json"))
    with _switch(registry, access) as server:
        operator, a, b = (ControlClient(*server.control_address, token=t) for t in (OPERATOR_TOKEN, TOKENS["a"], TOKENS["b"]))
        assert a.register(spec(100, window=8))["lease"] == 0.6
        operator.register(spec(7))
        began = time.monotonic()
        while time.monotonic() - began < 1.5:  # job 100 renewed by its owner, job 7 by nobody
            assert a.renew(100) == {"job": 100, "lease": 0.6}
            time.sleep(0.1)
        assert [j["job"] for j in server.jobs()] == [100]
        assert server.control.counters()["leases_expired"] == 1
        with pytest.raises(ControlError, match="403"):
            b.renew(100)
        with pytest.raises(ControlError, match="register it again .404."):
            a.renew(7)
        assert _wait_for(lambda: server.jobs() == [], 2.0)  # no renewal: gone, its 8 slots back in a's quota
        assert a.whoami()["slots_used"] == 0 and server.control.counters()["leases_expired"] == 2
        assert json.loads((tmp_path / "switch.json").read_text()) == {"jobs": []}


def _register_and_hang(rank: int, workers: int, options: dict, ready: str) -> None:
    """Attach a switch transport (rank 0 registers the job and renews its lease), then wait to be killed."""
    state = thc_state("switch", {"switch": options})  # attached at once: the job is registered
    if rank == 0:
        open(ready, "w").close()
    time.sleep(600)
    state.transport.close()  # never reached: the test kills it first


def test_a_job_whose_processes_are_all_killed_leaves_the_switch_and_the_ps_within_its_lease(tmp_path):
    ready = tmp_path / "ready"
    with LocalAggregators(lease=1.0) as aggregators:
        run = threading.Thread(target=lambda: pytest.raises(WorkerError, run_workers, _register_and_hang, 2,
                                                            aggregators.options("switch"), str(ready), timeout=10))  # fmt: skip
        run.start()
        assert _wait_for(ready.exists, 60)
        servers = (aggregators.switch, aggregators.ps)
        jobs = [server.jobs() for server in servers]
        assert all(len(listed) == 1 for listed in jobs), jobs
        time.sleep(2.5)  # over two leases: rank 0 renews it
        assert all(len(server.jobs()) == 1 for server in servers)
        run.join()  # run_workers' timeout killed both processes: no deregistration, no renewal
        killed = time.monotonic()
        assert _wait_for(lambda: all(server.jobs() == [] for server in servers), 3.0)
        assert time.monotonic() - killed < 1.0 + 1.0  # within its lease, and the check a quarter-lease apart
        assert [server.control.counters()["leases_expired"] for server in servers] == [1, 1]
        assert aggregators.switch.core.waiting().job.size == 0  # no slot held
