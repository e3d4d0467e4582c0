"""One training process of a testbed job: ``python -m ina.testbed.worker JOB.json OUT_DIR``.

It runs in its worker host with torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; gloo over the emulated links, GLOO_SOCKET_IFNAME naming the host's interface)
and, for THC through the switch or the PS, the INA_* variables of docs/transport.md. It trains
the job's model (``ina.workloads``: ina demo's MLP, a convnet or a transformer) with its optimiser
and schedule and the job's hook, and writes, as it goes,
one JSON line per step to ``OUT_DIR/rank<R>.jsonl``: step, wall time since training began, the
step's own time, this rank's loss, the bytes its interface sent and received during the step,
the bytes the hook handed to its transport, and (rank 0, every ``eval_every`` steps) the test
accuracy (for a language model, the test loss). Rank 0 ends with ``OUT_DIR/summary.json`` and the final parameters (``params.pt``,
their SHA-256 in the summary), so that runs can be compared bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ina.demo_training import batches_of
from ina.testbed import clock
from ina.testbed.spec import Job, job_from_json
from ina.testbed.uplinks import interface_bytes

TIMEOUT = timedelta(seconds=600)


def attach_hook(job: Job, ddp: DistributedDataParallel) -> Optional[Any]:
    """Register the job's comm hook; the THCState for thc (its transport to close at the end)."""
    if job.hook == "fp32":
        return None
    if job.hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if job.hook == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=job.rank,
                                            start_powerSGD_iter=job.warm_up, random_seed=job.seed)  # fmt: skip
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return None
    if job.hook == "topk":
        from ina.topk import TopKState, topk_hook

        topk = TopKState(ratio=job.ratio, start_iter=job.warm_up)
        ddp.register_comm_hook(topk, topk_hook)
        return topk
    from ina.hook import THCState, thc_hook
    from ina.transport import create_transport

    options: dict[str, Any] = {}
    if job.transport != "collective":
        options = {"window": job.window, "priority_cap": job.priority_cap, "min_rto": job.min_rto}
        options |= {"failover": job.failover, "failback": job.failback, "policy": priority_policy(job, ddp)}
    transport = create_transport(job.transport, None, **options)
    state = THCState(bits=job.bits, granularity=job.thc_granularity, start_iter=job.warm_up, transport=transport, seed=job.seed,
                     hierarchy=job.hierarchy)  # fmt: skip
    ddp.register_comm_hook(state, thc_hook)
    return state


def priority_policy(job: Job, ddp: DistributedDataParallel) -> Any:
    """The job's end-host priority policy: its fixed `priority`, else `priority_policy` by name; `remaining` is
    told the job's work, its compressed steps' bytes (`ina.hook.step_bytes`)."""
    from ina.hook import step_bytes
    from ina.transport.priority import POLICIES, FixedPriority, RemainingWorkPriority

    if job.priority is not None:
        return FixedPriority(job.priority)
    if job.priority_policy != "remaining":
        return POLICIES[job.priority_policy]()
    parameters = sum(p.numel() for p in ddp.parameters())
    steps = max(job.steps - job.warm_up, 1)
    return RemainingWorkPriority(total_bytes=steps * step_bytes(parameters, dist.get_world_size(), job.bits, job.thc_granularity))


def compute_times(job: Job, rank: int) -> Iterator[float]:
    """Each step's emulated compute on `rank`: `job.compute`, varied uniformly by +-`job.jitter` of it, drawn from
    the job's seed, name and rank so that every policy of a run meets the same stragglers."""
    draws = random.Random(f"{job.seed}/{job.name}/{rank}")
    while True:
        yield job.compute * (1 + draws.uniform(-job.jitter, job.jitter))


def train(job: Job, out: Path, interface: str) -> dict[str, Any]:
    rank, workers = dist.get_rank(), dist.get_world_size()
    from ina.workloads import build

    workload = build(job.kind, job.width, job.seed, job.hidden)
    model = workload.model
    parameters = sum(p.numel() for p in model.parameters())
    options = {}
    if job.hook == "powersgd":
        # One bucket: torch's PowerSGD hook blocks a gloo thread in each bucket's callback, and
        # gloo has two, so a model of more buckets deadlocks (seen with torch 2.13).
        options["bucket_cap_mb"] = 1 + sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    ddp = DistributedDataParallel(model, **options)
    state = attach_hook(job, ddp)
    optimizer, schedule = workload.optimizer(ddp.parameters(), job.lr, job.steps)
    batches = batches_of(workload.train_size, job.batch, torch.Generator().manual_seed(job.seed))
    share = job.batch // workers
    evaluated = None
    log = (out / f"rank{rank}.jsonl").open("w")
    began = clock.wait_for_start(out, rank, job.start, TIMEOUT.total_seconds())
    sent, received = interface_bytes(interface)
    handed = state.bytes_sent if state is not None else 0
    for step, compute in zip(range(job.steps), compute_times(job, rank)):
        start = time.monotonic()
        time.sleep(compute)  # an accelerator's forward and backward: time, no CPU
        batch = next(batches)[rank * share : (rank + 1) * share]
        loss = workload.train_step(ddp, optimizer, schedule, batch)
        end = time.monotonic()
        now_sent, now_received = interface_bytes(interface)
        record: dict[str, Any] = {"step": step, "wall": end - began, "step_time": end - start, "loss": loss.item(),
                                  "tx_bytes": now_sent - sent, "rx_bytes": now_received - received}  # fmt: skip
        sent, received = now_sent, now_received
        if state is not None:
            record["hook_bytes"], handed = state.bytes_sent - handed, state.bytes_sent
            record["path"] = getattr(state, "transport", None) and getattr(inner(state.transport), "path", None)
        if rank == 0 and ((step + 1) % job.eval_every == 0 or step + 1 == job.steps):
            evaluated = workload.evaluate(model)
            record[job.metric] = evaluated
        log.write(json.dumps(record) + "\n")
        log.flush()
    log.close()
    trained = time.monotonic() - began
    if hasattr(state, "transport"):
        dist.barrier()  # every rank has every result: the job may leave its switch and PS
        state.transport.close()
    summary: dict[str, Any] = {"rank": rank, "train_time": trained}
    if rank == 0:
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        torch.save(model.state_dict(), out / "params.pt")
        transport = inner(getattr(state, "transport", None))
        summary.update({"accuracy": None, job.metric: evaluated}, final_loss=loss.item(), parameters=parameters,
                       params_sha256=hashlib.sha256(flat.numpy().tobytes()).hexdigest(),
                       job_id=getattr(transport, "job", None), transport_counters=getattr(transport, "counters", {}))  # fmt: skip
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def inner(transport: Any) -> Any:
    """The transport that reaches the aggregators: a two-level job's rank 0 leads its node through `inner`."""
    return getattr(transport, "inner", transport)


def main(argv: list[str]) -> int:
    job = job_from_json(Path(argv[0]).read_text())
    out = Path(argv[1])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=TIMEOUT)
    try:
        train(job, out, os.environ["GLOO_SOCKET_IFNAME"])
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
