"""What runs on the test hosts of tests/test_p4_udp.py, inside their network namespace:
`python p4_hosts.py sums JSON` (concurrent jobs of UDP engines; exactness against direct sums)
or `python p4_hosts.py ddp JSON` (DDP training with transport="switch" and "collective"), or
`python p4_hosts.py across_a_restart JSON` (the same, slower, while the test restarts the switch).
It prints one JSON line with what it measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bmv2_support import Link, run  # noqa: E402

from ina.control import Endpoint, JobSpec  # noqa: E402
from ina.net.udp import open_socket  # noqa: E402
from ina.protocol import Flag, pack_fields, unpack_fields  # noqa: E402
from ina.transport.engine import EngineConfig  # noqa: E402
from ina.transport.priority import FixedPriority  # noqa: E402
from ina.transport.udp_engine import UdpEngine  # noqa: E402
from ina.transport.udp_setup import Aggregator, LeaseKeeper, deregister, locate, register  # noqa: E402


class _Job(NamedTuple):
    id: int
    engines: list[UdpEngine]
    ports: tuple[int, ...]  # the workers' UDP ports
    values: np.ndarray  # (reductions, workers, coordinates)
    norms: np.ndarray  # (reductions, workers)
    window: int
    holds_slots: bool


_FLAGS_BIT = (8 + 3) * 8
"""Where a packet's header flags start, in bits from its UDP header: 8 bytes of UDP, then magic, version,
kind and flags (docs/protocol.md, section 2)."""
_SETTLE_SECONDS = 60.0
"""How long a scenario step may take to reach the state the next one needs (it takes well under a
second; only a switch that stopped deciding packets takes this long, and then the run fails saying so)."""


class ResendHold:
    """Drops one job's RESENDs at this host's egress until `release()`. A RESEND flushes the slot that
    holds its chunk (docs/protocol.md, section 5), so while a scenario needs a job's partials to stay in
    the switch, its workers' resend timers must not reach the switch, however slow the machine. To the
    engines a dropped RESEND is a lost packet: they send it again after the release."""

    def __init__(self, device: str, job: _Job) -> None:
        self.table = f"ina_hold_{job.id}"
        ports = ", ".join(map(str, job.ports))
        resend = int(Flag.RESEND)
        rules = (f"table netdev {self.table} {{\nchain out {{ type filter hook egress device \"{device}\" priority -10; policy accept;\n"
                 f"udp sport {{ {ports} }} @th,{_FLAGS_BIT},8 & {resend} == {resend} drop\n}}\n}}\n")  # fmt: skip
        run("nft", "-f", "-", stdin=rules)
        self.held = True

    def release(self) -> None:
        if self.held:
            subprocess.run(["nft", "delete", "table", "netdev", self.table], capture_output=True)
            self.held = False


def sums(options: dict) -> dict:
    """Jobs of `workers` engines each, every reduction checked against the direct sum.

    Jobs with `holds_slots` start first, in order, without their last worker, their RESENDs held at this
    host (ResendHold), so each one's partials sit in the switch when the next job's first packets come:
    each waits until the switch has claimed its window's slots, and then the one before it resends
    again. Then `options["impair"]` impairs the links, the other jobs run, and the holders' last workers
    join in order; each waits until its chunks have met the next holder's partials (a collision), and
    then that holder resends again."""
    ps = Aggregator.configure("ps", control=options["ps_control"])
    switch = Aggregator.configure("switch", control=options["switch_control"])
    deployment = locate(ps, switch)
    rng = np.random.default_rng(options["seed"])
    jobs, failures, keepers = [], [], []
    for number, job in enumerate(options["jobs"]):
        n = job["workers"]
        sockets = [open_socket((options["host"], 0)) for _ in range(n)]
        spec = JobSpec(job=100 + number, workers=tuple(Endpoint(*s.getsockname()) for s in sockets), window=job["window"],
                       lane_bits=8, priority_cap=job.get("priority_cap", 255))  # fmt: skip
        registration = register(ps, switch, deployment, spec, pick_job=True)
        if registration.lease:  # renewed as a job's rank 0 does, however slow the run
            keepers.append(LeaseKeeper([ps, switch], registration.job, registration.lease))
        sources = frozenset({deployment.switch, deployment.ps})
        rto = job.get("rto", 0.05)
        engines = [UdpEngine(EngineConfig(job=registration.job, rank=rank, workers=n, words=deployment.words,
                                          window=job["window"], destination=deployment.switch, sources=sources,
                                          pool=deployment.pool, slot_base=registration.slot_base, span=registration.span, min_rto=min(rto, 0.02),
                                          initial_rto=rto, max_rto=max(rto, 0.5), peer_timeout=60.0, pad=not deployment.short_chunks),
                             sock, FixedPriority(job["priority"])) for rank, sock in enumerate(sockets)]  # fmt: skip
        values = rng.integers(0, 256 // n, size=(job["reductions"], n, job["coordinates"]), dtype=np.uint32)
        norms = rng.random((job["reductions"], n)).astype(np.float32)
        ports = tuple(worker.port for worker in spec.workers)
        jobs.append(_Job(registration.job, engines, ports, values, norms, job["window"], job.get("holds_slots", False)))

    submitted: dict[tuple[int, int], list] = {}

    def submit(job: _Job, rank: int) -> None:
        futures = submitted.setdefault((job.id, rank), [])
        for r in range(job.values.shape[0]):
            futures.append(("max", r, job.engines[rank].submit(job.norms[r, rank : rank + 1].view(np.uint32), op="max",
                                                                lane_bits=32)))  # fmt: skip
            futures.append(("sum", r, job.engines[rank].submit(pack_fields(job.values[r, rank], 8), lane_bits=8)))

    def run_ranks(job: _Job, ranks: range) -> None:
        threads = [threading.Thread(target=submit, args=(job, rank)) for rank in ranks]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def finish(job: _Job) -> None:
        for rank in range(len(job.engines)):
            for _, _, future in submitted[(job.id, rank)]:
                future.result(timeout=120)

    holders, others = [job for job in jobs if job.holds_slots], [job for job in jobs if not job.holds_slots]
    holds = [ResendHold(options["device"], job) for job in holders]
    try:
        for number, job in enumerate(holders):
            before = switch.client().counters()["claimed"]
            run_ranks(job, range(len(job.engines) - 1))
            _settle(switch, "claimed", before + job.window)  # its first packets are in the slots
            if number:
                holds[number - 1].release()  # the job before met them
        impair = options.get("impair")
        if impair:
            for link in impair["links"]:
                Link(*link).impair(impair["loss"], impair["duplicate"], impair["reorder"])
        for job in others:
            run_ranks(job, range(len(job.engines)))
        for job in others:
            finish(job)
        for number, job in enumerate(holders):
            holds[number].release()  # the last holder's, where there is no later one to meet its partials
            before = switch.client().counters()["collision"]
            run_ranks(job, range(len(job.engines) - 1, len(job.engines)))
            if number + 1 < len(holders):
                _settle(switch, "collision", before + 1)  # its chunks met the next holder's partials
                holds[number + 1].release()
            finish(job)
    finally:
        for hold in holds:
            hold.release()
    for job in jobs:
        for rank in range(len(job.engines)):
            for op, r, future in submitted[(job.id, rank)]:
                got = future.result(timeout=120)
                if op == "sum":
                    ok = np.array_equal(unpack_fields(got, 8, job.values.shape[2]), job.values[r].sum(axis=0))
                else:
                    ok = got.view(np.float32)[0] == job.norms[r].max()
                if not ok:
                    failures.append([job.id, rank, op, r])
    counters = {"switch": switch.client().counters(), "ps": ps.client().counters()}
    for keeper in keepers:
        keeper.close()
    for job in jobs:
        for engine in job.engines:
            engine.close()
        deregister([ps, switch], job.id)
    return {"failures": failures, "checked": sum(len(f) for f in submitted.values()), "counters": counters}


def _settle(switch: Aggregator, counter: str, at_least: int) -> None:
    """Until the switch's `counter` reaches `at_least`; RuntimeError with the counters after
    _SETTLE_SECONDS (the scenario did not reach the state it needs)."""
    end = time.monotonic() + _SETTLE_SECONDS
    while (counters := switch.client().counters())[counter] < at_least:
        if time.monotonic() > end:
            raise RuntimeError(f"the switch's {counter} stayed below {at_least} for {_SETTLE_SECONDS:g} s: {counters}")
        time.sleep(0.005)


def ddp(options: dict) -> dict:
    """The final losses of the same DDP training with the collective, switch and PS transports
    (tests/test_transport_udp.py's training), the aggregators named by INA_* variables."""
    os.environ.update(options["environment"])
    from test_transport_udp import _losses

    from ina.launch import run_workers

    results = run_workers(_losses, options["workers"], {}, timeout=300)
    return {"losses": [{name: loss for name, (loss, *_) in result.items()} for result in results]}


def across_a_restart(options: dict) -> dict:
    """DDP through the switch (failing over to the PS and back while the test restarts it) and over
    the collective: per rank, whether the parameters are equal, and the paths the switch run took."""
    os.environ.update(options["environment"])
    from ina.launch import run_workers

    return {"ranks": run_workers(_train_across_a_restart, options["workers"], options["steps"], timeout=300)}


def _train_across_a_restart(rank: int, workers: int, steps: int) -> dict:
    """Through the switch for at least `steps` steps and on until every rank is back on the switch after
    the collective (the test restarts the switch meanwhile, however long BMv2 takes to start), at most
    ten times as long; then as many steps over the collective."""
    import torch
    import torch.distributed as dist
    from conftest import mlp, regression_problem, thc_state, train
    from torch.nn.parallel import DistributedDataParallel

    from ina import thc_hook

    options = {"switch": {"peer_timeout": 20.0, "failover": 0.5, "failback": 2.0}}
    final, paths, counters, done = [], [], {}, 0
    data = regression_problem()
    for name in ("switch", "collective"):
        torch.manual_seed(0)
        model = mlp()
        state = thc_state(name, options, start_iter=2)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        if name == "switch":
            while done < 10 * steps:
                train(ddp, data, range(done, done + 1), pause=0.1)  # stateless SGD: one step a call
                done += 1
                went = [path for _, path in state.paths]
                back = torch.tensor([int(done >= steps and "collective" in went and went[-1] == "switch")])
                dist.all_reduce(back, op=dist.ReduceOp.MIN)
                if back.item():
                    break
            paths, counters = [path for _, path in state.paths], state.transport.counters
        else:
            train(ddp, data, range(done))
        final.append([p.detach().clone() for p in model.parameters()])
        dist.barrier()
        state.transport.close()
    return {"equal": all(torch.equal(a, b) for a, b in zip(*final)), "paths": paths, "counters": counters, "steps": done}


if __name__ == "__main__":
    command, options = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"sums": sums, "ddp": ddp, "across_a_restart": across_a_restart}[command](options)), flush=True)
