"""A run from start to end: the network, the switch and PS, the jobs phase by phase, the results.

``execute(run, out)`` builds the network, and for each switch policy the run names (one round
each; a run without switch jobs has one round) starts ``ina switch`` in the switch node and
``ina ps`` in the PS host, runs the jobs of each phase at once, stops the switch and the PS
(which print their counters), and finally writes the results (:mod:`ina.testbed.results`).
Whatever happens (success, a failed process, the run's timeout, Ctrl-C or SIGTERM) every
process it started is stopped and the network removed before it returns or raises.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections import Counter
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Iterator

from ina.testbed import clock, results, uplinks
from ina.testbed.network import Network, SwitchNode, TestbedUnavailable, why_not
from ina.testbed.processes import ProcessFailed, Processes, Service, base_environment, ina_command
from ina.testbed.spec import Fault, Job, Link, Run, static_window

SWITCH_PORT, SWITCH_CONTROL_PORT = 47100, 47180
PS_PORT, PS_CONTROL_PORT = 47101, 47181
MASTER_PORT = 29500
PROGRESS_EVERY = 5.0
START_MARGIN = 0.5
"""Seconds between writing a phase's start time and that time: every rank sees the file before it."""
METRICS_EVERY = 0.25
"""Seconds between two scrapes of the services' /metrics."""


class RunTimeout(RuntimeError):
    """The run took longer than its ``timeout``."""


