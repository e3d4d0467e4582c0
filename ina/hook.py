"""THC gradient compression as a torch DDP communication hook.

Annotations here stay real objects (no ``from __future__ import annotations``): DDP's
``register_comm_hook`` compares the hook's annotations with ``dist.GradBucket`` and
``torch.futures.Future[torch.Tensor]`` by identity.
"""
import logging
import math
from typing import Any, Optional, Sequence, Union

import torch
import torch.distributed as dist

from ina.compression import THCCodec, THCConfig, move_to_huge_pages, sum_lane_bits
from ina.layout import BucketLayouts
from ina.transport import create_transport
from ina.transport.base import Transport
from ina.transport.fallback import FALLBACKS, checked_fallback, with_fallback
from ina.transport.hierarchy import arrange, checked_hierarchy

__all__ = ["THCState", "thc_hook", "step_bytes"]

logger = logging.getLogger(__name__)
_FP32_MAX = torch.finfo(torch.float32).max


def _require_int(name: str, value: object, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return value


class THCState:
    r"""Configuration and memory of :func:`thc_hook`, shared by all buckets of one DDP model.

    Args:
        process_group: the workers that average gradients; ``None`` is the default group.
            Its size is checked against the sum width when the state is built.
        bits, granularity, clip, block_size, grid: THC parameters (see ``ina.compression.THCConfig``);
            the defaults are the reference's: 16 levels in 0..30, 1/32 of the mass clipped.
        seed: seeds the shared random rotation; must be the same on every worker.
        error_feedback: add each worker's previous compression error to its next gradient.
            THC is unbiased without it; it helps at low ``bits``. A bucket that is non-finite on
            some worker leaves every worker's memory of it unchanged.
        start_iter: iterations of plain fp32 allreduce before compression starts. Early training
            is sensitive to gradient noise, and DDP rebuilds its buckets after iteration 0, so
            ``error_feedback`` needs ``start_iter >= 2`` (memory is kept per bucket index).
        min_compression_elements: buckets smaller than this are plain-allreduced: padding to a
            rotation block would cost more than it saves.
        transport: how the compressed reductions travel: a registered name or a
            :class:`ina.transport.base.Transport`. ``"collective"``: torch.distributed on
            ``process_group``; ``"switch"`` and ``"ps"``: over UDP through the switch and the PS,
            or the PS alone (:class:`ina.transport.udp.SwitchTransport` and ``PSTransport``,
            configured by the environment: INA_SWITCH, INA_PS, ...). Building the state attaches
            the transport, which for these registers the job: every worker builds its state at once.
        hierarchy: ``"node"``: the ranks of each node sum first over a node-local process group, and
            one leader per node reduces the node's sum through the transport (one worker per node at
            the switch and the PS, so up to 32 nodes of any number of ranks), bit-identical to
            ``"flat"``, where every rank is a worker. ``"auto"``: ``"node"`` when torchrun's
            LOCAL_WORLD_SIZE says a node runs several ranks and the job spans several nodes.
            Ranks are grouped by INA_NODE, else torchrun's GROUP_RANK, else the host name
            (:class:`ina.transport.hierarchy.HierarchicalTransport`; docs/transport.md, "Two levels").
            ``transport.bytes_sent`` then counts what leaves a node: its leader's bytes, 0 elsewhere.
        fallback: where a job through the switch or the PS goes when they stop answering, in order:
            ``"ps"``, the switch's chunks go to the PS (and back to the switch once it answers again);
            ``"collective"``, every reduction goes over torch.distributed once the PS is silent too
            (:class:`ina.transport.fallback.CollectiveFallback`). Both exact. ``()``: neither, so a dead
            aggregator ends training with a TransportError within ``peer_timeout``.
            :attr:`paths` lists the iterations at which the path changed (docs/transport.md,
            "When something dies").

    The process group, the transport and the codec are not pickled; unpickling binds the
    default group and a fresh collective transport (set ``process_group`` and ``transport``
    afterwards for others, after ``transport.attach(state.codec, group)``), and keeps the iteration
    counter, the error memory and each bucket's layout. Training resumes bit-identically with the
    same model and DDP options: a new DDP instance's first iteration has DDP's initial bucket layout,
    not the rebuilt one the checkpoint was made with, so that iteration reduces the buckets as the
    state recorded them (:mod:`ina.layout`: it holds the buckets back until the last one arrives).

    ``plain_bytes`` and ``transport.bytes_sent`` count what this worker handed to reductions
    (for the switch and PS transports: the UDP payloads it sent, headers and resends included);
    :attr:`bytes_sent` is their sum. The state does not own the transport: call
    ``state.transport.close()`` on every worker when training is over (after a barrier), which
    for the switch and PS transports stops their thread and deregisters the job.
    """

    __slots__ = (
        "process_group",
        "transport",
        "codec",
        "config",
        "seed",
        "error_feedback",
        "start_iter",
        "min_compression_elements",
        "hierarchy",
        "fallback",
        # Progress and memory, pickled with the state.
        "iteration",
        "error_dict",
        "plain_bytes",
        "layouts",
        "paths",
        # Where the buckets seen so far start (data pointers): each moves to huge pages once.
        "bucket_memory",
    )
    _UNPICKLED = ("process_group", "transport", "codec", "bucket_memory")

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        bits: int = 4,
        granularity: int = 30,
        clip: float = 1 / 32,
        block_size: int = 1024,
        grid: int = 1001,
        seed: int = 0,
        error_feedback: bool = False,
        start_iter: int = 10,
        min_compression_elements: int = 1024,
        transport: Union[str, Transport] = "collective",
        hierarchy: str = "auto",
        fallback: Sequence[str] = FALLBACKS,
    ) -> None:
        self.config = THCConfig(
            bits=bits, granularity=granularity, clip=clip, block_size=block_size, grid=grid
        )
        self.seed = _require_int("seed", seed, 0)
        if not isinstance(error_feedback, bool):
            raise ValueError(f"error_feedback must be True or False, got {error_feedback!r}")
        self.error_feedback = error_feedback
        self.start_iter = _require_int("start_iter", start_iter, 0)
        if error_feedback and start_iter < 2:
            raise ValueError(
                f"error_feedback needs start_iter >= 2, got {start_iter}: DDP rebuilds its buckets "
                "after iteration 0, and the error memory is kept per bucket index"
            )
        self.min_compression_elements = _require_int("min_compression_elements", min_compression_elements, 0)
        self.hierarchy = checked_hierarchy(hierarchy)
        self.fallback = checked_fallback(fallback)
        self.iteration = 0
        self.paths: list[tuple[int, str]] = []
        self.error_dict: dict[int, torch.Tensor] = {}
        self.plain_bytes = 0
        self.layouts = BucketLayouts()
        self._bind(process_group, transport)

    def _bind(self, process_group: Optional[dist.ProcessGroup], transport: Union[str, Transport]) -> None:
        """Attach the workers and the transport, after checking that their sums cannot overflow."""
        if not isinstance(transport, (str, Transport)):
            raise ValueError(f"transport must be a name or a Transport instance, got {transport!r}")
        group = _group(process_group)
        self.config.check_workers(group.size())
        self.process_group = process_group
        self.codec = THCCodec(self.config, seed=self.seed)
        self.bucket_memory: set[int] = set()
        if isinstance(transport, str):
            transport = create_transport(transport, process_group)
        transport = arrange(with_fallback(transport, self.fallback), group, self.hierarchy)
        transport.attach(self.codec, group)
        self.transport = transport

    @property
    def bytes_sent(self) -> int:
        """Bytes this worker has handed to gradient reductions so far, plain and compressed."""
        return self.plain_bytes + self.transport.bytes_sent

    def __getstate__(self) -> dict[str, Any]:
        return {slot: getattr(self, slot) for slot in self.__slots__ if slot not in self._UNPICKLED}

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = {"hierarchy": "auto", "layouts": BucketLayouts(), "fallback": FALLBACKS, "paths": []} | state  # pickled before these existed
        for slot, value in state.items():
            setattr(self, slot, value)
        logger.warning(
            "THCState: bound to the default process group and a collective transport; "
            "set process_group and transport after loading to use others."
        )
        self._bind(None, "collective")


