"""The THC hook in real DDP training: gloo worker processes on this machine (NCCL with a GPU)."""
import copy
import pickle
from typing import Optional

import pytest
import torch
import torch.distributed as dist
from conftest import loss_on, mlp, needs_cuda, regression_problem, shard, train
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook
from ina.launch import run_workers

STEPS, LEARNING_RATE = 30, 0.2  # fp32 ends near the noise floor; a quarter of the lr ends 3x above it


def _with_hook(model: torch.nn.Module, state: THCState, **ddp_options) -> DistributedDataParallel:
    ddp = DistributedDataParallel(model, **ddp_options)
    ddp.register_comm_hook(state, thc_hook)
    return ddp


def _final_losses(rank: int, workers: int) -> dict[str, float]:
    data = regression_problem()
    losses = {"initial": loss_on(mlp(), *data).item()}
    for name, state in (("fp32", None), ("thc", THCState(start_iter=2))):
        model = mlp()
        ddp = DistributedDataParallel(model) if state is None else _with_hook(model, state)
        train(ddp, data, range(STEPS), lr=LEARNING_RATE)
        with torch.no_grad():
            losses[name] = loss_on(model, *data).item()
    return losses


def test_thc_training_reaches_the_fp32_loss():
    results = run_workers(_final_losses, 4)
    assert all(r == results[0] for r in results), "workers ended with different parameters"
    losses = results[0]
    assert losses["fp32"] < 0.5 * losses["initial"], losses
    assert abs(losses["thc"] / losses["fp32"] - 1) < 0.05, losses


def _resume(rank: int, workers: int, ddp_options: dict) -> dict:
    """Train 8 steps unbroken, and 5 steps, pickle, restore into a new DDP instance, 3 more."""
    data = regression_problem()
    options = {"start_iter": 2, "error_feedback": True, "seed": 7}
    unbroken = mlp()
    train(_with_hook(unbroken, THCState(**options), **ddp_options), data, range(8))

    first = mlp()
    state = THCState(**options)
    train(_with_hook(first, state, **ddp_options), data, range(5))
    saved_state, saved_model = pickle.dumps(state), copy.deepcopy(first.state_dict())

    resumed = mlp(seed=1)
    resumed.load_state_dict(saved_model)
    restored = pickle.loads(saved_state)
    memory_sizes = sorted(memory.numel() for memory in restored.error_dict.values())
    progress = {"iteration": restored.iteration, "memory sizes": memory_sizes, "layouts": restored.layouts.recorded}
    train(_with_hook(resumed, restored, **ddp_options), data, range(5, 8))
    return {"unbroken": list(unbroken.parameters()), "resumed": list(resumed.parameters()), **progress}


@pytest.mark.parametrize("ddp_options, memory_sizes", [
    ({}, [2372]),  # DDP's default: one bucket, rebuilt in gradient-ready order after the first iteration
    ({"bucket_cap_mb": 0.001}, [2048]),  # one bucket at first, then several (the small ones plain-allreduced)
    ({"find_unused_parameters": True}, [2372]),  # never rebuilt
])  # fmt: skip
def test_pickled_state_resumes_bit_exactly_whatever_ddps_bucket_layout(ddp_options, memory_sizes):
    """A new DDP instance's first iteration has the initial layout, not the rebuilt one the
    checkpoint was made with: the state's recorded layouts make it compress the same vectors."""
    for result in run_workers(_resume, 2, ddp_options):
        assert result["iteration"] == 5
        assert result["memory sizes"] == memory_sizes
        for a, b in zip(result["unbroken"], result["resumed"]):
            assert torch.equal(a, b)
    if not ddp_options:  # the case the layouts are for: the rebuilt bucket is another order of the parameters
        names = [name for name, _ in result["layouts"][0]]
        assert sorted(names) == [(0, position) for position in range(len(names))] and names != sorted(names)


