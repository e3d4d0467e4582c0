"""The Triton kernels (compression/triton_kernels.py) against the torch reference, under Triton's interpreter.

TRITON_INTERPRET=1 runs the kernels on CPU tensors with numpy, so this covers their indexing,
streams, quantizer and transform without a GPU; the interpreter's products are plain fp32 where
a GPU's are two TF32 passes, so tests/test_codec_cuda.py checks the same bounds on a GPU.
"""
import importlib.util
import inspect
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from ina.compression import THCCodec, THCConfig, codec as codec_module, hadamard, quantize
from ina.compression.rng import SIGN_STREAM, stream_key

triton = pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[gpu]'); its interpreter runs these")

CONFIGS = {
    "thc4": THCConfig(),
    "thc8-b2048": THCConfig(bits=8, granularity=255, block_size=2048),
    "thc1-b512": THCConfig(bits=1, granularity=2, clip=0.2, block_size=512),
    "uhc2": THCConfig.uniform(2),
}
LENGTHS = [600, 1024, 1025, 9000]  # one block shorter than block_size, one, two (m = 2), several


def load_kernels(interpret: bool) -> ModuleType:
    """A fresh copy of triton_kernels.py whose kernels run in the interpreter or compile (TRITON_INTERPRET is read
    when they are defined)."""
    path = Path(codec_module.__file__).with_name("triton_kernels.py")
    spec = importlib.util.spec_from_file_location(f"ina.compression._triton_kernels_{interpret}", path)
    module = importlib.util.module_from_spec(spec)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1" if interpret else "0")
        spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kernels() -> ModuleType:
    return load_kernels(interpret=True)


def case(name: str, n: int, seed: int = 5):
    """(codec, x, padded, block, sign key, round key, levels, shared norm) for one config and length."""
    codec = THCCodec(CONFIGS[name], seed=seed)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3
    block = codec._block(n)
    return (codec, x, codec.padded_length(n), block, codec._sign_key(2, 9), codec._round_key(2, 9, 1),
            codec._levels_on(x.device), float(x.norm()) * 1.1)  # fmt: skip


def test_the_transform_blocks_are_the_supported_ones(kernels):
    assert [kernels.supports(b) for b in (256, 512, 1024, 2048, 4096)] == [False, True, True, True, False]
    assert all(kernels.supports(case(name, 9000)[3]) for name in CONFIGS)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("n", LENGTHS)
def test_rotation_matches_the_reference_to_fp32_rounding(kernels, name, n):
    codec, x, padded, block, key, *_ = case(name, n)
    assert kernels.supports(block)
    y = kernels.rotate(x, padded, block, key)
    reference = hadamard.rotate(x, padded, block, key)
    assert y.shape == reference.shape and y.dtype == torch.float32
    tolerance = 4e-7 * float(x.abs().max())  # a few fp32 ulps of the largest coordinate
    assert torch.allclose(y, reference, rtol=0, atol=tolerance)
    back = kernels.unrotate(y, block, key, n)
    assert torch.allclose(back, hadamard.unrotate(reference, block, key, n), rtol=0, atol=tolerance)
    assert torch.allclose(back, x, rtol=0, atol=tolerance)


def test_signs_follow_the_stream_for_keys_of_either_sign(kernels):
    """A unit vector per block position: rotating e_r gives column r of the transform, signed by the stream."""
    block = 512
    for seed in range(4):
        key = stream_key(SIGN_STREAM, seed, 0, 0)
        x = torch.zeros(block)
        x[[0, 33, 511]] = torch.tensor([1.0, -2.0, 4.0])
        assert torch.equal(kernels.rotate(x, block, block, key), hadamard.rotate(x, block, block, key))
    words = [w for seed in range(4) for w in stream_key(SIGN_STREAM, seed, 0, 0)]
    assert any(w >> 31 for w in words) and any(not w >> 31 for w in words)  # both int32 signs were passed


@pytest.mark.parametrize("name", CONFIGS)
def test_quantize_is_the_reference_bit_for_bit(kernels, name):
    codec, x, padded, block, _, round_key, levels, norm = case(name, 9000)
    y = hadamard.rotate(x, padded, block, codec._sign_key(2, 9))
    y[:6] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30, -1e30, 0.0])
    scale = quantize.normalizer(norm, padded)
    got = kernels.quantize(y, scale, levels, round_key)
    assert got.dtype == torch.uint8
    assert torch.equal(got, quantize.quantize(y, scale, levels, round_key))
    assert got[:5].tolist() == [0, levels.levels - 1, 0, levels.levels - 1, 0]  # NaN, +-inf, beyond the clip


