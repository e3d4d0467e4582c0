"""The codec at the edges of fp32: every finite norm is exact, non-finite input has a stated outcome."""
import math

import pytest
import torch

from ina.compression import THCCodec, THCConfig

N = 3000
FP32_MAX = torch.finfo(torch.float32).max


def gaussian(n=N, seed=0):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


def roundtrip(codec, x, norm=None, workers=1):
    """One worker's decoded encoding of ``x`` under the shared ``norm`` (its own by default)."""
    norm = codec.norm(x) if norm is None else norm
    total = codec.table_values(codec.encode(x, norm, round=3, bucket=1, worker=0)).int() * workers
    return codec.decode(total, workers, norm, round=3, bucket=1, length=x.numel())


def relative_error(got, want):
    return float((got.double() - want.double()).norm() / want.double().norm())


@pytest.mark.parametrize("k", [-140, -130, -100, 0, 40, 70, 100, 120])
def test_norm_is_accurate_from_denormals_to_squares_beyond_fp32(k):
    codec = THCCodec(THCConfig())
    x = gaussian() * 2.0**k
    exact = float(x.double().norm())
    assert codec.norm(x) == pytest.approx(exact, rel=1e-4 if k <= -130 else 1e-6)  # denormal norms: fewer bits
    if k == 0:
        assert codec.norm(x) == float(torch.linalg.vector_norm(x))  # in range: the plain fp32 reduction


def test_norm_is_nan_for_non_finite_vectors_and_norms_beyond_fp32():
    codec = THCCodec(THCConfig())
    for bad in (math.inf, -math.inf, math.nan):
        x = gaussian()
        x[17] = bad
        assert math.isnan(codec.norm(x))
        assert math.isnan(codec.norm(x.to(torch.bfloat16)))
    assert math.isnan(codec.norm(torch.full((10,), FP32_MAX)))  # every element finite, the norm is not
    assert codec.norm(torch.zeros(N)) == 0.0 and codec.norm(torch.zeros(0)) == 0.0


@pytest.mark.parametrize("k", [-90, 64, 100, 120])
def test_inputs_scaled_by_a_power_of_two_encode_alike_and_decode_scaled_bit_for_bit(k):
    codec = THCCodec(THCConfig())
    x = gaussian()
    big = x * 2.0**k
    norm = codec.norm(x)
    assert codec.norm(big) == norm * 2.0**k
    indices = codec.encode(x, norm, round=3, bucket=1, worker=0)
    assert torch.equal(codec.encode(big, norm * 2.0**k, round=3, bucket=1, worker=0), indices)
    if k <= 100:  # the separate rotation is in range up to fp32's max / sqrt(block)
        rotated = codec.rotate(big, round=3, bucket=1)
        assert torch.equal(codec.quantize(rotated, norm * 2.0**k, round=3, bucket=1, worker=0), indices)
    total = codec.table_values(indices).int()
    mean = codec.decode(total, 1, norm, round=3, bucket=1, length=N)
    assert torch.equal(codec.decode(total, 1, norm * 2.0**k, round=3, bucket=1, length=N), mean * 2.0**k)
    assert torch.equal(codec.dequantize(total, 1, norm * 2.0**k), codec.dequantize(total, 1, norm) * 2.0**k)


def test_denormal_vectors_are_encoded_as_accurately_as_normal_ones():
    codec = THCCodec(THCConfig())
    x = gaussian()
    tiny = x * 2.0**-140  # mostly denormals
    assert bool((tiny.abs() < torch.finfo(torch.float32).tiny).float().mean() > 0.9)
    normal_error = relative_error(roundtrip(codec, x), x)
    tiny_error = relative_error(roundtrip(codec, tiny), tiny)
    assert normal_error < 0.2 and tiny_error == pytest.approx(normal_error, abs=0.01)


def test_a_zero_vector_under_a_denormal_shared_norm_rounds_to_the_middle_levels():
    """sqrt(d) / M overflows fp32 for such an M: 0 * inf would be NaN and quantize to index 0 (-T)."""
    codec = THCCodec(THCConfig())
    indices = codec.quantize(torch.zeros(4096), 1e-40, round=0, bucket=0, worker=0)
    values = codec.table_values(indices)
    assert set(values.unique().tolist()) <= {14, 16}  # the levels around g / 2 = 15
    mean = codec.decode(values.int(), 1, 1e-40, round=0, bucket=0, length=4096)
    assert bool(mean.isfinite().all()) and float(mean.abs().max()) < 1e-40


@pytest.mark.parametrize("norm", [math.nan, math.inf, -math.inf, -1.0, 1e39, torch.tensor(math.nan)])
def test_non_finite_or_negative_norms_are_refused_by_every_function_that_takes_one(norm):
    codec = THCCodec(THCConfig())
    total = torch.zeros(4096, dtype=torch.int32)
    calls = [
        lambda: codec.quantize(torch.zeros(4096), norm, round=0, bucket=0, worker=0),
        lambda: codec.encode(torch.zeros(4096), norm, round=0, bucket=0, worker=0),
        lambda: codec.dequantize(total, 1, norm),
        lambda: codec.decode(total, 1, norm, round=0, bucket=0, length=4096),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="norm must be a finite number >= 0 in fp32"):
            call()


def test_non_finite_coordinates_spread_over_their_block_and_quantize_to_the_ends():
    codec = THCCodec(THCConfig())  # 4096 elements: four interleaved blocks of 1024
    x = gaussian(4096)
    x[5] = math.nan  # element 5 lands in block 5 mod 4 = 1
    rotated = codec.rotate(x, round=0, bucket=0)
    assert torch.equal(~rotated.isfinite(), torch.arange(4096) // 1024 == 1)
    y = torch.tensor([math.nan, math.inf, -math.inf, 0.0])
    assert codec.quantize(y, 1.0, round=0, bucket=0, worker=0)[:3].tolist() == [0, 15, 0]
