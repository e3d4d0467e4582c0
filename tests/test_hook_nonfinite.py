"""Non-finite and extreme gradients through the hook, on every transport, in real worker processes.

A loss-scale overflow on one worker must make every worker skip that step, exactly as with
torch's default allreduce, and leave the replicas identical; extreme finite buckets must
average correctly. The switch and the PS run on loopback (the ``aggregators`` fixture).
"""
import math

import pytest
import torch
import torch.distributed as dist
from conftest import UDP_TRANSPORTS, FakeBucket, loss_on, mlp, needs_cuda, regression_problem, shard, thc_state
from torch.nn.parallel import DistributedDataParallel

from ina import thc_hook
from ina.launch import run_workers

TRANSPORTS = ("collective", *UDP_TRANSPORTS)
STEPS, OVERFLOW = 7, 3  # THC from step 2 (error feedback needs start_iter >= 2); rank 1 overflows at step 3


def _train_through_an_overflow(rank: int, workers: int, options: dict, device: str, dtype: torch.dtype) -> dict:
    """Mixed-precision training with a GradScaler, with the default allreduce and through each transport.

    Rank 1's loss is inf at step OVERFLOW. Per run: the steps the scaler skipped (its scale only
    changes on a skipped step: growth would take 1000 good ones), whether the error memory
    changed during the skipped step, the state's iteration, and the final parameters.
    """
    if device == "cuda":
        torch.cuda.set_device(rank)
    x, y = (t.to(device) for t in regression_problem())
    outcome = {}
    for name in ("default", *(TRANSPORTS if device == "cpu" else ("collective",))):
        model = mlp().to(device)
        ddp = DistributedDataParallel(model, device_ids=[rank] if device == "cuda" else None)
        state = None
        if name != "default":
            state = thc_state(name, options, start_iter=2, error_feedback=True)
            ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=1000)
        skipped, memory_kept = [], None
        for step in range(STEPS):
            batch = shard(step, rank, workers).to(device)
            optimizer.zero_grad()
            with torch.autocast(device, dtype=dtype):
                loss = loss_on(ddp, x[batch], y[batch])
            if step == OVERFLOW and rank == 1:
                loss = loss * math.inf
            before, memory = scaler.get_scale(), [m.clone() for m in state.error_dict.values()] if state else []
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            if scaler.get_scale() < before:
                skipped.append(step)
                if state:
                    memory_kept = all(torch.equal(a, b) for a, b in zip(memory, state.error_dict.values()))
        with torch.no_grad():
            final = loss_on(model, x, y).item()
        outcome[name] = {"skipped": skipped, "memory kept": memory_kept, "loss": final,
                         "iteration": state.iteration if state else STEPS,
                         "parameters": [p.detach().cpu() for p in model.parameters()]}  # fmt: skip
        dist.barrier()
        if state:
            state.transport.close()
    return outcome


def _check_every_worker_skipped_the_overflow_step_alike(results: list[dict]) -> None:
    initial = loss_on(mlp(), *regression_problem()).item()
    for name, first in results[0].items():
        for result in results:
            run = result[name]
            assert run["skipped"] == [OVERFLOW], (name, run["skipped"])  # as the default allreduce skips it
            assert run["memory kept"] in (None, True) and run["iteration"] == STEPS, name
            assert all(bool(p.isfinite().all()) for p in run["parameters"]), name
            assert all(torch.equal(a, b) for a, b in zip(run["parameters"], first["parameters"])), name
        assert first["loss"] < 0.8 * initial, (name, first["loss"], initial)  # training went on
    assert all(result[name]["memory kept"] for result in results for name in result if name != "default")


def test_a_gradscaler_skips_the_overflow_step_on_every_worker_with_every_transport(transport_options):
    results = run_workers(_train_through_an_overflow, 2, transport_options, "cpu", torch.bfloat16, timeout=60)
    assert set(results[0]) == {"default", *TRANSPORTS}
    _check_every_worker_skipped_the_overflow_step_alike(results)


