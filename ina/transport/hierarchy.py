"""Two-level reductions: the ranks of each node sum first, and one leader per node reduces the node's sum.

On a cluster of multi-GPU nodes, every rank of a flat job sends the same compressed bucket through
its node's one NIC, and the switch and the PS see each rank as a worker (at most 32 a job). Here the
ranks of a node reduce over a process group of their own (NCCL over NVLink, gloo on CPUs), the
node's leader (its lowest rank) takes the node's max and sum through the inner transport (the
collective among the leaders, the switch, the PS), and hands the result back to its node. The
switch and the PS then see one worker per node, and each NIC carries one rank's bytes.

Exactness: every rank still encodes with its own rank's rounding stream and the job's shared max,
and the sums are integers whose width follows from the job's total rank count, so each rank gets
the bits a flat collective gives it (docs/transport.md, "Two levels").
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from ina.compression import SumPacking, THCCodec, collective_packing
from ina.transport.base import Transport, norm_word, word_norm
from ina.transport.errors import TransportError, too_many_workers

__all__ = ["HIERARCHIES", "NODE_VARIABLE", "HierarchicalTransport", "Layout", "arrange", "checked_hierarchy", "node_name"]

logger = logging.getLogger(__name__)

HIERARCHIES = ("auto", "node", "flat")
NODE_VARIABLE = "INA_NODE"
"""Names this rank's node; wins over torchrun's GROUP_RANK and the host name (to emulate nodes on one host)."""


def node_name(environ: Mapping[str, str] = os.environ) -> str:
    """This rank's node: INA_NODE, else torchrun's GROUP_RANK (the node's rank), else the host name."""
    for variable in (NODE_VARIABLE, "GROUP_RANK"):
        if environ.get(variable):
            return f"{variable}={environ[variable]}"
    return f"host={socket.gethostname()}"


def checked_hierarchy(hierarchy: object) -> str:
    """``hierarchy`` if it is one of :data:`HIERARCHIES`, else ValueError listing them."""
    if hierarchy not in HIERARCHIES:
        raise ValueError(f"hierarchy must be one of {HIERARCHIES}, got {hierarchy!r}")
    return hierarchy  # type: ignore[return-value]


def sums_by_node(hierarchy: str, workers: int, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a job of ``workers`` ranks sums inside each node first.

    ``"node"``: always; ``"flat"``: never; ``"auto"``: when torchrun's LOCAL_WORLD_SIZE says each node
    runs more than one rank and the job spans more than one node. A job on a single node stays flat
    under "auto": nothing it sends crosses between nodes.
    """
    if checked_hierarchy(hierarchy) != "auto":
        return hierarchy == "node"
    try:
        per_node = int(environ.get("LOCAL_WORLD_SIZE", "1"))
    except ValueError:
        return False
    return 1 < per_node < workers


@dataclass(frozen=True)
class Layout:
    """The ranks of a process group by node: each node's ranks in increasing order, the nodes in the
    order of their lowest rank, which leads the node (so rank 0 leads node 0)."""

    nodes: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        ranks = sorted(r for node in self.nodes for r in node)
        if not self.nodes or any(not node for node in self.nodes) or ranks != list(range(len(ranks))):
            raise ValueError(f"nodes must split the ranks 0..n-1 into non-empty groups, got {self.nodes}")

    @classmethod
    def of(cls, nodes: Sequence[Sequence[int]]) -> Layout:
        """From any grouping of the ranks, put in the canonical order."""
        return cls(tuple(sorted(tuple(sorted(node)) for node in nodes)))

    @classmethod
    def from_names(cls, names: Sequence[str]) -> Layout:
        """Ranks whose node names (by rank) are equal share a node."""
        by_name: dict[str, list[int]] = {}
        for rank, name in enumerate(names):
            by_name.setdefault(name, []).append(rank)
        return cls.of(list(by_name.values()))

    @classmethod
    def gather(cls, group: dist.ProcessGroup) -> Layout:
        """Every rank's :func:`node_name`, exchanged over ``group`` (all ranks call it at once)."""
        names: list[Any] = [None] * group.size()
        dist.all_gather_object(names, node_name(), group=group)
        return cls.from_names(names)

    @property
    def ranks(self) -> int:
        return sum(len(node) for node in self.nodes)

    @property
    def leaders(self) -> tuple[int, ...]:
        return tuple(node[0] for node in self.nodes)

    def node_of(self, rank: int) -> tuple[int, ...]:
        return next(node for node in self.nodes if rank in node)


def arrange(transport: Transport, group: dist.ProcessGroup, hierarchy: str) -> Transport:
    """The transport the hook uses: ``transport`` itself, or wrapped to sum inside nodes first when
    ``hierarchy`` asks for it (:func:`sums_by_node`) and it is not wrapped already. Under "auto", a
    group smaller than the job stays flat (node groups are made of the whole job's ranks)."""
    if isinstance(transport, HierarchicalTransport) or not sums_by_node(hierarchy, group.size()):
        return transport
    if hierarchy == "auto" and group.size() != dist.get_world_size():
        return transport
    return HierarchicalTransport(transport)


class HierarchicalTransport(Transport):
    """Sums inside each node over node-local process groups, and across nodes through ``inner``.

    ``inner`` is any transport (``CollectiveTransport``, ``SwitchTransport``, ``PSTransport``); it is
    attached to the leaders' group only, with the job's total rank count (``Transport.attach``'s
    ``ranks``), so its sums are as wide as a flat job's and a PS gets table values in lanes.
    ``nodes`` lists the ranks of each node; by default every rank's :func:`node_name` decides.

    Per bucket, every rank: a MAX reduce of the norms' words to the leader, which reduces the node's
    max through ``inner`` and broadcasts it with a status word; a SUM reduce of the table values to
    the leader, which hands the node's sum to ``inner``. A thread of the leader's broadcasts each
    total, in submission order, once it is done, with a status element after it, on a second node
    group, so that the hook's thread issues the next bucket's reductions meanwhile and the two
    never interleave differently on different ranks. A leader whose reduction failed sends a
    failed status, and its node's ranks raise TransportError instead of waiting. The node's reduce
    and broadcast carry the sums in the lanes a flat collective packs them in
    (``compression.collective_packing``: 1.33 bytes a sum for 8-bit THC on 4 ranks, not 4).

    ``process_group`` must hold every rank of the job: torch creates subgroups with every rank.
    ``bytes_sent`` counts what leaves the node: the inner transport's bytes on the leader, 0 elsewhere.

    Example::
        >>> # xdoctest: +SKIP
        >>> state = THCState(transport="switch", hierarchy="node")   # or HierarchicalTransport(SwitchTransport())
    """

    takes_values = True  # node sums are sums of table values, whatever inner takes on its own

    def __init__(self, inner: Transport, nodes: Optional[Sequence[Sequence[int]]] = None) -> None:
        self.inner = inner
        self._layout = None if nodes is None else Layout.of(nodes)
        self._leads = False
        super().__init__()
        self._node: Optional[dist.ProcessGroup] = None  # the hook's thread: reductions up, the max down
        self._results: Optional[dist.ProcessGroup] = None  # the leader's delivery thread: sums down
        self._leader = 0  # the global rank of this node's leader
        self._size = 1  # ranks on this node
        self._deliveries: Optional[queue.Queue] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def layout(self) -> Layout:
        if self._layout is None:
            raise RuntimeError("HierarchicalTransport is not attached yet")
        return self._layout

    @property
    def bytes_sent(self) -> int:  # type: ignore[override]
        """Bytes this rank sent off its node: the inner transport's, on the node's leader."""
        return self.inner.bytes_sent if self._leads else 0

    @bytes_sent.setter
    def bytes_sent(self, value: int) -> None:  # resetting the meter resets the leader's inner one
        if self._leads:
            self.inner.bytes_sent = value

    @property
    def path(self) -> Optional[str]:
        """Where the node's sums go (the inner transport's path: switch, ps, collective), on its leader; None elsewhere."""
        return getattr(self.inner, "path", None) if self._leads else None

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup, ranks: Optional[int] = None) -> None:
        """Group the ranks by node, check the inner transport takes that many nodes, make the node and
        leaders' groups (every rank of the job calls this at once) and attach ``inner`` on the leaders."""
        if ranks is not None:
            raise ValueError("a HierarchicalTransport cannot be the inner transport of another")
        group = process_group
        layout = self._layout or Layout.gather(group)
        if layout.ranks != group.size():
            raise ValueError(f"nodes {layout.nodes} cover {layout.ranks} ranks, but the process group has {group.size()}")
        limit = self.inner.max_workers
        if limit is not None and len(layout.nodes) > limit:
            raise too_many_workers(len(layout.nodes), limit, nodes=True)
        if group.size() != dist.get_world_size():
            raise ValueError("hierarchy='node' needs a process group of every rank of the job (torch makes "
                             "subgroups with all of them); use hierarchy='flat' for a smaller group")  # fmt: skip
        from ina.transport.udp_setup import agree  # it loads the control plane's client: only here

        self._layout = layout
        rank = group.rank()
        self._node, self._results, leaders = _node_groups(group, layout, rank)
        self._leader = dist.get_global_rank(group, layout.node_of(rank)[0])
        self._leads, self._size = rank in layout.leaders, len(layout.node_of(rank))
        agree(self._node, lambda: self.inner.attach(codec, leaders, ranks=group.size()))  # the leader's, or its error
        if self._leads and self._size > 1:
            self._deliveries = queue.Queue()
            self._thread = threading.Thread(target=self._deliver, args=(self._deliveries,), daemon=True,
                                            name=f"ina-node-deliveries-{rank}")  # fmt: skip
            self._thread.start()
        logger.info("rank %d: node %s of %d nodes, %s", rank, layout.node_of(rank), len(layout.nodes),
                    "its leader" if self._leads else f"led by rank {self._leader}")  # fmt: skip

    # --- reductions -------------------------------------------------------------------

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        """The node's max word to the leader, the job's max through inner, broadcast with a status word."""
        word = norm_word(norm)
        if self._size > 1:
            dist.reduce(word, dst=self._leader, op=dist.ReduceOp.MAX, group=self._node)
        message = torch.zeros(2, dtype=torch.int32, device=word.device)  # the max's word, then the status
        failure: Optional[BaseException] = None
        if self._leads:
            try:
                message[0] = norm_word(self.inner.norm_max(word_norm(word), bucket=bucket).wait())[0]
            except Exception as error:  # noqa: BLE001 - the node must hear of it, or it waits forever
                failure, message[1] = error, 1
        if self._size > 1:
            dist.broadcast(message, src=self._leader, group=self._node)
        if failure is None and int(message[1]):
            failure = self._leader_failed()
        return _failed(failure, word.device) if failure else _completed(word_norm(message[:1]))

    def table_sum(
        self, values: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        """The node's sum to the leader, which reduces it through inner; the total comes back to the node.

        Inside the node the sums travel as a flat collective of ``workers`` ranks packs them
        (``compression.collective_packing``), so they cannot overflow; inner gets them unpacked."""
        packing, length = collective_packing(workers, codec.config.granularity), values.numel()
        if self._size == 1:
            return self.inner.table_sum(values.to(packing.sum_dtype), codec, workers, bucket=bucket)
        words = packing.pack(values)
        reduced = dist.reduce(words, dst=self._leader, group=self._node, async_op=True)
        if not self._leads:
            delivered = torch.empty(words.numel() + 1, dtype=words.dtype, device=words.device)
            work = dist.broadcast(delivered, src=self._leader, group=self._results, async_op=True)
            return work.get_future().then(lambda fut: self._received(fut, reduced, packing, delivered, length))
        reduced.wait()
        try:
            future = self.inner.table_sum(packing.unpack(words, length), codec, workers, bucket=bucket)
        except Exception as error:  # noqa: BLE001 - delivered as a failure, so the node does not wait
            future = _failed(error, words.device)
        assert self._deliveries is not None
        self._deliveries.put((future, packing, words))
        return future

    def _received(self, broadcast: torch.futures.Future, reduced: dist.Work, packing: SumPacking,
                  delivered: torch.Tensor, length: int) -> torch.Tensor:  # fmt: skip
        """The total the leader broadcast, or the error of the broadcast, of this rank's reduce (done by
        now: the leader broadcasts once it holds the node's sum) or of the leader's reduction."""
        broadcast.value()
        reduced.wait()
        if int(delivered[-1]):
            raise self._leader_failed()
        return packing.unpack(delivered[:-1], length)

    def _deliver(self, deliveries: queue.Queue) -> None:
        """The leader's thread: broadcast each total to the node in submission order, once it is done,
        in the words of the node's reduce (``like``), with a status word after them."""
        while (item := deliveries.get()) is not None:
            future, packing, like = item
            with torch.cuda.device(like.device) if like.is_cuda else contextlib.nullcontext():  # this thread's GPU
                message = torch.zeros(like.numel() + 1, dtype=like.dtype, device=like.device)
                try:
                    message[:-1] = packing.pack(future.wait())
                except Exception:  # noqa: BLE001 - the hook's future carries it; the node gets a failed status
                    message[-1] = 1
                try:
                    dist.broadcast(message, src=self._leader, group=self._results)
                except Exception as error:  # noqa: BLE001 - the node's ranks are gone; their own errors tell
                    logger.warning("rank %d: cannot hand a sum to its node: %s", self._leader, error)
                    return

    def _leader_failed(self) -> TransportError:
        return TransportError(f"rank {self._leader}, the leader of this rank's node, could not complete the reduction "
                              f"through {type(self.inner).__name__}: its own error says why")  # fmt: skip

    def close(self) -> None:
        """Stop the leader's delivery thread and close the inner transport; calling it twice is harmless."""
        if self._thread is not None:
            assert self._deliveries is not None
            self._deliveries.put(None)
            self._thread.join(timeout=10)
            self._thread = None
        if self._leads:
            self.inner.close()


def _node_groups(group: dist.ProcessGroup, layout: Layout, rank: int) -> tuple[Any, Any, Any]:
    """This rank's two node groups and the leaders' group; every rank makes every group, in one order."""
    global_rank = [dist.get_global_rank(group, r) for r in range(group.size())]
    own: tuple[Any, Any] = (None, None)
    for node in layout.nodes:
        members = [global_rank[r] for r in node]
        made = dist.new_group(members), dist.new_group(members)
        if rank in node:
            own = made
    return (*own, dist.new_group([global_rank[r] for r in layout.leaders]))


def _completed(value: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    future = _future(value.device)
    future.set_result(value)
    return future


def _failed(error: BaseException, device: torch.device) -> torch.futures.Future[torch.Tensor]:
    future = _future(device)
    future.set_exception(error)
    return future


def _future(device: torch.device) -> torch.futures.Future[torch.Tensor]:
    """A future for a tensor on ``device``: on CUDA, its waiters wait for the stream that made it."""
    return torch.futures.Future(devices=[device] if device.type == "cuda" else None)
