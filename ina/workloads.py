"""Workloads a user recognises, for time-to-accuracy runs: a residual convnet on digits and a small
transformer language model on the Python reference's text, beside ina demo's MLP.

Both run on these machines without downloads: digits ships with scikit-learn, the text with Python
(``pydoc_data.topics``, the language reference that ``help()`` shows). Each comes with its own
optimiser and learning-rate schedule, as people train them (SGD with Nesterov momentum and a cosine
schedule for the convnet, AdamW with warm-up and cosine decay for the transformer), and an evaluation
on held-out data: test accuracy for classifiers, test loss (nats per token) for the language model.
``ina.testbed.worker`` and ``examples/train_tta.py`` train them; nothing here knows of DDP or hooks.
"""
from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

KINDS = ("mlp", "convnet", "transformer")
DATA_OF = {"mlp": "digits", "convnet": "digits", "transformer": "pydoc"}
"""The data set each kind trains on."""
METRIC_OF = {"mlp": "accuracy", "convnet": "accuracy", "transformer": "test_loss"}
"""What its evaluation reports: a test accuracy (higher is better) or a test loss (lower is better)."""
WIDTH_OF = {"mlp": 256, "convnet": 64, "transformer": 128}
"""Each kind's default width: hidden units, the first stage's channels, the model dimension."""
CONTEXT, VOCABULARY, HEADS, LAYERS = 32, 4096, 4, 2
EVAL_WINDOWS = 256  # test windows of the language model per evaluation: cheap, and the same every time


