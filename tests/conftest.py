"""Helpers shared by the hook tests: a small regression problem, its model and its training loop.

Multi-process tests run module-level worker functions with ``ina.launch.run_workers``; the
workers import these helpers too (``tests/`` is on their ``sys.path``, as on pytest's).
"""
import time

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from ina import THCState
from ina.launch import LocalAggregators
from ina.transport import create_transport

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
UDP_TRANSPORTS = ("switch", "ps")

SAMPLES, FEATURES, OUTPUTS, HIDDEN = 1024, 32, 4, 64
SHARD = 16  # samples per worker per step


@pytest.fixture(scope="module")
def aggregators():
    """A software switch and a PS on loopback for the module's workers (``aggregators.options(name)``)."""
    with LocalAggregators() as local:
        yield local


@pytest.fixture(scope="module")
def transport_options(aggregators) -> dict[str, dict[str, str]]:
    """Each UDP transport's options, pointing at the module's aggregators (the collective needs none)."""
    return {name: aggregators.options(name) for name in UDP_TRANSPORTS}


def thc_state(transport: str, options: dict[str, dict[str, str]], **settings) -> THCState:
    """A THCState on the default group whose ``transport`` is built from ``options[transport]``."""
    return THCState(transport=create_transport(transport, None, **options.get(transport, {})), **settings)


class FakeGroup:
    """Stands in for a process group where only its size and rank matter."""

    def __init__(self, size: int, rank: int = 0) -> None:
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


class FakeBucket:
    """The GradBucket methods the hook relies on: one parameter, the whole buffer."""

    def __init__(self, buffer: torch.Tensor, index: int, last: bool = True) -> None:
        self._buffer, self._index, self._last = buffer, index, last

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._last

    def parameters(self) -> list[torch.Tensor]:
        return [self._buffer]


def regression_problem(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A smooth nonlinear target plus noise: every worker builds the same one."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(SAMPLES, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, OUTPUTS, generator=generator) / 4
    y = 2 * torch.tanh(x @ weights) + 0.3 * torch.randn(SAMPLES, OUTPUTS, generator=generator)
    return x, y


def mlp(seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    """2,372 parameters: a 2,048-element weight and 324 elements of smaller tensors."""
    torch.manual_seed(seed)
    layers = (torch.nn.Linear(FEATURES, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUTPUTS))
    return torch.nn.Sequential(*layers).to(dtype)


def shard(step: int, rank: int, workers: int) -> torch.Tensor:
    """Indices of this worker's samples at ``step``: disjoint across workers, cycling the data."""
    start = (step * workers + rank) * SHARD
    return torch.arange(start, start + SHARD) % SAMPLES


def loss_on(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    dtype = next(model.parameters()).dtype
    return torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y)


def train(
    ddp: DistributedDataParallel, data: tuple[torch.Tensor, torch.Tensor], steps: range, lr: float = 0.1, pause: float = 0.0
) -> None:
    """Plain SGD (stateless, so a resumed run needs no optimizer state) on this rank's shards, with
    `pause` seconds after each step (training while a test stops and starts aggregators)."""
    x, y = data
    rank, workers = torch.distributed.get_rank(), torch.distributed.get_world_size()
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    for step in steps:
        batch = shard(step, rank, workers)
        optimizer.zero_grad()
        loss_on(ddp, x[batch], y[batch]).backward()
        optimizer.step()
        time.sleep(pause)


def train_until_an_aggregator_dies(rank: int, workers: int, transport: str, steps: int, stop_at: int,
                                   stop: str, **settings) -> tuple[str, str, float]:  # fmt: skip
    """Rank 0 hosts a switch and a PS and stops one (`stop`: "switch" or "ps") before step `stop_at`
    of THC training through `transport` (THCState `settings`); the error each rank met (kind, message)
    and how long after the stop."""
    import time

    import torch.distributed as dist

    from ina import thc_hook

    local = LocalAggregators() if rank == 0 else None
    box = [local.options(transport) if local else None]
    dist.broadcast_object_list(box, src=0)
    x, y = regression_problem()
    model = mlp()
    ddp = DistributedDataParallel(model)
    settings = {"fallback": (), **settings}  # nothing to fall back to: the engine's error ends training
    state = THCState(start_iter=1, transport=create_transport(transport, None, peer_timeout=1.0, failover=0, **box[0]), **settings)
    ddp.register_comm_hook(state, thc_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    stopped = time.monotonic()
    try:
        for step in range(steps):
            if step == stop_at:
                if local:
                    getattr(local, stop).close()
                stopped = time.monotonic()
            batch = shard(step, rank, workers)
            optimizer.zero_grad()
            loss_on(ddp, x[batch], y[batch]).backward()
            optimizer.step()
    except Exception as error:  # noqa: BLE001 - reported to the test
        return type(error).__name__, str(error), time.monotonic() - stopped
    finally:
        state.transport.close()
        if local:
            local.close()
    return "no error", "", time.monotonic() - stopped
