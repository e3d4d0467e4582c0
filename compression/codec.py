"""THCCodec: rotate, quantize, and their inverses, on any device.

CPU tensors go through the fused C kernels when they are built (native.py), CUDA tensors through
the fused Triton kernels when Triton imports (triton_kernels.py), everything else through the torch
implementation (hadamard.py, quantize.py); all compute the same values (the Triton transform to
fp32 rounding, see triton_kernels.py).
"""
from __future__ import annotations

import functools
import os
import warnings
from types import ModuleType

import torch

from . import hadamard, native, quantize, scaling
from .config import THCConfig
from .quantize import Levels, f32
from .rng import ROUND_STREAM, SIGN_STREAM, Key, stream_key
from .table import _require_int

_FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
_INTEGERS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
Norm = float | torch.Tensor  # a number, or a one-element tensor (read on the host)
_MAX_PADDED = 2**32  # element indices feed 32-bit random streams
_warned_fallback = False


def _uses_native(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` goes to the C kernels; warns once when a CPU tensor cannot."""
    global _warned_fallback
    if tensor.device.type != "cpu":
        return False
    if native.native_available():
        return True
    if native.load_error is not None and not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            f"ina.compression: native CPU kernels unavailable ({native.load_error}); using the much slower "
            "pure-torch path. Reinstall with a C compiler present (pip install -e .) to build them.",
            RuntimeWarning,
            stacklevel=3,
        )
    return False


@functools.cache
def _triton_kernels() -> ModuleType | None:
    """triton_kernels.py, imported on the first CUDA tensor; None (with a warning, once) when Triton does not import.

    INA_COMPRESSION_TRITON=0 selects the torch path for CUDA tensors on purpose, without a warning.
    """
    if os.environ.get("INA_COMPRESSION_TRITON", "1") == "0":
        return None
    try:
        from . import triton_kernels
    except ImportError as error:
        warnings.warn(
            f"ina.compression: Triton unavailable ({error}); CUDA tensors use the much slower eager-torch path. "
            "CUDA builds of torch ship Triton; else pip install -e '.[gpu]'.",
            RuntimeWarning,
            stacklevel=4,
        )
        return None
    return triton_kernels


def _kernels(tensor: torch.Tensor, block: int | None = None) -> ModuleType | None:
    """The fused kernels for ``tensor`` (native on CPU, Triton on CUDA; same functions), or None for the torch path.

    ``block``: the transform block, for the functions that transform (Triton takes some block lengths only).
    """
    if _uses_native(tensor):
        return native
    if tensor.device.type != "cuda" or (gpu := _triton_kernels()) is None:
        return None
    return gpu if block is None or gpu.supports(block) else None


def _vector(name: str, tensor: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> torch.Tensor:
    """``tensor`` made contiguous after checking it is 1-D with one of ``dtypes``."""
    if not isinstance(tensor, torch.Tensor) or tensor.dim() != 1 or tensor.dtype not in dtypes:
        got = f"shape {tuple(tensor.shape)} {tensor.dtype}" if isinstance(tensor, torch.Tensor) else type(tensor)
        raise ValueError(f"{name} must be a 1-D tensor of {', '.join(map(str, dtypes))}; got {got}")
    return tensor.detach().contiguous()


class THCCodec:
    """Tensor Homomorphic Compression of 1-D gradient buckets.

    All workers build the codec with the same config and seed; signs and rounding streams then
    follow from (round, bucket[, worker]) with no communication. One worker's side, with the two
    collectives marked (a single worker here, so they are no-ops):

    >>> import torch
    >>> from ina.compression import THCCodec, THCConfig, collective_packing
    >>> codec, workers = THCCodec(THCConfig(), seed=0), 1
    >>> x = torch.randn(10_000, generator=torch.Generator().manual_seed(0))
    >>> norm = x.norm()  # all_reduce(norm, op=MAX): the shared scale M
    >>> indices = codec.encode(x, norm, round=0, bucket=0, worker=0)
    >>> packing = collective_packing(workers, codec.config.granularity)  # lanes no sum can overflow
    >>> words = packing.pack(codec.table_values(indices))
    >>> # all_reduce(words, op=SUM): integers, summed exactly by switches and collectives alike
    >>> total = packing.unpack(words, indices.numel())
    >>> mean = codec.decode(total, workers, norm, round=0, bucket=0, length=x.numel())
    >>> bool((mean - x).norm() ** 2 / x.norm() ** 2 < 0.05)
    True
    """

    def __init__(self, config: THCConfig, seed: int = 0) -> None:
        if not isinstance(config, THCConfig):
            raise ValueError(f"config must be a THCConfig, got {type(config).__name__}")
        self.config = config
        self.seed = _require_int("seed", seed, -(2**63))
        self._levels = {torch.device("cpu"): Levels.build(config.table, config.threshold)}

    def __repr__(self) -> str:
        return f"THCCodec({self.config!r}, seed={self.seed})"

    # --- shapes and keys ---

    def padded_length(self, n: int) -> int:
        """``n`` rounded up to whole transform blocks (block = min(block_size, next power of two >= n))."""
        padded = hadamard.padded_length(_require_int("length", n, 0), self.config.block_size)
        if padded > _MAX_PADDED:
            raise ValueError(f"length must pad to at most 2**32 elements, got {n}; split it into buckets")
        return padded

    def _block(self, n: int) -> int:
        return hadamard.block_length(n, self.config.block_size)

    def _sign_key(self, round: int, bucket: int) -> Key:
        return stream_key(SIGN_STREAM, self.seed, _require_int("round", round, 0), _require_int("bucket", bucket, 0))

    def _round_key(self, round: int, bucket: int, worker: int) -> Key:
        return stream_key(
            ROUND_STREAM, self.seed, _require_int("round", round, 0), _require_int("bucket", bucket, 0),
            _require_int("worker", worker, 0),
        )  # fmt: skip

    def _levels_on(self, device: torch.device) -> Levels:
        if device not in self._levels:
            self._levels[device] = self._levels[torch.device("cpu")].to(device)
        return self._levels[device]

    def _check_padded(self, name: str, tensor: torch.Tensor, length: int) -> None:
        if tensor.numel() != self.padded_length(length):
            raise ValueError(
                f"{name} has {tensor.numel()} elements but length {length} pads to {self.padded_length(length)}; "
                f"pass the length of the original vector"
            )

    # --- rotation ---

    def rotate(self, x: torch.Tensor, *, round: int, bucket: int) -> torch.Tensor:
        """fp32 randomized Hadamard transform of ``x``, zero-padded to padded_length(len(x)).

        Signs come from (seed, round, bucket); each block is an interleaved slice of the input
        (every m-th element), transformed and stored contiguously (see hadamard.py for why).
        The transform's sums are exact in range for ||x|| up to fp32's max / sqrt(block); beyond,
        or with inf or NaN in ``x``, the blocks concerned come out non-finite (NaN or inf), without
        an error. Scale such ``x`` by a power of two first (the DDP hook does), or use :meth:`encode`.
        """
        x = _vector("x", x, _FLOATS).to(torch.float32)
        padded = self.padded_length(x.numel())
        key = self._sign_key(round, bucket)
        if kernels := _kernels(x, self._block(x.numel())):
            return kernels.rotate(x, padded, self._block(x.numel()), key)
        return hadamard.rotate(x, padded, self._block(x.numel()), key)

    def unrotate(self, y: torch.Tensor, *, round: int, bucket: int, length: int) -> torch.Tensor:
        """Exact inverse of :meth:`rotate`: fp32, padding dropped."""
        y = _vector("y", y, _FLOATS).to(torch.float32)
        self._check_padded("y", y, length)
        key = self._sign_key(round, bucket)
        if kernels := _kernels(y, self._block(length)):
            return kernels.unrotate(y, self._block(length), key, length)
        return hadamard.unrotate(y, self._block(length), key, length)

    # --- quantization ---

    def norm(self, x: torch.Tensor) -> float:
        """||x||_2 of a float vector, rounded to fp32: the value each worker contributes to the shared M.

        Accurate for every finite ``x``, denormals and norms whose square overflows fp32 included
        (see scaling.py); NaN when ``x`` holds inf or NaN, or when ||x|| itself exceeds fp32.
        """
        return scaling.vector_norm(_vector("x", x, _FLOATS).to(torch.float32))

    def quantize(self, y: torch.Tensor, norm: Norm, *, round: int, bucket: int, worker: int) -> torch.Tensor:
        """uint8 table indices of rotated ``y`` under the shared scale ``norm`` (M; 0 is allowed).

        ``norm`` must be finite and >= 0 (ValueError otherwise); any finite M works, however small
        or large (see scaling.py). Coordinates of ``y`` beyond the clip threshold, +-inf among
        them, saturate at the end levels; NaN coordinates get index 0.
        """
        y = _vector("y", y, _FLOATS).to(torch.float32)
        y, norm = self._rescaled(y, norm)
        key = self._round_key(round, bucket, worker)
        scale = quantize.normalizer(norm, y.numel())
        if kernels := _kernels(y):
            return kernels.quantize(y, scale, self._levels_on(y.device), key)
        return quantize.quantize(y, scale, self._levels_on(y.device), key)

    def table_values(self, indices: torch.Tensor) -> torch.Tensor:
        """uint8 table values R[indices]: what switches and collectives add up."""
        indices = _vector("indices", indices, (torch.uint8,))
        if kernels := _kernels(indices):
            return kernels.lookup(indices, self._levels_on(indices.device))
        return quantize.lookup(indices, self._levels_on(indices.device))

    def _affine(self, total: torch.Tensor, workers: int, norm: float) -> tuple[float, float]:
        """(offset, scale) with mean = (total - offset) * scale in the rotated domain."""
        self.config.check_workers(workers)
        g = self.config.granularity
        return f32(workers * g / 2), quantize.step(norm, total.numel(), workers, self.config.threshold, g)

    def dequantize(self, total: torch.Tensor, workers: int, norm: Norm) -> torch.Tensor:
        """fp32 rotated-domain mean from the sum over ``workers`` of their table values (``norm`` as in quantize)."""
        total = _vector("total", total, _INTEGERS)
        e, norm = self._exponent(norm)
        return scaling.scaled(quantize.dequantize(total, *self._affine(total, workers, norm)), e)

    def decode(
        self, total: torch.Tensor, workers: int, norm: Norm, *, round: int, bucket: int, length: int,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """fp32 mean of the workers' inputs (dequantize + unrotate, fused on CPU; ``norm`` as in quantize).

        With ``out`` (a 1-D fp32 tensor of ``length`` elements on total's device, such as the bucket
        itself), the mean is written there and ``out`` is returned: on CPU the kernel writes it
        directly, with no output to allocate and copy.
        """
        total = _vector("total", total, _INTEGERS)
        self._check_padded("total", total, length)
        if out is not None and (out.dtype != torch.float32 or out.shape != (length,) or out.device != total.device):
            raise ValueError(f"out must be an fp32 tensor of shape ({length},) on {total.device}")
        e, norm = self._exponent(norm)
        key = self._sign_key(round, bucket)
        if kernels := _kernels(total, self._block(length)):
            offset, scale = self._affine(total, workers, norm)
            if total.dtype not in (torch.uint8, torch.int32):
                total = total.to(torch.float32)
            direct = out if out is not None and out.is_contiguous() else None
            mean = kernels.unrotate(total, self._block(length), key, length, offset=offset, scale=scale, out=direct)
        else:
            y = quantize.dequantize(total, *self._affine(total, workers, norm))
            mean = hadamard.unrotate(y, self._block(length), key, length)
        mean = scaling.scaled(mean, e)
        return mean if out is None else out.copy_(mean)  # a copy onto itself is free

    def encode(
        self, x: torch.Tensor, norm: Norm, *, round: int, bucket: int, worker: int, values: bool = False
    ) -> torch.Tensor:
        """uint8 table indices of ``x``: rotate then quantize (fused on CPU: the rotation is never stored).

        ``norm`` is the shared M, as in quantize; ||x||_2 equals the rotated norm, so workers can
        agree on M first (:meth:`norm`). ``values``: their table values instead, what a sum adds
        (:meth:`table_values` of the indices, looked up in the same pass by the kernels).
        """
        x, norm = self._rescaled(_vector("x", x, _FLOATS).to(torch.float32), norm)  # keeps the transform in range too
        kernels = _kernels(x, self._block(x.numel()))
        if not kernels:
            indices = self.quantize(self.rotate(x, round=round, bucket=bucket), norm, round=round, bucket=bucket,
                                    worker=worker)  # fmt: skip
            return self.table_values(indices) if values else indices
        padded = self.padded_length(x.numel())
        scale = quantize.normalizer(norm, padded)
        return kernels.encode(
            x, padded, self._block(x.numel()), self._sign_key(round, bucket), scale, self._levels_on(x.device),
            self._round_key(round, bucket, worker), values,
        )  # fmt: skip

    @staticmethod
    def _exponent(norm: Norm) -> tuple[int, float]:
        """(e, norm * 2**-e) for the checked fp32 norm: e = 0 unless it lies outside scaling.EXACT."""
        norm = quantize.checked_norm(norm)
        e = scaling.rescaling(norm)
        return e, norm * 2.0**-e

    def _rescaled(self, vector: torch.Tensor, norm: Norm) -> tuple[torch.Tensor, float]:
        """``vector`` and ``norm`` both scaled by the norm's 2**-e: quantizing them gives the same indices, in range."""
        e, norm = self._exponent(norm)
        return scaling.scaled(vector, -e), norm