@dataclass
class Workload:
    """A model, its data and how it trains: `inputs(indices)` turns a batch of sample indices into
    (inputs, targets); `loss` and `evaluate` know whether it classifies or predicts the next token."""

    kind: str
    model: nn.Module
    train_size: int
    inputs: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    evaluate: Callable[[nn.Module], float]

    @property
    def metric(self) -> str:
        return METRIC_OF[self.kind]

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = model(x)
        return nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))

    def train_step(self, model: nn.Module, optimizer: torch.optim.Optimizer, schedule: torch.optim.lr_scheduler.LRScheduler,
                   batch: torch.Tensor) -> torch.Tensor:
        """One step on the samples `batch` (indices) with `model` (the DDP wrapper, whose backward reduces); its loss."""
        loss = self.loss(model, *self.inputs(batch))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        return loss

    def optimizer(self, parameters: Iterable[nn.Parameter], lr: float, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
        """The kind's optimiser and a schedule over `steps`: the MLP's constant-rate SGD (ina demo's),
        the convnet's SGD with Nesterov momentum and cosine decay, the transformer's AdamW with a
        linear warm-up over a tenth of the steps and cosine decay."""
        if self.kind == "mlp":
            optimizer = torch.optim.SGD(parameters, lr=lr, momentum=0.9)
            return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        if self.kind == "convnet":
            optimizer = torch.optim.SGD(parameters, lr=lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
            warm = 0
        else:
            optimizer = torch.optim.AdamW(parameters, lr=lr, betas=(0.9, 0.98), weight_decay=0.01)
            warm = max(1, steps // 10)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: cosine(step, steps, warm))


def cosine(step: int, steps: int, warm: int) -> float:
    """The learning rate's factor at `step`: linear warm-up over `warm` steps, then cosine decay to a tenth."""
    if step < warm:
        return (step + 1) / warm
    progress = min(1.0, (step - warm) / max(1, steps - warm))
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress))


def build(kind: str, width: int, seed: int, hidden: tuple[int, ...] = (256,)) -> Workload:
    """The `kind` workload, its model initialized from `seed` (`width` 0: the kind's default; the MLP takes `hidden`)."""
    from ina.demo_training import Digits, mlp

    if kind not in KINDS:
        raise ValueError(f"model kind {kind!r}: give one of {list(KINDS)}")
    width = width or WIDTH_OF[kind]
    if kind == "transformer":
        text = Text.load()
        torch.manual_seed(seed)
        model: nn.Module = TransformerLM(len(text.vocabulary), width)
        return Workload(kind, model, len(text.train) - CONTEXT - 1, text.windows, text.test_loss)
    data = Digits.load(seed)
    if kind == "mlp":
        model = mlp(data.x_train.shape[1], hidden, seed)
        inputs = lambda batch: (data.x_train[batch], data.y_train[batch])  # noqa: E731
    else:
        torch.manual_seed(seed)
        model = ResNet(width)
        inputs = lambda batch: (data.x_train[batch].view(-1, 1, 8, 8), data.y_train[batch])  # noqa: E731

    def accuracy(trained: nn.Module) -> float:
        trained.eval()
        with torch.no_grad():
            x = data.x_test if kind == "mlp" else data.x_test.view(-1, 1, 8, 8)
            correct = (trained(x).argmax(dim=1) == data.y_test).float().mean().item()
        trained.train()
        return correct

    return Workload(kind, model, len(data.x_train), inputs, accuracy)


class Block(nn.Module):
    """A pre-activation residual block: two 3x3 convolutions, batch norm, and the identity beside them."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels, 3, padding=1, bias=False))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class ResNet(nn.Module):
    """A small ResNet for 8x8 digits: three stages of one residual block each at 8x8, 4x4 and 2x2,
    `width`, 2x and 4x channels (width 64: 1.9M parameters, most of them in the last stage, as in
    ResNets: cheap to compute, costly to communicate)."""

    def __init__(self, width: int, classes: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(1, width, 3, padding=1, bias=False), Block(width)]
        for stage in (1, 2):
            layers += [nn.BatchNorm2d(width << (stage - 1)), nn.ReLU(),
                       nn.Conv2d(width << (stage - 1), width << stage, 3, stride=2, padding=1, bias=False), Block(width << stage)]  # fmt: skip
        layers += [nn.BatchNorm2d(width << 2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width << 2, classes)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TransformerLM(nn.Module):
    """A GPT-style decoder: token and position embeddings, `LAYERS` pre-norm causal self-attention
    blocks of `HEADS` heads, and an untied output layer over the vocabulary (dimension 128: 1.5M
    parameters, two thirds of them in the embedding and the output layer)."""

    def __init__(self, vocabulary: int, dim: int) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocabulary, dim), nn.Parameter(torch.zeros(CONTEXT, dim))
        layer = nn.TransformerEncoderLayer(dim, HEADS, 4 * dim, dropout=0.0, activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocabulary)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.embed(tokens) + self.position[:length]
        return self.head(self.norm(self.blocks(x, mask=self.mask[:length, :length], is_causal=True)))


@dataclass(frozen=True)
class Text:
    """The Python language reference's text as word-level tokens (words, numbers, punctuation), its
    `VOCABULARY - 1` most common tokens and one for the rest; the first 90% trains, the rest tests."""

    vocabulary: tuple[str, ...]
    train: torch.Tensor
    test: torch.Tensor

    @classmethod
    def load(cls) -> "Text":
        from pydoc_data.topics import topics

        words = re.findall(r"[A-Za-z_]+|\d+|[^\sA-Za-z_\d]", "\n".join(topics[key] for key in sorted(topics)))
        vocabulary = ("<unk>", *(w for w, _ in Counter(words).most_common(VOCABULARY - 1)))
        index = {w: i for i, w in enumerate(vocabulary)}
        tokens = torch.tensor([index.get(w, 0) for w in words])
        cut = int(0.9 * len(tokens))
        return cls(vocabulary, tokens[:cut], tokens[cut:])

    def windows(self, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The training windows at `starts`: CONTEXT tokens each, and the next token at every position."""
        rows = starts.unsqueeze(1) + torch.arange(CONTEXT + 1)
        chunk = self.train[rows]
        return chunk[:, :-1], chunk[:, 1:]

    def test_loss(self, model: nn.Module) -> float:
        """Mean cross entropy (nats per token) over EVAL_WINDOWS evenly spaced test windows."""
        starts = torch.linspace(0, len(self.test) - CONTEXT - 2, EVAL_WINDOWS).long()
        rows = starts.unsqueeze(1) + torch.arange(CONTEXT + 1)
        chunk = self.test[rows]
        model.eval()
        with torch.no_grad():
            out = model(chunk[:, :-1])
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), chunk[:, 1:].reshape(-1)).item()
        model.train()
        return loss
