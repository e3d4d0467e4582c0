"""Backward time per step with DDP's allreduce and with thc_hook, side by side in one process.

    python -m benchmarks.hook_step                              # one Linear(4096, 4096): 16.8M parameters
    python -m benchmarks.hook_step --features 4096 --layers 6   # a stack of 6: 100.7M parameters
    python -m benchmarks.hook_step --device cuda                # the same on a GPU (NCCL)

One worker (world size 1; gloo on CPU, NCCL on CUDA) trains two copies of the same model, one
with DDP's built-in allreduce and one with ``thc_hook`` (compressing from the first step), on
the same batch. A step times ``loss.backward()``, which returns once every bucket's hook has
finished; the two models take turns step by step (which goes first alternates), so load from
elsewhere on the machine slows both. The table shows the median over ``--steps`` after
``--warmup`` steps, and the ratio "added backward time / allreduce backward time": what THC
costs a worker beyond the plain reduction. With one worker the reductions move no data, so this
is the codec's own cost.
"""
from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ina import THCState, thc_hook


def build_model(features: int, layers: int, device: torch.device) -> torch.nn.Module:
    """``layers`` Linear(features, features) with ReLUs between; the same weights on every call."""
    torch.manual_seed(0)
    modules: list[torch.nn.Module] = []
    for layer in range(layers):
        modules += [torch.nn.ReLU()] if layer else []
        modules.append(torch.nn.Linear(features, features))
    return torch.nn.Sequential(*modules).to(device)


def ddp(model: torch.nn.Module, device: torch.device, hook: bool) -> DistributedDataParallel:
    wrapped = DistributedDataParallel(model, device_ids=[device.index or 0] if device.type == "cuda" else None)
    if hook:
        wrapped.register_comm_hook(THCState(start_iter=0), thc_hook)
    return wrapped


def backward_seconds(model: DistributedDataParallel, batch: torch.Tensor, sync: Callable[[], None]) -> float:
    """Wall time of one backward pass (forward and zeroing excluded)."""
    model.zero_grad(set_to_none=True)
    loss = model(batch).square().mean()
    sync()
    start = time.perf_counter()
    loss.backward()
    sync()
    return time.perf_counter() - start


def measure(models: dict[str, DistributedDataParallel], batch: torch.Tensor, sync: Callable[[], None], warmup: int,
            steps: int) -> dict[str, list[float]]:  # fmt: skip
    """Each model's backward seconds per timed step; the models take turns, first one then the other."""
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for step in range(warmup + steps):
        turns = list(models.items())
        for name, model in turns if step % 2 else reversed(turns):
            elapsed = backward_seconds(model, batch, sync)
            if step >= warmup:
                seconds[name].append(elapsed)
    return seconds


def report(seconds: dict[str, list[float]]) -> None:
    print(f"{'hook':>10} {'backward ms':>12} {'added ms':>9} {'added / allreduce':>18}")
    base = statistics.median(seconds["allreduce"])
    for name, times in seconds.items():
        median = statistics.median(times)
        added = "" if name == "allreduce" else f"{(median - base) * 1e3:9.1f} {(median - base) / base:17.2f}x"
        print(f"{name:>10} {median * 1e3:12.1f} {added}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:index]")
    parser.add_argument("--backend", help="process group backend (default: gloo on CPU, nccl on CUDA)")
    parser.add_argument("--features", type=int, default=4096, help="each Linear is features x features + bias")
    parser.add_argument("--layers", type=int, default=1, help="Linear layers in the stack")
    parser.add_argument("--batch", type=int, default=128, help="samples per step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per model (the median is shown)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (DDP rebuilds its buckets)")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    backend = args.backend or ("nccl" if device.type == "cuda" else "gloo")
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        models = {name: ddp(build_model(args.features, args.layers, device), device, name == "thc")
                  for name in ("allreduce", "thc")}  # fmt: skip
        batch = torch.randn(args.batch, args.features, device=device)
        seconds = measure(models, batch, sync, args.warmup, args.steps)
    finally:
        dist.destroy_process_group()
    parameters = sum(p.numel() for p in models["thc"].parameters())
    where = f"{device.type} ({backend})" + (f", {torch.get_num_threads()} threads" if device.type == "cpu" else "")
    print(f"{args.layers} x Linear({args.features}, {args.features}): {parameters / 1e6:.1f}M parameters, "
          f"batch {args.batch}, {where}; median of {args.steps} steps")  # fmt: skip
    report(seconds)


if __name__ == "__main__":
    main()
