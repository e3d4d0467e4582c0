"""Top-k sparsification with error feedback as a DDP comm hook: a baseline to compare THC with, not
a method ina recommends.

It is the common one (Stich et al., "Sparsified SGD with memory", 2018; Lin et al.'s Deep Gradient
Compression): each worker adds the part of its gradient it has not sent yet (its error memory) to
the bucket, sends the ``ratio`` of coordinates of largest magnitude as (index, value) pairs, and keeps
the rest as its new memory. Sparse vectors do not add up in place, so the pairs are all-gathered (each
worker receives every worker's k pairs: traffic grows with the workers, unlike THC's homomorphic
sums), and every worker sums them into the dense mean. Exact: every worker gets the same mean.

Annotations stay real objects (no ``from __future__ import annotations``): DDP's ``register_comm_hook``
compares the hook's with ``dist.GradBucket`` and ``torch.futures.Future[torch.Tensor]`` by identity.
"""
from typing import Optional

import torch
import torch.distributed as dist

__all__ = ["TopKState", "topk_hook"]

_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # the newer name where torch has it


class TopKState:
    """The hook's settings and memory. ``ratio``: the fraction of each bucket's coordinates sent (at
    least one); ``start_iter``: iterations of plain allreduce first (DDP rebuilds its buckets after
    iteration 0, and the memory is kept per bucket index, so at least 2). ``bytes_sent`` counts what
    this worker handed to reductions: 8 bytes a pair once sparse, the dense bucket before."""

    def __init__(self, ratio: float = 0.01, start_iter: int = 2, process_group: Optional[dist.ProcessGroup] = None) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"ratio must be in (0, 1], got {ratio!r}")
        if start_iter < 2:
            raise ValueError(f"start_iter must be at least 2 (DDP rebuilds its buckets after iteration 0), got {start_iter!r}")
        self.ratio, self.start_iter, self.process_group = ratio, start_iter, process_group
        self.iteration, self.bytes_sent = 0, 0
        self.errors: dict[int, torch.Tensor] = {}


def sparsify(state: TopKState, index: int, flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The k (indices, values) of largest magnitude of `flat` plus bucket `index`'s memory; the rest becomes the memory."""
    corrected = flat + state.errors[index] if index in state.errors else flat.clone()
    k = max(1, int(flat.numel() * state.ratio))
    indices = corrected.abs().topk(k, sorted=False).indices
    values = corrected[indices]
    corrected[indices] = 0
    state.errors[index] = corrected
    return indices, values


def densify(pairs: torch.Tensor, numel: int, workers: int) -> torch.Tensor:
    """The mean of every worker's sparse vector, from the gathered (index, value) pairs: `pairs` holds one
    row of 2k int32 per worker, k indices, then k values' bits."""
    k = pairs.shape[1] // 2
    dense = torch.zeros(numel, dtype=torch.float32)
    dense.index_add_(0, pairs[:, :k].reshape(-1).long(), pairs[:, k:].contiguous().view(torch.float32).reshape(-1))
    return dense / workers


def topk_hook(state: TopKState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: the mean over the workers of each worker's top-k (with error feedback) of the bucket."""
    group = state.process_group or dist.group.WORLD
    workers = dist.get_world_size(group)
    buffer = bucket.buffer()
    warming = state.iteration < state.start_iter
    if bucket.is_last():
        state.iteration += 1
    if warming:
        state.bytes_sent += buffer.numel() * buffer.element_size()
        return dist.all_reduce(buffer.div_(workers), group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])
    indices, values = sparsify(state, bucket.index(), buffer.detach().float())
    mine = torch.cat([indices.int(), values.view(torch.int32)])
    state.bytes_sent += mine.numel() * mine.element_size()
    gathered = torch.empty(workers * mine.numel(), dtype=torch.int32)  # gloo wants the concatenation, not a stack
    future = _GATHER(gathered, mine, group=group, async_op=True).get_future()

    def finish(fut: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(densify(gathered.view(workers, -1), buffer.numel(), workers))
        return buffer

    return future.then(finish)
