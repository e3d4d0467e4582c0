"""DDP bucket layouts that survive a checkpoint, so that a resumed run compresses what the unbroken one did.

DDP lays a new instance's buckets out in reverse parameter order and rebuilds them in
gradient-ready order after the first iteration. THC rotates and quantizes whole buckets (its
randomness is keyed by round and bucket index) and keeps its error memory per bucket index, so a
resumed run's first iteration, on the initial layout, would compress other vectors than the
unbroken run did. `BucketLayouts` names every parameter by its place in the initial layout (bucket
index, position), which a new instance of the same model and options reproduces, and records each
bucket's layout in those names. A resumed first iteration whose layout differs from the recorded
one holds its buckets back until the last arrives, then reduces the recorded buckets, gathered
from the gradients it holds, and scatters their means back: bit-identical to the unbroken run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

Key = tuple[int, int]
"""A parameter's name: its bucket index and position in DDP's initial layout."""
Reduce = Callable[[torch.Tensor, int], torch.Tensor]
"""Averages a flat gradient vector as bucket `index` of the current round; returns the mean."""


class BucketLayouts:
    """Each bucket's parameters, by name (pickled with THCState), and what the current DDP instance
    holds back in its first iteration when it must be laid out as recorded."""

    def __init__(self) -> None:
        self.recorded: dict[int, list[tuple[Key, int]]] = {}
        """Bucket index -> its parameters' names and sizes, in order."""
        self._bind()

    def _bind(self) -> None:
        self._names: dict[int, Key] = {}  # a parameter's data pointer -> its name, in this process
        self._seen: dict[int, tuple[int, ...]] = {}  # bucket index -> the data pointers it held when last recorded
        self._first = True  # this DDP instance's first iteration: its initial layout
        self._resumed = bool(self.recorded)
        self._held: list[tuple[dist.GradBucket, torch.futures.Future[torch.Tensor]]] = []

    def __getstate__(self) -> dict[str, Any]:
        return {"recorded": self.recorded}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.recorded = state["recorded"]
        self._bind()

    def observe(self, bucket: dist.GradBucket) -> None:
        """Learn the names (first iteration) and record the bucket's layout in them."""
        pointers = tuple(p.data_ptr() for p in bucket.parameters())
        index = bucket.index()
        if self._first:
            self._names.update({pointer: (index, position) for position, pointer in enumerate(pointers)})
        if self._seen.get(index) == pointers or self._holding():
            return
        self._seen[index] = pointers
        sizes = [p.numel() for p in bucket.parameters()]
        if all(pointer in self._names for pointer in pointers):
            self.recorded[index] = [(self._names[pointer], size) for pointer, size in zip(pointers, sizes)]

    def must_hold(self, compressing: bool) -> bool:
        """Whether this bucket waits for the others: a resumed first iteration, compressed, on a
        layout other than the recorded one (the first call decides for the whole iteration)."""
        if not self._first or not self._resumed:
            return False
        if not self._held and not compressing:
            self._resumed = False  # plain allreduce: layouts do not matter, and DDP rebuilds after it
            return False
        initial = all(name == (index, position) for index, names in self.recorded.items() for position, (name, _) in enumerate(names))
        if initial and not self._held:
            self._resumed = False
        return self._resumed

    def _holding(self) -> bool:
        return self._first and self._resumed

    def hold(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        """Keep the bucket until the last one arrives; its future completes then."""
        buffer = bucket.buffer()
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future(devices=[buffer.device] if buffer.is_cuda else None)
        self._held.append((bucket, future))
        return future

    def release(self, reduce: Reduce) -> None:
        """Once the last bucket is held: reduce the recorded buckets gathered from the held gradients,
        scatter their means back, and complete every held bucket's future."""
        gradients = {(bucket.index(), position): gradient for bucket, _ in self._held for position, gradient in enumerate(_views(bucket))}
        missing = [name for names in self.recorded.values() for name, _ in names if name not in gradients]
        if missing or len(gradients) != sum(len(names) for names in self.recorded.values()):
            raise RuntimeError(f"the restored THCState's bucket layout names parameters this DDP instance does not have "
                               f"({missing[:3]}...): resume with the model and DDP options the checkpoint was made with")  # fmt: skip
        for index in sorted(self.recorded):
            views = [gradients[name] for name, _ in self.recorded[index]]
            mean = reduce(torch.cat([view.reshape(-1) for view in views]), index)
            offset = 0
            for view in views:
                view.copy_(mean[offset : offset + view.numel()].view_as(view))
                offset += view.numel()
        for bucket, future in self._held:
            future.set_result(bucket.buffer())
        logger.info("THCState: the resumed run's first iteration reduced its buckets as the checkpointed run laid them out")
        self._held.clear()
        self._resumed = False

    def end_iteration(self) -> None:
        self._first = False


def _views(bucket: dist.GradBucket) -> list[torch.Tensor]:
    """Each parameter's gradient as a view of the bucket's flat buffer, where DDP packs them in order."""
    buffer, offset, views = bucket.buffer(), 0, []
    for parameter in bucket.parameters():
        views.append(buffer[offset : offset + parameter.numel()])
        offset += parameter.numel()
    if offset != buffer.numel():
        raise RuntimeError(f"bucket {bucket.index()} holds {buffer.numel()} values, its parameters {offset}")
    return views
