"""Fused Triton kernels of the THC codec for CUDA tensors (codec.py falls back to torch without Triton).

The eager torch path makes some thirty passes over memory per encode (padding, gather, signs,
ten butterfly stages, the rounding stream, the tables); these kernels make one: encode reads
the bucket once and writes its indices, decode reads the sums once and writes the mean.

Each Triton program takes ``COLUMNS`` interleaved blocks (hadamard.py: block j is every m-th
element from j) and transforms them with two tensor-core products, since the normalized
Walsh-Hadamard matrix of a block of B = B1 * 32 elements is the Kronecker product H_B1 (x) H_32.
Each product takes two TF32 passes, over the data rounded to TF32 and over what that rounding
left: the +-1 entries are exact in TF32, so the terms are exact to about 2**-22 and accumulate in
fp32 (Triton's ``tf32x3`` would add a third pass for the matrix's low bits, which are zero).
That is not the CPU's butterfly order: rotated values differ from the reference in their last
bits, and indices only where such a difference moves a value across a rounding boundary (a few
in a million). On one kind of GPU the kernels are deterministic: every worker decodes the same
sums to the same bits.

The random streams are rng.py's mixer in uint32 arithmetic, so signs and uniforms are exactly
the reference's. Set INA_COMPRESSION_TRITON=0 to use the torch path on CUDA tensors.
"""
from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import TypeVar

import triton
import triton.language as tl
import torch

from .hadamard import inverse_sqrt
from .quantize import Levels
from .rng import Key

MIN_TRITON = (3, 2)  # older interpreters and compilers reject the kernels
if tuple(int(part) for part in triton.__version__.split(".")[:2]) < MIN_TRITON:
    raise ImportError(f"the THC kernels need Triton >= {'.'.join(map(str, MIN_TRITON))}, found {triton.__version__}")

MIN_BLOCK, MAX_BLOCK = 512, 2048  # B1 = block / 32 must be >= 16 (a tensor-core dot's least side)
COLUMNS = 8  # blocks per program: each strided input row is read in 32-byte (one-sector) pieces
_ELEMENTS = 4096  # elements per program of the elementwise kernels
# No fused multiply-adds, as _native.c is built: the quantizer then rounds exactly as the reference does.
_OPTIONS = {"num_warps": 8, "enable_fp_fusion": False}


def supports(block: int) -> bool:
    """Whether the transform kernels take this block length (others use the torch path)."""
    return MIN_BLOCK <= block <= MAX_BLOCK


@triton.jit
def _mix32(x):
    """rng.mix32 on uint32."""
    x ^= x >> 16
    x *= 0x21F0AAAD
    x ^= x >> 15
    x *= 0xD35A2D97
    return x ^ (x >> 15)


@triton.jit
def _stream(index, k0, k1):
    """rng.hash_stream: the stream's word for each uint32 element index (key words as int32 bit patterns)."""
    return _mix32(_mix32(index ^ k0.to(tl.uint32, bitcast=True)) ^ k1.to(tl.uint32, bitcast=True))


@triton.jit
def _flip(x, word, bit):
    """x with its sign flipped where bit ``bit`` of the sign stream's ``word`` is set (rng.signs)."""
    mask = ((word >> bit.to(tl.uint32)) & 1) << 31
    return (x.to(tl.uint32, bitcast=True) ^ mask).to(tl.float32, bitcast=True)


@triton.jit
def _hadamard(N: tl.constexpr):
    """The N x N Sylvester matrix, (-1) ** popcount(i & j), for N <= 256."""
    i = tl.arange(0, N)
    v = i[:, None] & i[None, :]
    v ^= v >> 4
    v ^= v >> 2
    v ^= v >> 1
    return 1.0 - 2.0 * (v & 1).to(tl.float32)