def step_bytes(parameters: int, workers: int, bits: int = 4, granularity: int = 30, block_size: int = 1024) -> int:
    """About the bytes one step's THC SUMs hand a switch or PS transport for a model of `parameters` summed by
    `workers`: the transform-padded table values in their sum lanes (each bucket pads to its own blocks; the norms'
    MAX rounds add a word a bucket). A job's work for `RemainingWorkPriority`: its compressed steps times this.

        >>> policy = RemainingWorkPriority(total_bytes=(steps - state.start_iter) * step_bytes(parameters, workers))
    """
    config = THCConfig(bits=bits, granularity=granularity, block_size=block_size)
    return THCCodec(config).padded_length(parameters) * sum_lane_bits(workers, config.granularity) // 8


def thc_hook(state: THCState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    r"""Average ``bucket`` over the workers with THC: 4-8x less traffic than fp32 allreduce.

    Per bucket: optionally add the error memory; take the max of the workers' norms (one tiny MAX
    reduction); rotate (randomized Hadamard, fresh per round and bucket, agreed without
    communication) and quantize to table values by unbiased stochastic rounding, in one fused
    pass on CPU; sum those integers (one SUM reduction); decode the mean, straight into an fp32
    bucket. The first ``state.start_iter`` iterations and buckets under
    ``state.min_compression_elements`` use plain allreduce. The result has the bucket's dtype
    (fp32, fp16 or bf16).

    Non-finite gradients (a loss-scale overflow): if any worker's bucket holds inf or NaN, every
    worker's result for that bucket is all NaN, so ``torch.amp.GradScaler`` and similar checks skip
    the step on every worker at once, as with plain allreduce. The max of the norms carries the
    verdict (a non-finite bucket sends NaN, which wins the max), so every worker skips the quantizer
    and the SUM round together and leaves its error memory as it was; nothing raises. Finite
    buckets, from denormals and zeros to norms whose square overflows fp32, are averaged within
    THC's error; a bucket whose norm itself exceeds fp32 counts as non-finite.

    The hook waits for the MAX before encoding rather than chaining it: a reduction issued from
    a completion callback would run on a gloo worker thread, in an order that differs between
    ranks. It reads the local norm and the max on the host (on CUDA, two small synchronizations
    per bucket) to take the same branch as every other worker. Decoding is chained, so the SUM
    overlaps the rest of the backward pass; the last bucket, with nothing left to overlap, is
    decoded in the hook's own call.

    Example::
        >>> # xdoctest: +SKIP
        >>> from ina import THCState, thc_hook
        >>> ddp_model.register_comm_hook(THCState(process_group=None, bits=4, granularity=30), thc_hook)
    """
    group = _group(state.process_group)
    buffer = bucket.buffer()
    round_, last, layouts = state.iteration, bucket.is_last(), state.layouts
    layouts.observe(bucket)
    if last:
        state.iteration += 1
        if state.iteration == state.start_iter:
            logger.info("THC compression starts at iteration %d.", state.iteration)
    if layouts.must_hold(round_ >= state.start_iter):  # a resumed run's first iteration: lay it out as recorded
        held = layouts.hold(bucket)
        if last:
            layouts.release(lambda flat, index: _mean(state, group, flat, round_, index, last=True).wait())
            layouts.end_iteration()
        return held
    if last:
        layouts.end_iteration()
    return _mean(state, group, buffer, round_, bucket.index(), last)


def _mean(state: THCState, group: dist.ProcessGroup, buffer: torch.Tensor, round_: int, index: int, last: bool) -> torch.futures.Future[torch.Tensor]:
    """Bucket `index`'s mean: plain allreduce before `start_iter` and for small buckets, else THC."""
    if round_ < state.start_iter or buffer.numel() < state.min_compression_elements:
        return _allreduce_mean(state, group, buffer)
    return _thc_mean(state, group, buffer, round_, index, last)


def _group(process_group: Optional[dist.ProcessGroup]) -> dist.ProcessGroup:
    if process_group is not None:
        return process_group
    if not dist.is_initialized():
        raise RuntimeError("call torch.distributed.init_process_group before building THCState")
    return dist.group.WORLD


def _allreduce_mean(
    state: THCState, group: dist.ProcessGroup, buffer: torch.Tensor
) -> torch.futures.Future[torch.Tensor]:
    """Plain allreduce; dividing first keeps fp16 sums from overflowing."""
    buffer.div_(group.size())
    state.plain_bytes += buffer.numel() * buffer.element_size()
    work = dist.all_reduce(buffer, group=group, async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def _thc_mean(
    state: THCState, group: dist.ProcessGroup, buffer: torch.Tensor, round_: int, index: int, last: bool
) -> torch.futures.Future[torch.Tensor]:
    codec, transport = state.codec, state.transport
    workers, rank = group.size(), group.rank()
    _note_path(state, round_)
    where = {"round": round_, "bucket": index}
    memory = state.error_dict.get(index) if state.error_feedback else None
    if memory is not None and memory.numel() != buffer.numel():
        memory = None  # a new DDP instance's first iteration: its buckets are not yet rebuilt
    if buffer.data_ptr() not in state.bucket_memory:  # DDP keeps a bucket's memory from step to step
        state.bucket_memory.add(buffer.data_ptr())
        move_to_huge_pages(buffer)
    x = buffer.to(torch.float32)
    if memory is not None:
        x = x + memory
    norm = codec.norm(x)  # NaN when x holds inf or NaN: the verdict every worker then sees in the max
    scale = float(transport.norm_max(x.new_tensor(norm), bucket=index).wait())
    if not math.isfinite(scale):
        # Some worker's bucket is non-finite. Every worker sees the same max, so all of them skip
        # the quantizer and the SUM round and leave the error memory as it is.
        return _completed(buffer.fill_(math.nan))
    # One fused pass from the bucket to its indices, or to their table values for a transport that
    # sums those; for an extreme max, x and the max move near 1 together by a power of two first,
    # which keeps the transform's sums in fp32's range.
    encoded = codec.encode(x, scale, worker=rank, values=transport.takes_values, **where)
    own_values = None  # error feedback's; kept apart, as a transport may sum into its input
    if state.error_feedback:
        own_values = encoded.clone() if transport.takes_values else codec.table_values(encoded)
    total = transport.table_sum(encoded, codec, workers, bucket=index)
    # The mean's coordinates lie within T * M of zero and the compression error's within (1 + T) * M:
    # near the top of fp32's or the bucket dtype's range, clamp them so finite inputs stay finite.
    reach, bound = 2 * (1 + codec.config.threshold) * scale, torch.finfo(buffer.dtype).max

    def finish(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        _read_on_current_stream(x, encoded, own_values, memory)
        if own_values is not None:  # before the mean overwrites the bucket, which x may be
            own = codec.decode(own_values, 1, scale, length=buffer.numel(), **where)
            error = x - own
            state.error_dict[index] = error.clamp_(-_FP32_MAX, _FP32_MAX) if reach > _FP32_MAX else error
        # An fp32 bucket takes the mean straight from the decoder.
        into = buffer if buffer.dtype == torch.float32 else None
        mean = codec.decode(fut.value(), workers, scale, length=buffer.numel(), out=into, **where)
        return buffer.copy_(mean.clamp_(-bound, bound) if reach > bound else mean)

    if not last:
        return total.then(finish)
    # The backward pass has nothing left to overlap with the last bucket's SUM: decode it here, on
    # the caller's thread (whose kernel threads are warm), not on the transport's completion thread.
    total.wait()
    return _completed(finish(total))


def _note_path(state: THCState, round_: int) -> None:
    """Record in ``state.paths`` the round from which reductions took a new path (switch, ps, collective)."""
    path = getattr(state.transport, "path", None)
    if path is not None and (not state.paths or state.paths[-1][1] != path):
        state.paths.append((round_, path))


def _completed(result: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    """A future that already holds ``result``; on CUDA, waiters wait for the stream that made it."""
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future(
        devices=[result.device] if result.is_cuda else None
    )
    future.set_result(result)
    return future


def _read_on_current_stream(*tensors: Optional[torch.Tensor]) -> None:
    """Mark CUDA tensors made on the hook's stream as read by the callback's stream.

    Future callbacks run on streams of their own; without this, the caching allocator could hand
    the tensors' memory to new work on the hook's stream while the callback still reads them.
    """
    for tensor in tensors:
        if tensor is not None and tensor.is_cuda:
            tensor.record_stream(torch.cuda.current_stream(tensor.device))