@pytest.mark.parametrize("name", CONFIGS)
def test_encode_is_rotate_then_quantize_and_the_reference_but_at_rounding_boundaries(kernels, name):
    codec, x, padded, block, sign_key, round_key, levels, norm = case(name, 1 << 16)
    scale = quantize.normalizer(norm, padded)
    fused = kernels.encode(x, padded, block, sign_key, scale, levels, round_key)
    assert torch.equal(fused, kernels.quantize(kernels.rotate(x, padded, block, sign_key), scale, levels, round_key))
    values = kernels.encode(x, padded, block, sign_key, scale, levels, round_key, values=True)
    assert torch.equal(values, quantize.lookup(fused, levels))
    reference = quantize.quantize(hadamard.rotate(x, padded, block, sign_key), scale, levels, round_key)
    differ = fused != reference
    # Where the transform's last bit moves a value across a rounding boundary, the index is the next level.
    assert float(differ.float().mean()) <= 1e-4
    assert bool(((fused.int() - reference.int()).abs()[differ] == 1).all())


def test_lookup_is_the_table(kernels):
    levels = THCCodec(THCConfig(bits=8, granularity=255))._levels_on(torch.device("cpu"))
    indices = torch.randint(0, 256, (10_000,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert torch.equal(kernels.lookup(indices, levels), quantize.lookup(indices, levels))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32])
@pytest.mark.parametrize("n", [1025, 9000])
def test_decode_matches_the_reference_and_repeats_bit_for_bit(kernels, dtype, n):
    codec, x, padded, block, sign_key, round_key, levels, norm = case("thc4", n)
    values = quantize.lookup(kernels.encode(x, padded, block, sign_key, quantize.normalizer(norm, padded),
                                            levels, round_key), levels)  # fmt: skip
    total = values.to(dtype) * 3 if dtype == torch.int32 else values
    workers = 3 if dtype == torch.int32 else 1
    offset, scale = codec._affine(total, workers, norm)
    mean = kernels.unrotate(total, block, sign_key, n, offset=offset, scale=scale)
    reference = hadamard.unrotate(quantize.dequantize(total, offset, scale), block, sign_key, n)
    assert torch.allclose(mean, reference, rtol=0, atol=1e-6 * float(reference.abs().max()))
    again = torch.full((n,), float("nan"))
    assert kernels.unrotate(total, block, sign_key, n, offset=offset, scale=scale, out=again) is again
    assert torch.equal(again, mean)  # every worker decodes the same sums to the same bits


QUANTIZER = {"scale": "fp32", "threshold": "fp32", "gain": "fp32", "top": "i32", "brackets": "*i32", "q0": "i32",
             "q1": "i32"}  # fmt: skip
TRANSFORM = {"B1": "constexpr", "COLUMNS": "constexpr"}
SIGNATURES = {  # each kernel's argument types as the wrappers pass them (key words as int32: triton_kernels._words)
    "_encode_kernel": {"src": "*fp32", "n": "i32", "dst": "*u8", "columns": "i32", "k0": "i32", "k1": "i32",
                       "normalization": "fp32", **QUANTIZER, **TRANSFORM, "VALUES": "constexpr"},
    "_decode_kernel": {"src": "*u8", "dst": "*fp32", "length": "i32", "columns": "i32", "offset": "fp32", "scale": "fp32",
                       "k0": "i32", "k1": "i32", "normalization": "fp32", **TRANSFORM},
    "_quantize_kernel": {"src": "*fp32", "n": "i32", "dst": "*u8", **QUANTIZER, "BLOCK": "constexpr"},
}  # fmt: skip


@pytest.mark.parametrize("name, values", [(name, False) for name in SIGNATURES] + [("_encode_kernel", True)])
def test_kernels_compile_for_hopper_with_tensor_core_products_and_no_fused_multiply_adds(name, values):
    """What the interpreter cannot show: Triton's compiler takes the kernels (no GPU needed to compile for one)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    if "constexprs" not in inspect.signature(ASTSource).parameters:
        pytest.skip(f"Triton {triton.__version__} compiles ahead of time through an older API (constexprs= is 3.3's)")
    module = load_kernels(interpret=False)
    constexprs = {"BLOCK": module._ELEMENTS} if name == "_quantize_kernel" else {"B1": 32, "COLUMNS": module.COLUMNS}
    if name == "_encode_kernel":
        constexprs["VALUES"] = values  # indices, or their table values
    source = ASTSource(fn=getattr(module, name), signature=SIGNATURES[name], constexprs=constexprs)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=module._OPTIONS)
    assert compiled.asm["cubin"]
    assert ("nvidia_mma" in compiled.asm["ttgir"]) == (name != "_quantize_kernel")  # the products: tensor cores
    assert "fma.rn.f32" not in compiled.asm["ptx"]  # the quantizer rounds as the reference does


def test_cpu_tensors_never_take_the_triton_path():
    assert codec_module._kernels(torch.zeros(4096), 1024) in (None, codec_module.native)


def test_without_triton_cuda_tensors_fall_back_with_one_warning(monkeypatch):
    load = codec_module._triton_kernels.__wrapped__
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton now raises ImportError
    monkeypatch.delitem(sys.modules, "ina.compression.triton_kernels", raising=False)
    with pytest.warns(RuntimeWarning, match="Triton unavailable"):
        assert load() is None
    monkeypatch.setenv("INA_COMPRESSION_TRITON", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load() is None  # off on purpose: quietly
