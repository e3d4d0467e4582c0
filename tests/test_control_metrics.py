"""Observability end to end: `/metrics` scraped from a live switch and PS during a two-job DDP run,
parsed with Prometheus' own parser and checked against the JSON counters; a deliberately slow rank
named by the API and by `ina top`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from conftest import loss_on, mlp, regression_problem, shard, thc_state
from control_support import OPERATOR_TOKEN, bearer, raw
from prometheus_client.parser import text_string_to_metric_families
from torch.nn.parallel import DistributedDataParallel

from ina import thc_hook
from ina.cli import main
from ina.control.auth import Access
from ina.control.http import ControlClient
from ina.launch import LocalAggregators, run_workers


def _train(rank: int, workers: int, options: dict, transport: str, steps: int, slow_rank: int | None, delay: float,
           meet: tuple[str, int] | None = None) -> float:  # fmt: skip
    """DDP with THC through `transport`; `slow_rank` sleeps `delay` before each backward pass. With
    `meet` (a folder, a number of jobs), every job waits after its first step until that many have
    taken theirs, so that the jobs overlap however slowly their processes start."""
    x, y = regression_problem()
    model = mlp()
    state = thc_state(transport, options, start_iter=0)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(state, thc_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(steps):
        batch = shard(step, rank, workers)
        optimizer.zero_grad()
        loss = loss_on(ddp, x[batch], y[batch])
        if rank == slow_rank:
            time.sleep(delay)
        loss.backward()
        optimizer.step()
        if step == 0 and meet is not None:
            _meet(Path(meet[0]), meet[1], workers, rank)
    dist.barrier()
    state.transport.close()
    return loss_on(model, x, y).item()


def _train_with_token(rank: int, workers: int, token: str, *args) -> float:
    """`_train` in a worker whose environment holds the token (a forkserver started earlier has not got it)."""
    os.environ["INA_TOKEN"] = token
    return _train(rank, workers, *args)


def _meet(folder: Path, jobs: int, workers: int, rank: int) -> None:
    if rank == 0:
        (folder / f"job-of-{workers}").touch()
    deadline = time.monotonic() + 60
    while len(list(folder.iterdir())) < jobs and time.monotonic() < deadline:
        time.sleep(0.05)


def _in_background(fn, *args, **kwargs) -> tuple[threading.Thread, list]:
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn(*args, **kwargs)), daemon=True)
    thread.start()
    return thread, out


def _scrape(client: ControlClient) -> dict[str, float]:
    """Every sample of a scrape, by name and labels, through prometheus_client's own parser."""
    samples = {}
    for family in text_string_to_metric_families(client.metrics()):
        for sample in family.samples:
            samples[sample.name + "".join(f"|{k}={v}" for k, v in sorted(sample.labels.items()))] = sample.value
    return samples


def _check_counters(client: ControlClient, role: str) -> dict[str, float]:
    """A scrape's counters lie between the JSON counters read just before and just after it."""
    before = client.counters()
    scraped = _scrape(client)
    after = client.counters()
    for name, value in before.items():
        assert before[name] <= scraped[f"ina_{role}_{name}_total"] <= after[name], (role, name)
    return scraped


def test_metrics_of_a_live_switch_and_ps_equal_their_counters_during_two_jobs(tmp_path):
    with LocalAggregators(access=Access(OPERATOR_TOKEN), pool=16) as aggregators:
        options = {name: aggregators.options(name) for name in ("switch", "ps")}
        clients = {role: ControlClient(*server.control_address, token=OPERATOR_TOKEN)
                   for role, server in (("switch", aggregators.switch), ("ps", aggregators.ps))}  # fmt: skip
        runs = [_in_background(run_workers, _train_with_token, workers, OPERATOR_TOKEN, options, "switch", 60, None, 0.0,
                               (str(tmp_path), 2), timeout=120) for workers in (2, 3)]  # fmt: skip
        both_seen = False
        while any(thread.is_alive() for thread, _ in runs):
            scraped = {role: _check_counters(client, role) for role, client in clients.items()}
            jobs = clients["switch"].jobs()
            if len(jobs) == 2 and scraped["switch"]["ina_switch_jobs"] == 2:
                both_seen = True
                for job in jobs:  # per-job series exist for every registered job
                    assert f"ina_switch_job_held|job={job['job']}|tenant={job.get('owner', '')}" in scraped["switch"]
                    assert f"ina_switch_job_completed_total|job={job['job']}" in scraped["switch"]
            time.sleep(0.05)
        for thread, out in runs:
            thread.join()
            assert out, "a training run failed"
        assert both_seen, "never scraped while both jobs were registered"
        switch, ps = (_check_counters(client, role) for role, client in clients.items())
        assert switch["ina_switch_completed_total"] > 0 and ps["ina_ps_rx_total"] > 0
        assert switch["ina_switch_jobs"] == 0  # both deregistered on close
        for address in (aggregators.switch.control_address, aggregators.ps.control_address):
            status, body = raw(address, "GET", "/metrics")
            assert status == 401, body
            status, body = raw(address, "GET", "/metrics", headers=bearer("not-a-token-at-all"))
            assert status == 401, body
        assert aggregators.switch.control.counters()["control_unauthorized"] == 2