def execute(run: Run, out: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run `run`, writing everything under `out`; the results' summary (results.json)."""
    reason = why_not(run)
    if reason:
        raise TestbedUnavailable(reason)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(run.to_json())
    deadline = time.monotonic() + run.timeout
    aggregated = any(j.uses_aggregators for j in run.jobs)
    rounds = run.switch.policies if any(j.uses_switch for j in run.jobs) else run.switch.policies[:1]
    outcomes: list[dict[str, Any]] = []
    counters: dict[str, Any] = {}
    created: dict[str, Any] = {}
    ps_link = "" if run.ps_link is None else f" (the PS's: {_shape(run.ps_link)})"
    if run.racks:
        ps_link += f"; racks {[list(hosts) for hosts in run.racks]}, uplinks {_shape(run.uplink_link)}"
    say(f"ina testbed: run {run.name!r}: {run.worker_hosts} worker hosts, links {_shape(run.link)}{ps_link}; "
        f"{run.switch.target} switch; results in {out}")  # fmt: skip
    network = Network(run)
    processes = Processes(on_start=lambda: _record(out, created, processes))
    try:
        created = {"tag": network.tag, "nodes": [n.name for n in network.net.hosts], "interfaces": network.interface_names(),
                   "shell_pids": network.shell_pids(), "namespaces": network.namespaces()}  # fmt: skip
        _record(out, created, processes)  # now and at each start, in case this process is killed outright
        network.prioritize(run.switch.queues == "priority")  # every round alike: the policies differ in nothing else
        for policy in rounds:
            folder = out / policy
            waited = network.drain()  # each round starts on empty links: the last one's leftovers are not its load
            if waited > 0.5:
                say(f"ina testbed: [{policy}] waited {waited:.1f} s for the last round's packets to leave the links' queues")
            services = _Services(run, network, processes, folder, policy, deadline) if aggregated else None
            recorder = _record_metrics(run, network, processes, folder) if aggregated else None
            sampler = uplinks.Sampler(network.uplink_ends(), folder / uplinks.SAMPLES) if run.racks else None
            for phase, jobs in enumerate(run.phases):
                say(f"ina testbed: [{policy}] phase {phase}: " + ", ".join(f"{j.name} ({j.method}, {j.workers} workers)" for j in jobs))
                training = [folder / job.name / "rank0.jsonl" for job in jobs if job.uses_aggregators]
                started = lambda: any(path.exists() and path.stat().st_size for path in training)  # noqa: E731 - its first step is logged
                injector = services.inject(run.faults, started, say) if services and phase == 0 and run.faults else None
                outcomes += _run_phase(run, network, processes, folder, policy, jobs, deadline, say)
                if injector is not None:
                    injector.join()
            if recorder is not None:
                recorder.stop()
            if sampler is not None:
                sampler.stop()
            counters[policy] = services.stop_and_count() if services else {}
        rules = network.rule_counters()
        counters["link_loss_drops"] = rules.get("drop", {})
        if any(link.duplicate for link in run.links):
            counters["link_duplicated"] = rules.get("dup", {})
        if any(link.reorder for link in run.links):
            counters["link_reordered"] = network.reordered()
        counters["link_queue_drops"] = network.queue_drops()
        counters["link_socket_drops"] = network.udp_buffer_drops()
    finally:
        with _signals_held():  # a second Ctrl-C must not cut the cleanup short
            processes.close()
            network.close()
            _record(out, created, processes)
    summary = results.write(out, run, rounds, outcomes, counters)
    for line in results.table(summary):
        say(line)
    return summary


def _shape(link: Link) -> str:
    extra = [f"{percent:g}% {what}" for percent, what in ((link.duplicate, "duplicated"), (link.reorder, "reordered")) if percent]
    return ", ".join([f"{link.bw:g} Mbit/s, {link.delay:g} ms, {link.loss:g}% loss", *extra])


def _record(out: Path, created: dict[str, Any], processes: Processes) -> None:
    """Write created.json: what the run made (nodes, interfaces, namespaces, PIDs)."""
    if created:
        created["process_pids"] = processes.pids()
        (out / "created.json").write_text(json.dumps(created, indent=2))


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore SIGINT, SIGTERM and SIGHUP meanwhile (in the main thread; elsewhere nothing to hold)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in held.items():
            signal.signal(s, handler)


class _Services:
    """The round's `ina switch` and `ina ps`, each keeping its jobs in a state file, so that the run's
    faults can stop one and start it again serving the same jobs (docs/protocol.md, section 7)."""

    def __init__(self, run: Run, network: Network, processes: Processes, folder: Path, policy: str, deadline: float) -> None:
        self.processes, self.folder, self.deadline = processes, folder, deadline
        self.env = base_environment(run.impaired)
        ps = ["ps", "--listen", f"{network.ps.ip}:{PS_PORT}", "--control", f"{network.ps.ip}:{PS_CONTROL_PORT}", "--words", str(run.switch.words)]
        self.commands = {"ps": (network.ps.node, ps)}
        for name, switch in network.switches.items():  # the same pool, words and policy at every one: a racked job's leaves and spine must agree
            self.commands[name] = (switch.node, _switch_command(run, network, switch, policy, folder))
        self.running: dict[str, Service] = {}
        self.events: list[dict[str, Any]] = []
        self.counted: dict[str, list[dict[str, Any]]] = {name: [] for name in self.commands}  # of instances stopped by faults
        self.starts: Counter[str] = Counter()
        for name in self.commands:  # the PS first; BMv2 may compile the P4 program first (cached afterwards)
            self.start(name)

    def start(self, name: str) -> None:
        node, command = self.commands[name]
        self.starts[name] += 1  # a restarted instance's log beside its predecessor's: switch.log, switch.2.log, ...
        log = self.folder / (f"{name}.log" if self.starts[name] == 1 else f"{name}.{self.starts[name]}.log")
        state = ["--state", str(self.folder / f"{name}.state.json")]
        service = self.processes.start(name, node, ina_command(*command, *state), log, self.env, service=True)
        service.wait_ready(max(1.0, min(900.0, self.deadline - time.monotonic())))
        self.running[name] = service

    def inject(self, faults: tuple[Fault, ...], started: Callable[[], bool], say: Callable[[str], None]) -> threading.Thread:
        """Apply `faults` at their times after `started()` (the jobs train), on a thread (join it when the phase is over)."""

        def apply() -> None:
            while not started() and time.monotonic() < self.deadline:
                time.sleep(0.1)
            began = time.monotonic()
            for fault in faults:
                time.sleep(max(0.0, began + fault.at - time.monotonic()))
                if time.monotonic() > self.deadline:
                    return
                done = time.monotonic()
                if fault.action == "stop":
                    self.counted[fault.service].append(self.running.pop(fault.service).stop_and_count())
                else:
                    self.start(fault.service)
                self.events.append({"at": round(done - began, 3), "action": fault.action, "service": fault.service,
                                    "took": round(time.monotonic() - done, 3)})  # fmt: skip
                say(f"ina testbed: {fault.action} {fault.service} at {done - began:.1f} s")
            (self.folder / "faults.json").write_text(json.dumps(self.events, indent=2))

        thread = threading.Thread(target=apply, name="testbed-faults", daemon=True)
        thread.start()
        return thread

    def stop_and_count(self) -> dict[str, Any]:
        """Stop all; their final counters (with those of instances a fault stopped, by name.N)."""
        counts: dict[str, Any] = {name: service.stop_and_count() for name, service in self.running.items()}
        for name, stopped in self.counted.items():
            counts |= {f"{name}.{i + 1}": values for i, values in enumerate(stopped)}
        return counts


def _switch_command(run: Run, network: Network, switch: SwitchNode, policy: str, folder: Path) -> list[str]:
    """`ina switch` arguments for the switch node `switch` (the run's one switch, a leaf or the spine)."""
    spec = run.switch
    command = ["switch", "--listen", f"{switch.ip}:{SWITCH_PORT}", "--control", f"{switch.control_ip}:{SWITCH_CONTROL_PORT}",
               "--pool", str(spec.pool), "--words", str(spec.words), "--policy", policy, "--slot-timeout", str(spec.slot_timeout)]  # fmt: skip
    if spec.max_pps:
        command += ["--max-pps", str(spec.max_pps)]
    if spec.latency:
        command += ["--latency", str(spec.latency)]
    if not spec.result_copies:
        command.append("--no-result-copies")
    if network.bmv2:  # BMv2 owns the node's ports and routes every address of the network (Network._routes)
        log = folder / ("bmv2.log" if switch.name == "switch" else f"bmv2.{switch.name}.log")
        command += ["--target", "bmv2", "--mac", switch.mac, "--bmv2-log", str(log)]
        command += [f"--interface={port}@{interface}" for port, interface in enumerate(switch.ports, start=1)]
        command += [f"--route={route.ip}={route.mac}@{route.port}" for route in switch.routes]
    return command


def switch_environment(run: Run, network: Network, job: Job, host: int) -> dict[str, str]:
    """The switch variables of a switch job's worker on `host`: INA_SWITCH is its rack's leaf and INA_SPINE the spine
    where the job aggregates at two levels, else INA_SWITCH is the run's one switch (the spine's place in a racked run)."""
    if run.racks and job.levels == 2:
        return _addresses("INA_SWITCH", network.switches[f"leaf{run.rack_of(host)}"]) | _addresses("INA_SPINE", network.switches["spine"])
    return _addresses("INA_SWITCH", network.switches["spine" if run.racks else "switch"])


def _addresses(variable: str, switch: SwitchNode) -> dict[str, str]:
    return {variable: f"{switch.ip}:{SWITCH_PORT}", f"{variable}_CONTROL": f"{switch.control_ip}:{SWITCH_CONTROL_PORT}"}


def _record_metrics(run: Run, network: Network, processes: Processes, folder: Path) -> Any:
    """Scrape every switch's and the PS's /metrics into the round's metrics.jsonl, from the PS host
    (which reaches every control API), until stopped (ina.testbed.scrape)."""
    services = [f"ps={network.ps.ip}:{PS_CONTROL_PORT}"]
    if any(j.transport == "switch" for j in run.jobs):
        services += [f"{name}={switch.control_ip}:{SWITCH_CONTROL_PORT}" for name, switch in network.switches.items()]
    command = [*ina_command()[:2], "ina.testbed.scrape", str(folder / results.METRICS), *services, "--interval", str(METRICS_EVERY)]
    return processes.start("metrics", network.ps.node, command, folder / "metrics.log", base_environment(False))


def _run_phase(run: Run, network: Network, processes: Processes, folder: Path, policy: str, jobs: list[Job],
               deadline: float, say: Callable[[str], None]) -> list[dict[str, Any]]:  # fmt: skip
    """Launch every job of the phase at once; once all are set up, start the phase's clock (each job begins training
    its `start` seconds later); wait for all. Their outcomes: JCT from the job's start to its end of training."""
    launched = {}
    go = folder / f"go.{jobs[0].phase}"
    for job in jobs:
        port = MASTER_PORT + run.jobs.index(job)
        job_dir = folder / job.name
        job_dir.mkdir(parents=True, exist_ok=True)
        if policy == "static" and job.uses_switch:
            job = replace(job, window=static_window(job, run))  # a partition of its own: the pool's share
        spec_file = job_dir / "job.json"
        spec_file.write_text(json.dumps(asdict(job)))
        ranks = []
        for rank, host in enumerate(job.hosts):
            endpoint = network.workers[host]
            env = base_environment(run.impaired)
            on_host = [r for r, h in enumerate(job.hosts) if h == host]  # several ranks on a host: one multi-GPU node
            env.update(RANK=str(rank), WORLD_SIZE=str(job.workers), LOCAL_RANK=str(on_host.index(rank)),
                       LOCAL_WORLD_SIZE=str(len(on_host)), INA_NODE=f"host{host}",
                       MASTER_ADDR=network.workers[job.hosts[0]].ip, MASTER_PORT=str(port),
                       GLOO_SOCKET_IFNAME=endpoint.interface, INA_BIND=endpoint.ip)  # fmt: skip
            env[clock.GO_FILE] = str(go)
            if job.uses_aggregators:
                env.update(INA_PS=f"{network.ps.ip}:{PS_PORT}", INA_PS_CONTROL=f"{network.ps.ip}:{PS_CONTROL_PORT}")
            if job.uses_switch:
                env.update(switch_environment(run, network, job, host))
            command = [*ina_command()[:2], "ina.testbed.worker", str(spec_file), str(job_dir)]
            ranks.append(processes.start(f"{job.name} rank {rank}", endpoint.node, command, job_dir / f"rank{rank}.log", env))
        launched[job.name] = (job, time.monotonic(), ranks)
    _start_clock(go, folder, launched, policy, deadline)
    outcomes, running, shown = [], dict(launched), time.monotonic()
    while running:
        for name, (job, _, ranks) in list(running.items()):
            codes = [p.poll() for p in ranks]
            for rank, (process, code) in enumerate(zip(ranks, codes)):
                if code not in (None, 0):
                    raise _rank_failed(policy, name, rank, process, code)
            if all(code == 0 for code in codes):
                jct = json.loads((folder / name / "summary.json").read_text())["train_time"]
                del running[name]
                say(f"ina testbed: [{policy}] {name} done: JCT {jct:.1f} s")
                outcomes.append({"policy": policy, "job": name, "jct": jct, "dir": str(folder / name)})
        if time.monotonic() > deadline:
            raise RunTimeout(f"the run's timeout of {run.timeout:g} s passed with jobs {sorted(running)} unfinished; "
                             "raise 'timeout' in the run file, or shorten the jobs")  # fmt: skip
        if running and time.monotonic() - shown >= PROGRESS_EVERY:
            shown = time.monotonic()
            for name, (job, began, _) in running.items():
                say(f"ina testbed: [{policy}] {name}: {results.progress(folder / name, job)} ({time.monotonic() - began:.0f} s)")
        time.sleep(0.2)
    return outcomes


def _rank_failed(policy: str, name: str, rank: int, process: Any, code: int, when: str = "") -> ProcessFailed:
    return ProcessFailed(f"[{policy}] job {name!r}: rank {rank} exited with status {code}{when}; "
                         f"its log ({process.log}) ends:\n{process.tail()}")  # fmt: skip


def _start_clock(go: Path, folder: Path, launched: dict[str, Any], policy: str, deadline: float) -> None:
    """Once every rank of the phase is set up (its ready file), write the phase's start time (the shared
    monotonic clock) to `go`: each job begins training its `start` seconds after it, so that start-up
    (processes, imports, rendezvous) stays out of the jobs' completion times."""
    while not all((folder / name / clock.ready_file(rank)).exists() for name, (job, _, _) in launched.items() for rank in range(job.workers)):
        for name, (_, _, ranks) in launched.items():
            for rank, process in enumerate(ranks):
                if (code := process.poll()) is not None:
                    raise _rank_failed(policy, name, rank, process, code, " before training")
        if time.monotonic() > deadline:
            raise RunTimeout("the run's timeout passed while its jobs were starting; raise 'timeout' in the run file")
        time.sleep(0.1)
    partial = go.with_suffix(".part")
    partial.write_text(repr(time.monotonic() + START_MARGIN))
    partial.rename(go)
