"""Randomized Hadamard transform: exact inverse, norm preservation, key-derived signs."""
import pytest
import torch

from ina.compression import THCCodec, THCConfig
from ina.compression.hadamard import fwht, gather_blocks, scatter_blocks
from ina.compression.rng import SIGN_STREAM, signs, stream_key

LENGTHS = [1, 2, 3, 7, 8, 100, 1000, 1024, 1025, 3000, 5000]


@pytest.fixture
def codec():
    return THCCodec(THCConfig(), seed=11)


def test_padded_length(codec):
    assert [codec.padded_length(n) for n in [0, 1, 2, 3, 5, 1000, 1024, 1025, 3000]] == [
        0, 1, 2, 4, 8, 1024, 1024, 2048, 3072,
    ]  # fmt: skip
    assert THCCodec(THCConfig(block_size=256)).padded_length(1000) == 1024
    with pytest.raises(ValueError, match="length"):
        codec.padded_length(-1)


@pytest.mark.parametrize("n", LENGTHS)
def test_inverse_is_exact_and_norm_is_preserved(codec, n):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    y = codec.rotate(x, round=3, bucket=1)
    assert y.dtype == torch.float32 and y.numel() == codec.padded_length(n)
    assert float(y.norm()) == pytest.approx(float(x.norm()), rel=1e-5)
    back = codec.unrotate(y, round=3, bucket=1, length=n)
    assert back.shape == x.shape
    assert torch.allclose(back, x, rtol=0, atol=1e-5 * float(x.abs().max()))


def test_walsh_hadamard_matches_the_matrix():
    block = 16
    hadamard = torch.ones(1, 1)
    while hadamard.shape[0] < block:
        hadamard = torch.cat([torch.cat([hadamard, hadamard], 1), torch.cat([hadamard, -hadamard], 1)], 0)
    x = torch.randn(3 * block)
    expected = (x.view(3, block) @ hadamard.T / block**0.5).reshape(-1)
    assert torch.allclose(fwht(x, block), expected, atol=1e-5)
    assert torch.allclose(fwht(fwht(x, block), block), x, atol=1e-5)  # its own inverse


def test_rotation_is_gather_sign_flip_then_transform(codec):
    x = torch.randn(2048)
    key = stream_key(SIGN_STREAM, codec.seed, 4, 2)
    expected = fwht(gather_blocks(x, 1024) * signs(2048, key, x.device), 1024)
    assert torch.equal(codec.rotate(x, round=4, bucket=2), expected)


def test_blocks_interleave():
    x = torch.arange(12.0)
    assert gather_blocks(x, 4).tolist() == [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]
    assert torch.equal(scatter_blocks(gather_blocks(x, 4), 4), x)


def test_signs_are_balanced_and_keyed():
    a = signs(1 << 16, stream_key(SIGN_STREAM, 0, 0, 0), torch.device("cpu"))
    assert set(a.unique().tolist()) == {-1.0, 1.0}
    assert abs(float(a.mean())) < 5 / 256  # 5 sigma for 2**16 fair coins
    for other in [(0, 1, 0), (0, 0, 1), (1, 0, 0), (0, 2**40, 0)]:
        b = signs(1 << 16, stream_key(SIGN_STREAM, *other), torch.device("cpu"))
        assert abs(float((a * b).mean())) < 5 / 256, f"signs for {other} are independent of (0, 0, 0)"


def test_same_keys_agree_different_keys_differ(codec):
    x = torch.randn(4096)
    y = codec.rotate(x, round=7, bucket=2)
    assert torch.equal(y, THCCodec(THCConfig(), seed=11).rotate(x, round=7, bucket=2))
    for other in [dict(round=8, bucket=2), dict(round=7, bucket=3)]:
        assert not torch.allclose(y, codec.rotate(x, **other))
    assert not torch.allclose(y, THCCodec(THCConfig(), seed=12).rotate(x, round=7, bucket=2))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_low_precision_inputs(codec, dtype):
    x = torch.randn(3000).to(dtype)
    y = codec.rotate(x, round=0, bucket=0)
    assert y.dtype == torch.float32
    assert torch.equal(y, codec.rotate(x.float(), round=0, bucket=0))


def test_non_contiguous_input(codec):
    strided = torch.randn(6000)[::2]
    assert not strided.is_contiguous()
    assert torch.equal(codec.rotate(strided, round=0, bucket=0), codec.rotate(strided.clone(), round=0, bucket=0))


def test_empty_vector(codec):
    y = codec.rotate(torch.empty(0), round=0, bucket=0)
    assert y.numel() == 0
    assert codec.unrotate(y, round=0, bucket=0, length=0).numel() == 0


def test_rotation_spreads_a_spike(codec):
    """What THC relies on: after rotation no coordinate dominates."""
    x = torch.zeros(4096)
    x[5] = 1.0
    y = codec.rotate(x, round=0, bucket=0)
    assert float(y.abs().max()) == pytest.approx(1 / 32, rel=1e-6)


def test_blocks_interleave_so_a_large_layer_spreads_over_all_blocks(codec):
    """A bucket whose energy sits in one contiguous layer still gets even energy per block."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8192, generator=generator) * 1e-3
    x[:1024] = torch.randn(1024, generator=generator) * 10  # one loud layer, the size of a block
    y = codec.rotate(x, round=0, bucket=0).view(8, 1024)  # row j = block j
    energy = (y**2).sum(1)
    # Each block holds 128 of the layer's elements: chi-square spread, not the 1e8 of contiguous blocks.
    assert float(energy.max() / energy.min()) < 2


def test_bad_inputs_are_rejected(codec):
    with pytest.raises(ValueError, match="x"):
        codec.rotate(torch.randn(4, 4), round=0, bucket=0)
    with pytest.raises(ValueError, match="x"):
        codec.rotate(torch.arange(4), round=0, bucket=0)
    with pytest.raises(ValueError, match="length"):
        codec.unrotate(torch.randn(1024), round=0, bucket=0, length=2000)
    with pytest.raises(ValueError, match="round"):
        codec.rotate(torch.randn(4), round=-1, bucket=0)
    with pytest.raises(ValueError, match="bucket"):
        codec.rotate(torch.randn(4), round=0, bucket=None)