def test_a_slow_rank_is_named_by_the_api_and_by_ina_top(capsys):
    with LocalAggregators(pool=16) as aggregators:
        options = {name: aggregators.options(name) for name in ("switch", "ps")}
        thread, out = _in_background(run_workers, _train, 3, options, "switch", 80, 2, 0.15, timeout=180)
        # Ranks 0 and 1 wait for rank 2 at the switch, or at the PS once their resends flushed the slot there.
        clients = {role: ControlClient(*server.control_address) for role, server in (("switch", aggregators.switch), ("ps", aggregators.ps))}
        named, since = None, None  # waits counted from the first measured on: a loaded machine starts ranks unevenly
        deadline = time.monotonic() + 60
        while named is None and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
            details = [(role, client.job(job["job"])) for role, client in clients.items() for job in client.jobs()]
            details = [(role, d) for role, d in details if d["ranks"]]  # a service that has not watched the job yet has no ranks
            waits = np.sum([[rank["wait_seconds"] for rank in d["ranks"]] for _, d in details], axis=0) if details else np.zeros(3)
            if since is None and waits.sum() > 0.2:
                since = waits
            elif since is not None and (waits - since).sum() > 6.0:  # many slow steps: one resend stall of another rank is diluted
                (role, named), waits = max(details, key=lambda d: d[1]["ranks"][2]["waited_on"]), waits - since
        assert named is not None, "neither the switch nor the PS measured a slow rank"
        assert named["slowest_rank"] == 2, named
        assert waits[2] > 3 * max(waits[0], waits[1]), (waits, named)
        switch_address, ps_address = ("%s:%d" % server.control_address for server in (aggregators.switch, aggregators.ps))
        assert main(["top", "--switch", switch_address, "--ps", ps_address, "--iterations", "2", "--interval", "0.5"]) == 0
        screen = capsys.readouterr().out
        row = next(line for line in screen.splitlines() if f"{named['job']} " in line and "rank" in line)
        # Where the job waits on rank 2 most, ina top names it; the other service may, for the moment, have
        # waited last on another rank (its recent measure: after rank 2's resends, ranks 0 and 1 go there too).
        assert f"rank 2 ({role})" in row, screen
        thread.join()
        assert out, "the training run failed"


def test_ina_top_says_when_a_service_cannot_be_reached_or_refuses(capsys):
    with LocalAggregators(access=Access(OPERATOR_TOKEN)) as aggregators:
        switch_address = "%s:%d" % aggregators.switch.control_address
        assert main(["top", "--switch", switch_address, "--ps", "127.0.0.1:9", "--iterations", "1"]) == 0
    screen = capsys.readouterr().out
    assert "switch " + switch_address + ": refused" in screen and "INA_TOKEN_FILE" in screen, screen
    assert "ps 127.0.0.1:9: unreachable" in screen, screen
    assert main(["top", "--switch", "", "--ps", ""]) == 2
    assert "give --switch or --ps" in capsys.readouterr().err


@pytest.mark.parametrize("path", ["/jobs/1", "/jobs/70000"])
def test_a_job_that_is_not_registered_is_not_found(path):
    with LocalAggregators() as aggregators:
        status, body = raw(aggregators.switch.control_address, "GET", path)
    assert status == (404 if path == "/jobs/1" else 400), body


def test_ina_top_runs_live_until_ctrl_c_and_exits_cleanly():
    with LocalAggregators() as aggregators:
        switch_address, ps_address = ("%s:%d" % server.control_address for server in (aggregators.switch, aggregators.ps))
        top = subprocess.Popen([sys.executable, "-m", "ina.cli", "top", "--switch", switch_address, "--ps", ps_address, "--interval", "0.2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        started = top.stderr.readline()  # once it reads the services
        assert started.startswith("ina top: reading switch"), started
        time.sleep(1)  # a few refreshes
        assert top.poll() is None
        top.send_signal(signal.SIGINT)
        out, err = top.communicate(timeout=30)
    assert top.returncode == 0 and "Traceback" not in err, err
    assert "pool: 0 of 64 slots held" in out, out
