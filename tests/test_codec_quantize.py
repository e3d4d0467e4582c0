"""Stochastic quantization: unbiased, with the variance the table predicts, independent per worker.

The random streams are deterministic functions of their keys, so these statistical checks give
the same outcome on every run; the 5-sigma tolerances make a wrong implementation fail, not flake.
"""
import math

import numpy as np
import pytest
import torch

from ina.compression import THCCodec, THCConfig

N = 1 << 16


def rotated_within_range(codec, n=N, seed=0):
    """A rotated vector whose normalized coordinates never reach the clip threshold, and its M."""
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    y = codec.rotate(x, round=0, bucket=0)
    # Scale M so that |u| <= 0.9 T everywhere: nothing is clipped.
    norm = float(y.abs().max()) * math.sqrt(y.numel()) / (0.9 * codec.config.threshold)
    return y, norm


def mapped(codec, y, norm):
    """v = (u + T) * g / (2T) in float64, the value whose rounding is being tested."""
    t, g = codec.config.threshold, codec.config.granularity
    u = y.double() * math.sqrt(y.numel()) / norm
    return (u.clamp(-t, t) + t) * g / (2 * t)


def bracket(codec, v):
    table = torch.tensor(codec.config.table, dtype=torch.float64)
    hi_index = torch.searchsorted(table, v).clamp(1, len(table) - 1)
    return table[hi_index - 1], table[hi_index]


CONFIGS = [THCConfig(), THCConfig(bits=2), THCConfig(bits=8, granularity=255), THCConfig.uniform(4)]


@pytest.mark.parametrize("config", CONFIGS, ids=["thc4", "thc2", "thc8", "uhc4"])
def test_indices_pick_bracketing_levels(config):
    codec = THCCodec(config)
    y, norm = rotated_within_range(codec)
    idx = codec.quantize(y, norm, round=0, bucket=0, worker=0)
    assert idx.dtype == torch.uint8 and idx.shape == y.shape
    values = codec.table_values(idx).double()
    lo, hi = bracket(codec, mapped(codec, y, norm))
    assert bool(((values == lo) | (values == hi)).all())


@pytest.mark.parametrize("config", CONFIGS, ids=["thc4", "thc2", "thc8", "uhc4"])
def test_unbiased_where_nothing_is_clipped(config):
    codec = THCCodec(config)
    y, norm = rotated_within_range(codec, n=1 << 12)
    v = mapped(codec, y, norm)
    lo, hi = bracket(codec, v)
    variance = (v - lo) * (hi - v)
    trials = 256
    error = torch.zeros_like(v)
    for worker in range(trials):
        error += codec.table_values(codec.quantize(y, norm, round=0, bucket=0, worker=worker)).double() - v
    # Overall bias: the summed error has variance trials * sum(variance).
    assert abs(float(error.sum())) < 5 * math.sqrt(trials * float(variance.sum()))
    # Per coordinate: sum of squared z-scores is chi-square with ~n degrees of freedom.
    live = variance > 1e-9
    chi2 = float((error[live] ** 2 / (trials * variance[live])).sum())
    dof = int(live.sum())
    assert abs(chi2 - dof) < 5 * math.sqrt(2 * dof) + 0.05 * dof


@pytest.mark.parametrize("config", CONFIGS, ids=["thc4", "thc2", "thc8", "uhc4"])
def test_error_matches_the_variance_the_table_predicts(config):
    codec = THCCodec(config)
    y, norm = rotated_within_range(codec)
    v = mapped(codec, y, norm)
    lo, hi = bracket(codec, v)
    p_up = ((v - lo) / (hi - lo).clamp(min=1e-12)).clamp(0, 1)
    predicted = float(((v - lo) * (hi - v)).sum())
    # Each squared error is (v-lo)^2 w.p. 1-p or (hi-v)^2 w.p. p: its variance bounds the tolerance.
    second = (1 - p_up) * (v - lo) ** 4 + p_up * (hi - v) ** 4
    spread = math.sqrt(float((second - ((v - lo) * (hi - v)) ** 2).sum()))
    values = codec.table_values(codec.quantize(y, norm, round=1, bucket=0, worker=3)).double()
    measured = float(((values - v) ** 2).sum())
    assert abs(measured - predicted) < 5 * spread
    # The same through decode: the mean squared error of one worker's reconstruction.
    idx = codec.quantize(y, norm, round=1, bucket=0, worker=3)
    y_hat = codec.dequantize(codec.table_values(idx).int(), 1, norm).double()
    step = 2 * codec.config.threshold / codec.config.granularity * norm / math.sqrt(y.numel())
    assert float(((y_hat - y.double()) ** 2).sum()) == pytest.approx(measured * step**2, rel=1e-4)


