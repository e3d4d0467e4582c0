"""The interface between the THC hook and whatever sums the workers' compressed gradients.

The hook needs exactly two reductions per bucket: the max of the workers' norms (the shared
scale M) and the sum of their table values. A transport provides both, so the hook is the same
whether torch collectives, a parameter server or a switch do the adding.
"""
from abc import ABC, abstractmethod

import torch
import torch.distributed as dist

from ina.compression import THCCodec


class Transport(ABC):
    """Carries one bucket's two THC reductions; every worker of the job calls it per bucket.

    ``bytes_sent`` counts the bytes this worker handed to the network for these reductions, as
    the transport puts them on the wire; the hook reports it per step.
    """

    def __init__(self) -> None:
        self.bytes_sent = 0

    def attach(self, codec: THCCodec, process_group: dist.ProcessGroup) -> None:
        """Called once by THCState, on every worker at once, when the codec and the workers are known.

        A transport that must set up a job with its aggregators (lane width, THC table) does it here.
        """

    @abstractmethod
    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        """Max over workers of the fp32 scalar ``norm``; the result is a scalar on norm's device."""

    @abstractmethod
    def table_sum(
        self, indices: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        """Sum over workers of ``codec.table_values(indices)``, as an integer tensor.

        The indices (not the values) come in so that a transport may send what suits its
        aggregator: a parameter server looks the values up itself, a switch adds values in lanes.
        """

    @abstractmethod
    def close(self) -> None:
        """Release what the transport opened (sockets, threads); calling it twice is harmless."""
