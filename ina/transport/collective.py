"""THC reductions over torch.distributed collectives (gloo or NCCL), the no-switch default."""
from typing import Optional

import torch
import torch.distributed as dist

from ina.compression import THCCodec, collective_packing
from ina.transport.base import Transport, norm_word, word_norm


class CollectiveTransport(Transport):
    """All-reduce MAX of the norms and all-reduce SUM of the table values on ``process_group``.

    THC is homomorphic, so the integers are summed as they are, packed as lanes of words no sum
    can overflow (``compression.collective_packing``): gloo and NCCL have no 16-bit integer sum,
    but several b-bit lanes share an int32 or int64, e.g. 8-bit THC on 4 workers sends 1.33
    bytes a coordinate, not an int32's 4. Tensors stay on the bucket's device, so NCCL works on
    CUDA buckets and gloo on CPU ones.

    Every rank must call it in the same order, as for any collective: the hook does so by
    issuing both reductions from its own call, never from a completion callback. It sums the
    table values as they are, so it takes them from the encoder (``takes_values``).
    """

    takes_values = True

    def __init__(self, process_group: Optional[dist.ProcessGroup] = None) -> None:
        super().__init__()
        self.process_group = process_group

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup, ranks: Optional[int] = None) -> None:
        """Reduce on the group it is attached to: the leaders' group, when it serves a two-level job.

        Its sums' width follows from the ``workers`` each table_sum names, so ``ranks`` needs no state."""
        self.process_group = process_group

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        """An int32 MAX of the norms' words (base.norm_word): gloo's float MAX drops a NaN from all but one rank."""
        word = norm_word(norm)
        self.bytes_sent += word.numel() * word.element_size()
        return self._all_reduce(word, dist.ReduceOp.MAX).then(lambda fut: word_norm(fut.value()[0]))

    def table_sum(
        self, values: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        """The sums of ``values`` over the group: their lanes' words all-reduced, unpacked when done."""
        packing, length = collective_packing(workers, codec.config.granularity), values.numel()
        words = packing.pack(values)
        self.bytes_sent += words.numel() * words.element_size()
        return self._all_reduce(words, dist.ReduceOp.SUM).then(lambda fut: packing.unpack(fut.value()[0], length))

    def close(self) -> None:
        """Nothing to release: the process group belongs to the caller."""

    def _all_reduce(self, tensor: torch.Tensor, op: dist.ReduceOp) -> torch.futures.Future:
        work = dist.all_reduce(tensor, op=op, group=self.process_group, async_op=True)
        return work.get_future()