@triton.jit
def _product(h, x):
    """h @ x for an exact (+-1) h and fp32 x, to about 2**-22: two TF32 passes over x's leading and trailing bits."""
    lead = ((x.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)  # x rounded to TF32
    return tl.dot(h, x - lead, tl.dot(h, lead, input_precision="tf32"), input_precision="tf32")


@triton.jit
def _transform(t, A: tl.constexpr, B: tl.constexpr, COLUMNS: tl.constexpr):
    """Unnormalized WHT of each column k of t[a, b, k] as out[sb, sa, k]: H_A along axis 0, then H_B along axis 1."""
    z = _product(_hadamard(A), tl.reshape(t, (A, B * COLUMNS)))  # z[sa, b, k]
    z = tl.reshape(tl.permute(tl.reshape(z, (A, B, COLUMNS)), (1, 0, 2)), (B, A * COLUMNS))
    return tl.reshape(_product(_hadamard(B), z), (B, A, COLUMNS))


@triton.jit
def _indices(y, p, scale, threshold, gain, top, brackets, q0, q1, VALUES: tl.constexpr = False):
    """quantize.quantize of fp32 y, operation by operation; p: each element's position (its stream index).

    VALUES: the indices' table values instead: the bracket's lower level, plus its step where rounding up.
    """
    u = y * scale
    u = tl.where(u > -threshold, u, -threshold)  # NaN goes to -T
    u = tl.where(u < threshold, u, threshold)
    v = (u + threshold) * gain
    bracket = tl.load(brackets + tl.minimum(tl.maximum(v.to(tl.int32), 0), top))  # see _brackets
    r = (_stream(p.to(tl.uint32), q0, q1) >> 8).to(tl.float32) * 5.9604644775390625e-08  # 2**-24: exact
    below, step = (bracket >> 8) & 0xFF, bracket >> 16
    up = r * step.to(tl.float32) < v - below.to(tl.float32)
    if VALUES:
        return (below + tl.where(up, step, 0)).to(tl.uint8)
    return ((bracket & 0xFF) + up).to(tl.uint8)


@triton.jit
def _rotated(src, n, columns, k0, k1, normalization, B1: tl.constexpr, COLUMNS: tl.constexpr):
    """Blocks c0 .. c0 + COLUMNS of the rotation of src (zero beyond n), their positions p and which are real."""
    c0 = tl.program_id(0) * COLUMNS
    r2 = tl.arange(0, 32)[:, None, None]
    r1 = tl.arange(0, B1)[None, :, None]
    column = c0 + tl.arange(0, COLUMNS)[None, None, :]
    at = (r1 * 32 + r2).to(tl.int64) * columns + column  # input element r * m + c, row r = r1 * 32 + r2
    t = tl.load(src + at, mask=(at < n) & (column < columns), other=0.0)
    # The sign of position p = c * block + r is bit r2 of stream word c * B1 + r1 (32 signs a word).
    t = _flip(t, _stream((column * B1 + r1).to(tl.uint32), k0, k1), r2)
    y = _transform(t, 32, B1, COLUMNS) * normalization  # y[s1, s2, k]
    s1 = tl.arange(0, B1)[:, None, None]
    s2 = tl.arange(0, 32)[None, :, None]
    return y, column.to(tl.int64) * (B1 * 32) + s1 * 32 + s2, column < columns


@triton.jit(do_not_specialize=["k0", "k1"])
def _rotate_kernel(src, n, dst, columns, k0, k1, normalization, B1: tl.constexpr, COLUMNS: tl.constexpr):
    """hadamard.rotate, COLUMNS blocks per program."""
    y, p, keep = _rotated(src, n, columns, k0, k1, normalization, B1, COLUMNS)
    tl.store(dst + p, y, mask=keep)


@triton.jit(do_not_specialize=["k0", "k1", "q0", "q1"])
def _encode_kernel(
    src, n, dst, columns, k0, k1, normalization, scale, threshold, gain, top, brackets, q0, q1,
    B1: tl.constexpr, COLUMNS: tl.constexpr, VALUES: tl.constexpr,
):  # fmt: skip
    """hadamard.rotate then quantize.quantize, COLUMNS blocks per program: only the indices (or values) are stored."""
    y, p, keep = _rotated(src, n, columns, k0, k1, normalization, B1, COLUMNS)
    tl.store(dst + p, _indices(y, p, scale, threshold, gain, top, brackets, q0, q1, VALUES), mask=keep)


@triton.jit(do_not_specialize=["k0", "k1"])
def _decode_kernel(
    src, dst, length, columns, offset, scale, k0, k1, normalization, B1: tl.constexpr, COLUMNS: tl.constexpr
):  # fmt: skip
    """Blocks c0 .. c0 + COLUMNS of (src - offset) * scale, transformed, signs flipped, scattered (first ``length``)."""
    block: tl.constexpr = B1 * 32
    c0 = tl.program_id(0) * COLUMNS
    s1 = tl.arange(0, B1)[:, None, None]
    s2 = tl.arange(0, 32)[None, :, None]
    k = tl.arange(0, COLUMNS)[None, None, :]
    column = c0 + k
    keep = column < columns
    total = tl.load(src + column.to(tl.int64) * block + s1 * 32 + s2, mask=keep, other=0)
    x = _transform((total.to(tl.float32) - offset) * scale, B1, 32, COLUMNS) * normalization  # x[r2, r1, k]
    r2 = tl.arange(0, 32)[:, None, None]
    r1 = tl.arange(0, B1)[None, :, None]
    x = _flip(x, _stream((column * B1 + r1).to(tl.uint32), k0, k1), r2)
    at = (r1 * 32 + r2).to(tl.int64) * columns + column
    tl.store(dst + at, x, mask=keep & (at < length))


@triton.jit(do_not_specialize=["q0", "q1"])
def _quantize_kernel(src, n, dst, scale, threshold, gain, top, brackets, q0, q1, BLOCK: tl.constexpr):
    """quantize.quantize of src[0, n)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = i < n
    y = tl.load(src + i, mask=keep, other=0.0)
    tl.store(dst + i, _indices(y, i, scale, threshold, gain, top, brackets, q0, q1), mask=keep)


@triton.jit
def _lookup_kernel(src, n, dst, values, BLOCK: tl.constexpr):
    """dst[i] = values[src[i]] (uint8)."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    keep = i < n
    tl.store(dst + i, tl.load(values + tl.load(src + i, mask=keep, other=0).to(tl.int32)), mask=keep)


def _words(key: Key) -> tuple[int, int]:
    """The key's words as int32 bit patterns: one kernel signature whatever their values."""
    return tuple(word - (1 << 32) if word >> 31 else word for word in key)


def _launch(block: int, blocks: int) -> dict:
    """The transform kernels' grid, constexprs and launch options for ``blocks`` blocks of ``block``."""
    return {"grid": (triton.cdiv(blocks, COLUMNS),), "B1": block // 32, "COLUMNS": COLUMNS, **_OPTIONS}


@functools.lru_cache(maxsize=16)
def _brackets(levels: Levels) -> torch.Tensor:
    """Levels' three tables in one int32 word per floor(v): lower | base << 8 | width << 16 (one load, not three)."""
    return levels.lower.int() | levels.base.int() << 8 | levels.width.int() << 16


def _quantizer(scale: float, levels: Levels, key: Key) -> dict:
    """The quantizer's kernel arguments."""
    return {"scale": scale, "threshold": levels.threshold, "gain": levels.gain, "top": levels.granularity - 1,
            "brackets": _brackets(levels), "q0": _words(key)[0], "q1": _words(key)[1]}  # fmt: skip


Wrapper = TypeVar("Wrapper", bound=Callable[..., torch.Tensor])


def _on_its_device(wrapper: Wrapper) -> Wrapper:
    """Run ``wrapper`` with its first tensor's GPU current: Triton launches on the current device, not the tensor's.

    (CPU tensors are for the interpreter, which needs no device.)
    """

    @functools.wraps(wrapper)
    def run(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        with torch.cuda.device(tensor.device) if tensor.is_cuda else contextlib.nullcontext():
            return wrapper(tensor, *args, **kwargs)

    return run  # type: ignore[return-value]


@_on_its_device
def rotate(x: torch.Tensor, padded: int, block: int, key: Key) -> torch.Tensor:
    """hadamard.rotate for a contiguous fp32 CUDA ``x``."""
    out = torch.empty(padded, dtype=torch.float32, device=x.device)
    meta = _launch(block, padded // block)
    _rotate_kernel[meta.pop("grid")](x, x.numel(), out, padded // block, *_words(key), inverse_sqrt(block), **meta)
    return out


@_on_its_device
def encode(
    x: torch.Tensor, padded: int, block: int, sign_key: Key, scale: float, levels: Levels, round_key: Key,
    values: bool = False,
) -> torch.Tensor:  # fmt: skip
    """quantize(rotate(x, padded, block, sign_key), scale, levels, round_key) without storing the rotation.

    ``values``: the indices' table values instead (lookup(indices, levels)), in the same pass.
    """
    out = torch.empty(padded, dtype=torch.uint8, device=x.device)
    meta = _launch(block, padded // block)
    _encode_kernel[meta.pop("grid")](
        x, x.numel(), out, padded // block, *_words(sign_key), inverse_sqrt(block),
        **_quantizer(scale, levels, round_key), VALUES=values, **meta,
    )  # fmt: skip
    return out


@_on_its_device
def unrotate(
    src: torch.Tensor, block: int, key: Key, length: int, *, offset: float = 0.0, scale: float = 1.0,
    out: torch.Tensor | None = None,
) -> torch.Tensor:  # fmt: skip
    """hadamard.unrotate(quantize.dequantize(src, offset, scale)) for contiguous fp32/uint8/int32 CUDA ``src``.

    ``out``, when given, is a contiguous fp32 tensor of ``length`` elements on src's device to write into.
    """
    out = torch.empty(length, dtype=torch.float32, device=src.device) if out is None else out
    meta = _launch(block, src.numel() // block)
    _decode_kernel[meta.pop("grid")](
        src, out, length, src.numel() // block, offset, scale, *_words(key), inverse_sqrt(block), **meta
    )
    return out


@_on_its_device
def quantize(y: torch.Tensor, scale: float, levels: Levels, key: Key) -> torch.Tensor:
    """quantize.quantize for a contiguous fp32 CUDA ``y``."""
    out = torch.empty(y.numel(), dtype=torch.uint8, device=y.device)
    _quantize_kernel[(triton.cdiv(y.numel(), _ELEMENTS),)](
        y, y.numel(), out, **_quantizer(scale, levels, key), BLOCK=_ELEMENTS, **_OPTIONS
    )
    return out


@_on_its_device
def lookup(indices: torch.Tensor, levels: Levels) -> torch.Tensor:
    """quantize.lookup for a contiguous uint8 CUDA ``indices``."""
    out = torch.empty(indices.numel(), dtype=torch.uint8, device=indices.device)
    _lookup_kernel[(triton.cdiv(indices.numel(), _ELEMENTS),)](
        indices, indices.numel(), out, levels.values, BLOCK=_ELEMENTS, **_OPTIONS
    )
    return out