def _averaged_gradients(rank: int, workers: int, dtype: torch.dtype, bits: int, granularity: int) -> dict:
    """THC-averaged gradients of one step against the exact fp32 mean of the local ones."""
    x, y = regression_problem()
    batch = shard(0, rank, workers)
    model = mlp(dtype=dtype)
    state = THCState(start_iter=0, bits=bits, granularity=granularity)
    ddp = _with_hook(model, state)
    with ddp.no_sync():
        loss_on(ddp, x[batch], y[batch]).backward()
    local = torch.cat([p.grad.float().flatten() for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    exact = local / workers
    dist.all_reduce(exact)
    loss_on(ddp, x[batch], y[batch]).backward()
    averaged = torch.cat([p.grad.flatten() for p in model.parameters()])
    return {
        "dtype": averaged.dtype,
        "relative error": ((averaged.float() - exact).norm() / exact.norm()).item(),
        "compressed bytes": state.transport.bytes_sent,
        "padded": state.codec.padded_length(averaged.numel()),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_buckets_of_each_float_dtype_are_averaged(dtype):
    for result in run_workers(_averaged_gradients, 2, dtype, 4, 30):
        assert result["dtype"] == dtype
        assert result["relative error"] < 0.3
        assert result["compressed bytes"] == 4 + 4 * -(-result["padded"] // 5)  # 2 * 30 < 2**6: five lanes an int32


def test_sums_widen_to_9_bit_lanes_when_uint8_could_overflow():
    for result in run_workers(_averaged_gradients, 2, torch.float32, 8, 255):
        assert result["relative error"] < 0.3  # wrapped uint8 sums would be far off
        assert result["compressed bytes"] == 4 + 8 * -(-result["padded"] // 7)  # 2 * 255 < 2**9: seven an int64


def _byte_counts_per_step(rank: int, workers: int) -> list[dict]:
    """Which buckets each step had, and the bytes each path counted during it."""
    data = regression_problem()
    state = THCState(start_iter=2, min_compression_elements=1024)
    buckets: list[tuple[int, int]] = []

    def recording_hook(state: THCState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buckets.append((state.iteration, bucket.buffer().numel()))
        return thc_hook(state, bucket)

    ddp = DistributedDataParallel(mlp(), bucket_cap_mb=0.001)  # one small bucket once rebuilt
    ddp.register_comm_hook(state, recording_hook)
    steps = []
    for step in range(4):
        plain, compressed = state.plain_bytes, state.transport.bytes_sent
        train(ddp, data, range(step, step + 1))
        steps.append(
            {
                "sizes": [size for iteration, size in buckets if iteration == step],
                "plain": state.plain_bytes - plain,
                "compressed": state.transport.bytes_sent - compressed,
                "padded": {n: state.codec.padded_length(n) for _, n in buckets},
            }
        )
    return steps


def test_warm_up_and_small_buckets_take_plain_allreduce():
    steps = run_workers(_byte_counts_per_step, 2)[0]
    for step, counts in enumerate(steps):
        if step < 2:  # warm-up: everything plain
            assert counts["plain"] == 4 * sum(counts["sizes"])
            assert counts["compressed"] == 0
        else:
            small = [n for n in counts["sizes"] if n < 1024]
            large = [n for n in counts["sizes"] if n >= 1024]
            assert small and large, counts
            assert counts["plain"] == 4 * sum(small)
            assert counts["compressed"] == sum(4 + 4 * -(-counts["padded"][n] // 5) for n in large)  # 5 lanes an int32


def _register_and_step(rank: int, workers: int) -> float:
    x, y = regression_problem()
    model = mlp()
    ddp = _with_hook(model, THCState(start_iter=0))
    loss_on(ddp, x, y).backward()
    return sum(p.grad.abs().sum().item() for p in model.parameters())


def test_hook_passes_ddp_registration_checks():
    assert run_workers(_register_and_step, 1)[0] > 0


def _cuda_gradients(rank: int, workers: int) -> dict:
    torch.cuda.set_device(rank)
    x, y = (t.cuda() for t in regression_problem())
    batch = shard(0, rank, workers).cuda()
    results = {}
    for dtype in (torch.float32, torch.bfloat16):
        model = mlp(dtype=dtype).cuda()
        ddp = _with_hook(model, THCState(start_iter=0), device_ids=[rank])
        with ddp.no_sync():
            loss_on(ddp, x[batch], y[batch]).backward()
        exact = torch.cat([p.grad.float().flatten() for p in model.parameters()]) / workers
        model.zero_grad(set_to_none=True)
        dist.all_reduce(exact)
        loss_on(ddp, x[batch], y[batch]).backward()
        averaged = torch.cat([p.grad.float().flatten() for p in model.parameters()])
        results[dtype] = ((averaged - exact).norm() / exact.norm()).item()
    return results


@needs_cuda
def test_nccl_buckets_on_the_gpu_are_averaged():
    workers = min(2, torch.cuda.device_count())
    for errors in run_workers(_cuda_gradients, workers, backend="nccl"):
        assert all(error < 0.3 for error in errors.values()), errors