@needs_cuda
def test_a_gradscaler_skips_the_fp16_overflow_step_on_every_gpu():
    workers = min(2, torch.cuda.device_count())
    if workers < 2:
        pytest.skip("needs 2 GPUs: one worker overflows, the other must skip too")
    results = run_workers(_train_through_an_overflow, workers, {}, "cuda", torch.float16, backend="nccl")
    _check_every_worker_skipped_the_overflow_step_alike(results)


CASES = {  # name: (dtype, how rank r's bucket is made from its Gaussian g)
    "unit": (torch.float32, lambda r, g: g),
    "squares beyond fp32": (torch.float32, lambda r, g: g * 2.0**100),
    "denormal": (torch.float32, lambda r, g: g * 2.0**-140),
    "all zero": (torch.float32, lambda r, g: torch.zeros_like(g)),
    "zero on rank 0": (torch.float32, lambda r, g: g * r),
    "zero on rank 0, denormal on rank 1": (torch.float32, lambda r, g: g * r * 2.0**-140),
    "inf on rank 1": (torch.float32, lambda r, g: torch.where(torch.arange(g.numel()) == 7 * r, math.inf, g)),
    "nan on rank 0, bf16": (torch.bfloat16, lambda r, g: g if r else torch.full_like(g, math.nan)),
    "overflow on rank 1, fp16": (torch.float16, lambda r, g: g * 1e5 ** r),
    "after them": (torch.float32, lambda r, g: g),
}


def _extreme_buckets(rank: int, workers: int, options: dict[str, dict[str, str]]) -> dict[str, dict[str, torch.Tensor]]:
    """Each case as one bucket of 3000 through each transport, all in round 0 (same signs and streams)."""
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(rank))
    outcome = {}
    for name in TRANSPORTS:
        state = thc_state(name, options, start_iter=0)
        outcome[name] = {}
        for case, (dtype, make) in CASES.items():
            bucket = FakeBucket(make(rank, gradient.clone()).to(dtype), index=0, last=False)  # the hook writes into it
            outcome[name][case] = thc_hook(state, bucket).wait().float()
        dist.barrier()
        state.transport.close()
    return outcome


def test_extreme_and_non_finite_buckets_through_every_transport(transport_options):
    results = run_workers(_extreme_buckets, 2, transport_options, timeout=60)
    gradients = [torch.randn(3000, generator=torch.Generator().manual_seed(r)).double() for r in range(2)]
    for name in TRANSPORTS:
        means = results[0][name]
        assert all(_same_bits(results[1][name][case], mean) for case, mean in means.items()), name
        for case in ("inf on rank 1", "nan on rank 0, bf16", "overflow on rank 1, fp16"):
            assert bool(means[case].isnan().all()), (name, case)
        assert torch.equal(means["all zero"], torch.zeros(3000)), name
        assert torch.equal(means["squares beyond fp32"], means["unit"] * 2.0**100), name
        assert torch.equal(means["after them"], means["unit"]), name  # sequence numbers stayed aligned
        for case, scale, exact in [
            ("unit", 1.0, (gradients[0] + gradients[1]) / 2),
            ("denormal", 2.0**140, (gradients[0] + gradients[1]) / 2),
            ("zero on rank 0", 1.0, gradients[1] / 2),
            ("zero on rank 0, denormal on rank 1", 2.0**140, gradients[1] / 2),
        ]:
            mean = means[case].double() * scale
            assert bool(mean.isfinite().all()), (name, case)
            assert float((mean - exact).norm() / exact.norm()) < 0.3, (name, case)  # THC's error, 2 workers
    for case, mean in results[0]["collective"].items():  # the same bits on every path
        assert all(_same_bits(results[0][name][case], mean) for name in UDP_TRANSPORTS), case


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical fp32 tensors (NaN equals NaN)."""
    return torch.equal(a.view(torch.int32), b.view(torch.int32))
