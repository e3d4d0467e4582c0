"""One worker of ``ina demo``: DDP training of a small MLP on scikit-learn's digits.

Digits ships with scikit-learn (no download) and is small enough for four CPU workers to
train in seconds, yet a model learns it to high accuracy: a fair check that THC gradients train
as well as fp32 ones.
"""
import threading
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from ina.hook import THCState, thc_hook
from ina.transport import create_transport

HIDDEN = 256
BATCH = 64  # global batch, split evenly over the workers
LEARNING_RATE = 0.05
MOMENTUM = 0.9


@dataclass(frozen=True)
class THCOptions:
    """THCState arguments of the THC run; ``None`` in :class:`Run` means plain fp32 allreduce."""

    bits: int
    granularity: int
    start_iter: int
    transport: str
    transport_options: dict[str, str] = field(default_factory=dict)  # e.g. the local switch's addresses


@dataclass(frozen=True)
class Digits:
    """Train and test splits, features scaled to [0, 1]; loaded once and shipped to the workers."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @classmethod
    def load(cls, seed: int) -> "Digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        features, labels = load_digits(return_X_y=True)
        split = train_test_split(features / 16.0, labels, test_size=0.2, random_state=seed, stratify=labels)
        x_train, x_test, y_train, y_test = (torch.from_numpy(a) for a in split)
        return cls(x_train.float(), y_train.long(), x_test.float(), y_test.long())


@dataclass(frozen=True)
class Run:
    label: str
    steps: int
    seed: int
    data: Digits
    thc: Optional[THCOptions]


@dataclass(frozen=True)
class Outcome:
    accuracy: float
    bytes_per_step: float  # handed to reductions (or, over UDP, sent) by one worker per step after warm-up


def train_worker(rank: int, workers: int, run: Run) -> Outcome:
    """Train ``run.steps`` steps on this worker's share of each batch; every worker returns the same."""
    x_train, y_train, x_test, y_test = run.data.x_train, run.data.y_train, run.data.x_test, run.data.y_test
    model = mlp(x_train.shape[1], (HIDDEN,), run.seed)
    ddp = DistributedDataParallel(model)
    state = None
    if run.thc is not None:
        thc = run.thc
        transport = create_transport(thc.transport, None, **thc.transport_options)
        state = THCState(bits=thc.bits, granularity=thc.granularity, start_iter=thc.start_iter, transport=transport)
        ddp.register_comm_hook(state, thc_hook)
    meter = ByteMeter(model, state)
    # tqdm's default lock is a multiprocessing semaphore that outlives the worker; one thread suffices.
    tqdm.set_lock(threading.RLock())
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LEARNING_RATE, momentum=MOMENTUM)
    order = torch.Generator().manual_seed(run.seed)
    share = BATCH // workers
    batches = batches_of(len(x_train), BATCH, order)
    with tqdm(range(run.steps), desc=run.label, unit="step", disable=rank != 0) as progress:
        for step in progress:
            batch = next(batches)[rank * share : (rank + 1) * share]
            loss = torch.nn.functional.cross_entropy(ddp(x_train[batch]), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            meter.step_done()
            if step % 10 == 0:
                progress.set_postfix(loss=f"{loss.item():.3f}")
    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    if state is not None:
        dist.barrier()  # every rank has every result: the job may leave its switch and PS
        state.transport.close()
    return Outcome(accuracy=accuracy, bytes_per_step=meter.per_step)


def mlp(inputs: int, hidden: Sequence[int], seed: int, classes: int = 10) -> torch.nn.Module:
    """The demo's model: ReLU layers of the ``hidden`` widths, initialized from ``seed``.
    ``(256,)`` is ``ina demo``'s; wide layers (``(2048, 2048)``) make a communication-bound one."""
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for width in hidden:
        layers += [torch.nn.Linear(inputs, width), torch.nn.ReLU()]
        inputs = width
    return torch.nn.Sequential(*layers, torch.nn.Linear(inputs, classes))


def batches_of(size: int, batch: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless global batches: a fresh permutation of the training set each epoch."""
    while True:
        permutation = torch.randperm(size, generator=generator)
        for start in range(0, size - batch + 1, batch):
            yield permutation[start : start + batch]


class ByteMeter:
    """Bytes one worker sends per step once THC is on (the mean: resends vary), else every fp32 gradient."""

    def __init__(self, model: torch.nn.Module, state: Optional[THCState]) -> None:
        self.state = state
        self.per_step: float = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
        self._start: Optional[tuple[int, int]] = None  # (iteration, bytes) when compression started

    def step_done(self) -> None:
        state = self.state
        if state is None or state.iteration < state.start_iter:
            return
        if self._start is None:
            self._start = (state.iteration, state.bytes_sent)
        elif state.iteration > self._start[0]:
            self.per_step = (state.bytes_sent - self._start[1]) / (state.iteration - self._start[0])
