"""What runs on the test hosts of tests/test_p4_udp.py, inside their network namespace:
`python p4_hosts.py sums JSON` (concurrent jobs of UDP engines; exactness against direct sums)
or `python p4_hosts.py ddp JSON` (DDP training with transport="switch" and "collective"), or
`python p4_hosts.py across_a_restart JSON` (the same, slower, while the test restarts the switch).
It prints one JSON line with what it measured."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from ina.control import Endpoint, JobSpec  # noqa: E402
from ina.net.udp import open_socket  # noqa: E402
from ina.protocol import pack_fields, unpack_fields  # noqa: E402
from ina.transport.engine import EngineConfig  # noqa: E402
from ina.transport.priority import FixedPriority  # noqa: E402
from ina.transport.udp_engine import UdpEngine  # noqa: E402
from ina.transport.udp_setup import Aggregator, deregister, locate, register  # noqa: E402


class _Job(NamedTuple):
    id: int
    engines: list[UdpEngine]
    values: np.ndarray  # (reductions, workers, coordinates)
    norms: np.ndarray  # (reductions, workers)
    window: int
    holds_slots: bool


def sums(options: dict) -> dict:
    """Jobs of `workers` engines each, every reduction checked against the direct sum.

    Jobs with `holds_slots` start first, in order, without their last worker, so each one's
    partials sit in the switch when the next arrives (whatever the timing of the threads); then
    the other jobs run, and then the holders' last workers join, again in order."""
    ps = Aggregator.configure("ps", control=options["ps_control"])
    switch = Aggregator.configure("switch", control=options["switch_control"])
    deployment = locate(ps, switch)
    rng = np.random.default_rng(options["seed"])
    jobs, failures = [], []
    for number, job in enumerate(options["jobs"]):
        n = job["workers"]
        sockets = [open_socket((options["host"], 0)) for _ in range(n)]
        spec = JobSpec(job=100 + number, workers=tuple(Endpoint(*s.getsockname()) for s in sockets), window=job["window"],
                       lane_bits=8, priority_cap=job.get("priority_cap", 255))  # fmt: skip
        registration = register(ps, switch, deployment, spec, pick_job=True)
        sources = frozenset({deployment.switch, deployment.ps})
        rto = job.get("rto", 0.05)
        engines = [UdpEngine(EngineConfig(job=registration.job, rank=rank, workers=n, words=deployment.words,
                                          window=job["window"], destination=deployment.switch, sources=sources,
                                          pool=deployment.pool, slot_base=registration.slot_base, span=registration.span, min_rto=min(rto, 0.02),
                                          initial_rto=rto, max_rto=max(rto, 0.5), peer_timeout=60.0, pad=not deployment.short_chunks),
                             sock, FixedPriority(job["priority"])) for rank, sock in enumerate(sockets)]  # fmt: skip
        values = rng.integers(0, 256 // n, size=(job["reductions"], n, job["coordinates"]), dtype=np.uint32)
        norms = rng.random((job["reductions"], n)).astype(np.float32)
        jobs.append(_Job(registration.job, engines, values, norms, job["window"], job.get("holds_slots", False)))

    submitted: dict[tuple[int, int], list] = {}

    def submit(job: _Job, rank: int) -> None:
        futures = submitted.setdefault((job.id, rank), [])
        for r in range(job.values.shape[0]):
            futures.append(("max", r, job.engines[rank].submit(job.norms[r, rank : rank + 1].view(np.uint32), op="max",
                                                                lane_bits=32)))  # fmt: skip
            futures.append(("sum", r, job.engines[rank].submit(pack_fields(job.values[r, rank], 8), lane_bits=8)))

    def run(job: _Job, ranks: range) -> None:
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
    for job in holders:
        claimed = switch.client().counters()["claimed"]
        run(job, range(len(job.engines) - 1))
        _wait_for_claims(switch, claimed, job.window)
    for job in others:
        run(job, range(len(job.engines)))
    for job in others:
        finish(job)
    for job in holders:
        run(job, range(len(job.engines) - 1, len(job.engines)))
        finish(job)
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
    for job in jobs:
        for engine in job.engines:
            engine.close()
        deregister(ps, switch, job.id)
    return {"failures": failures, "checked": sum(len(f) for f in submitted.values()), "counters": counters}


def _wait_for_claims(switch: Aggregator, before: int, expected: int, deadline: float = 0.3) -> None:
    """Until the switch has claimed `expected` more slots (a lost first transmission never
    claims one, so at most `deadline` seconds)."""
    end = time.monotonic() + deadline
    while switch.client().counters()["claimed"] - before < expected and time.monotonic() < end:
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
    import torch
    import torch.distributed as dist
    from conftest import mlp, regression_problem, thc_state, train
    from torch.nn.parallel import DistributedDataParallel

    from ina import thc_hook

    options = {"switch": {"peer_timeout": 20.0, "failover": 0.5, "failback": 2.0}}
    final, paths, counters = [], [], {}
    for name in ("collective", "switch"):
        torch.manual_seed(0)
        model = mlp()
        state = thc_state(name, options, start_iter=2)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(state, thc_hook)
        train(ddp, regression_problem(), range(steps), pause=0.1 if name == "switch" else 0.0)  # while the switch restarts
        final.append([p.detach().clone() for p in model.parameters()])
        if name == "switch":
            paths, counters = [path for _, path in state.paths], state.transport.counters
        dist.barrier()
        state.transport.close()
    return {"equal": all(torch.equal(a, b) for a, b in zip(*final)), "paths": paths, "counters": counters}


if __name__ == "__main__":
    command, options = sys.argv[1], json.loads(sys.argv[2])
    print(json.dumps({"sums": sums, "ddp": ddp, "across_a_restart": across_a_restart}[command](options)), flush=True)