def test_streams_are_independent_across_workers_and_repeat_for_the_same_key():
    codec = THCCodec(THCConfig())
    y, norm = rotated_within_range(codec)
    v = mapped(codec, y, norm)
    err = [codec.table_values(codec.quantize(y, norm, round=0, bucket=0, worker=w)).double() - v for w in range(3)]
    again = codec.table_values(codec.quantize(y, norm, round=0, bucket=0, worker=0)).double() - v
    assert torch.equal(err[0], again)
    for a, b in [(0, 1), (0, 2), (1, 2)]:
        correlation = float(np.corrcoef(err[a].numpy(), err[b].numpy())[0, 1])
        assert abs(correlation) < 5 / math.sqrt(N), f"workers {a} and {b} round independently"
    other_round = codec.table_values(codec.quantize(y, norm, round=1, bucket=0, worker=0)).double() - v
    assert abs(float(np.corrcoef(err[0].numpy(), other_round.numpy())[0, 1])) < 5 / math.sqrt(N)


def test_clipping_saturates_at_the_end_levels():
    codec = THCCodec(THCConfig())
    y = torch.tensor([1e6, -1e6, float("inf"), -float("inf"), 0.0, 0.0, 0.0, 0.0])
    idx = codec.quantize(y, 1.0, round=0, bucket=0, worker=0)
    assert idx[:4].tolist() == [15, 0, 15, 0]


def test_zero_norm_all_zero_input():
    codec = THCCodec(THCConfig())
    x = torch.zeros(3000)
    idx = codec.encode(x, 0.0, round=0, bucket=0, worker=0)
    assert int(idx.max()) <= 15
    for workers in (1, 4):
        total = codec.table_values(idx).int() * workers
        mean = codec.decode(total, workers, 0.0, round=0, bucket=0, length=3000)
        assert torch.equal(mean, torch.zeros(3000))
        assert torch.equal(codec.decode(total, workers, torch.tensor(0.0), round=0, bucket=0, length=3000), mean)


def test_tensor_norm_matches_float_norm():
    codec = THCCodec(THCConfig())
    x = torch.randn(5000)
    norm = x.norm()
    for value in (norm, norm.double(), norm.reshape(1)):
        assert torch.equal(codec.encode(x, value, round=2, bucket=0, worker=1),
                           codec.encode(x, float(norm), round=2, bucket=0, worker=1))  # fmt: skip
        total = codec.table_values(codec.encode(x, float(norm), round=2, bucket=0, worker=1))
        assert torch.equal(codec.decode(total, 1, value, round=2, bucket=0, length=5000),
                           codec.decode(total, 1, float(norm), round=2, bucket=0, length=5000))  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32, torch.int64])
def test_dequantize_accepts_any_integer_total(dtype):
    codec = THCCodec(THCConfig())
    total = torch.tensor([0, 15, 30, 60], dtype=dtype)
    step = 2 * codec.config.threshold / 30 * 2.0 / 2.0  # norm 2, sqrt(4) = 2
    expected = torch.tensor([-15, 0, 15, 45], dtype=torch.float64) * step
    got = codec.dequantize(total, 1, 2.0)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), expected, rtol=1e-6)


def test_multi_worker_mean_is_unbiased_and_accurate():
    codec = THCCodec(THCConfig())
    workers, n = 4, 20000
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(w)) for w in range(workers)]
    norm = max(float(x.norm()) for x in xs)
    total = sum(codec.table_values(codec.encode(x, norm, round=5, bucket=1, worker=w)).int() for w, x in enumerate(xs))
    mean = codec.decode(total, workers, norm, round=5, bucket=1, length=n)
    exact = torch.stack(xs).mean(0)
    nmse = float((mean - exact).norm() ** 2 / exact.norm() ** 2)
    assert nmse < 0.03  # 4-bit THC: about 0.02 for Gaussian inputs


def test_thc_beats_uniform_by_half_at_four_bits():
    n, workers = 1 << 16, 4
    xs = [torch.randn(n, generator=torch.Generator().manual_seed(100 + w)) for w in range(workers)]
    exact = torch.stack(xs).mean(0)
    nmse = {}
    for name, config in [("thc", THCConfig()), ("uhc", THCConfig.uniform(4))]:
        codec = THCCodec(config)
        norm = max(float(x.norm()) for x in xs)
        total = sum(codec.table_values(codec.encode(x, norm, round=0, bucket=0, worker=w)).int()
                    for w, x in enumerate(xs))  # fmt: skip
        mean = codec.decode(total, workers, norm, round=0, bucket=0, length=n)
        nmse[name] = float((mean - exact).norm() ** 2 / exact.norm() ** 2)
    assert nmse["thc"] <= nmse["uhc"] / 2


def test_quantize_rejects_bad_inputs():
    codec = THCCodec(THCConfig())
    with pytest.raises(ValueError, match="norm"):
        codec.quantize(torch.randn(8), -1.0, round=0, bucket=0, worker=0)
    with pytest.raises(ValueError, match="worker"):
        codec.quantize(torch.randn(8), 1.0, round=0, bucket=0, worker=-1)
    with pytest.raises(ValueError, match="indices"):
        codec.table_values(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="total"):
        codec.dequantize(torch.tensor([1.0]), 1, 1.0)
    with pytest.raises(ValueError, match="workers"):
        codec.dequantize(torch.tensor([1]), 0, 1.0)
    with pytest.raises(ValueError, match="length"):
        codec.decode(torch.zeros(1024, dtype=torch.int32), 2, 1.0, round=0, bucket=0, length=5000)
