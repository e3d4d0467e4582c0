"""The interface between the THC hook and whatever sums the workers' compressed gradients.

The hook needs exactly two reductions per bucket: the max of the workers' norms (the shared
scale M) and the sum of their table values. A transport provides both, so the hook is the same
whether torch collectives, a parameter server or a switch do the adding.

Every transport takes the max of the norms' 32-bit words (:func:`norm_word`), as the switch and
the PS do: a non-finite norm travels as the canonical NaN, which is above every finite norm, so
the max is NaN exactly when some worker's bucket is non-finite (docs/protocol.md, section 2).
"""
from abc import ABC, abstractmethod
from typing import ClassVar, Optional

import torch
import torch.distributed as dist

from ina.compression import THCCodec


CANONICAL_NAN = 0x7FC00000  # the quiet NaN with a clear sign bit: above +inf (0x7F800000) in unsigned order


def norm_word(norm: torch.Tensor) -> torch.Tensor:
    """The MAX round's word for a worker's fp32 ``norm``: an int32 tensor of shape (1,), on norm's device.

    A finite norm >= 0 as its IEEE-754 bit pattern (-0.0 as +0.0); anything else (inf, NaN of
    any sign or payload, a negative value) as :data:`CANONICAL_NAN`. The words are non-negative
    as int32 and as uint32, and both orders are the numeric order of the norms.
    """
    norm = norm.detach().to(torch.float32).reshape(1)
    finite = torch.where(norm > 0, norm, 0.0).view(torch.int32)
    return torch.where(norm.isfinite() & (norm >= 0), finite, CANONICAL_NAN)


def word_norm(word: torch.Tensor) -> torch.Tensor:
    """The fp32 scalar norm a MAX result word stands for: NaN for anything but a finite norm >= 0."""
    norm = word.reshape(()).view(torch.float32)
    return torch.where(norm.isfinite() & (norm >= 0), norm, torch.nan)


class Transport(ABC):
    """Carries one bucket's two THC reductions; every worker of the job calls it per bucket.

    ``bytes_sent`` counts the bytes this worker handed to the network for these reductions, as
    the transport puts them on the wire; the hook reports it per step.

    ``takes_values``: whether :meth:`table_sum` is handed the indices' table values rather than
    the indices (the codec then looks them up while it encodes, saving a pass over the bucket).

    ``max_workers``: the most workers one job may have on this transport (None: no limit), checked
    by every rank before anything is set up, so that a job too large for it is refused at once.
    """

    takes_values: ClassVar[bool] = False
    max_workers: ClassVar[Optional[int]] = None

    def __init__(self) -> None:
        self.bytes_sent = 0

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup, ranks: Optional[int] = None) -> None:
        """Called once by THCState, on every worker at once, when the codec and the workers are known.

        A transport that must set up a job with its aggregators (lane width, THC table) does it here.
        ``ranks``: set when each worker stands for several ranks (the leaders of a two-level job,
        ``ina.transport.hierarchy``): the job's total rank count, which sizes the sums, and every
        worker then hands :meth:`table_sum` sums of table values, never indices. None: one rank a worker.
        """

    @abstractmethod
    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        """Max over workers of the fp32 scalar ``norm``; the result is a scalar on norm's device.

        ``norm`` is finite and >= 0, or NaN for a worker whose bucket holds inf or NaN; the
        result is NaN when any worker's is (every worker gets the same bits), else the max.
        """

    @abstractmethod
    def table_sum(
        self, indices: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        """Sum over workers of ``codec.table_values(indices)``, as an integer tensor.

        The indices come in, so that a transport may send what suits its aggregator: a parameter
        server looks the values up itself, a switch adds values in lanes. With ``takes_values``,
        ``indices`` holds those table values already. The transport may sum into its input.
        """

    @abstractmethod
    def close(self) -> None:
        """Release what the transport opened (sockets, threads); calling it twice is harmless."""
