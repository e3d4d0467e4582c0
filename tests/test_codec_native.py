"""The C kernels and the pure-torch path compute the same signs, indices and decoded values.

These skip where the optional extension could not be built (no C compiler); CI sets
INA_REQUIRE_NATIVE=1, and then a missing build fails a test instead.
"""
import os
import warnings

import pytest
import torch

from ina.compression import THCCodec, THCConfig, codec as codec_module, native, native_available

needs_native = pytest.mark.skipif(not native_available(), reason="native kernels not built (needs a C compiler at pip install -e .)")

CONFIGS = {
    "thc4": THCConfig(),
    "thc1": THCConfig(bits=1, granularity=5, clip=0.2),
    "thc3-odd": THCConfig(bits=3, granularity=17, clip=0.01, block_size=64),
    "thc8": THCConfig(bits=8, granularity=255, block_size=4096),
    "uhc2": THCConfig.uniform(2, block_size=2),
    "thc4-b8": THCConfig(block_size=8),
    "thc4-b16": THCConfig(block_size=16),
}
LENGTHS = [1, 3, 8, 13, 1000, 4096, 70001]


@pytest.fixture
def torch_path(monkeypatch):
    """Run the codec as if the extension were disabled on purpose (no warning)."""
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "load_error", None)


def both_paths(monkeypatch, run):
    """run() with the native kernels, then with the torch path."""
    fast = run()
    with monkeypatch.context() as patch:
        patch.setattr(native, "_lib", None)
        patch.setattr(native, "load_error", None)
        slow = run()
    return fast, slow


@needs_native
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("n", LENGTHS)
def test_paths_agree(monkeypatch, name, n):
    codec = THCCodec(CONFIGS[name], seed=5)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3
    norm = float(x.norm()) * 1.1

    def run():
        y = codec.rotate(x, round=2, bucket=9)
        idx = codec.quantize(y, norm, round=2, bucket=9, worker=1)
        values = codec.table_values(idx)
        total = values.int() * 3
        return (y, codec.unrotate(y, round=2, bucket=9, length=n), idx, values,
                codec.decode(total, 3, norm, round=2, bucket=9, length=n),
                codec.decode(values, 1, norm, round=2, bucket=9, length=n),
                codec.decode(total.long(), 3, norm, round=2, bucket=9, length=n),
                codec.encode(x, norm, round=2, bucket=9, worker=1))  # fmt: skip

    fast, slow = both_paths(monkeypatch, run)
    y, back, idx, values, mean, single, mean64, fused = fast
    assert torch.equal(fused, idx), "fused encode is rotate then quantize"
    assert float((fused != slow[7]).float().mean()) <= 1e-4
    assert torch.equal(y, slow[0]), "rotation (signs and butterflies) is bit-identical"
    assert torch.equal(back, slow[1])
    # Indices may differ only where float rounding lands exactly on a uniform: allow a tiny fraction.
    assert float((idx != slow[2]).float().mean()) <= 1e-4
    assert float((values != slow[3]).float().mean()) <= 1e-4
    scale = float(x.abs().max())
    for got, want in zip((mean, single, mean64), slow[4:7]):
        assert torch.allclose(got, want, rtol=0, atol=1e-5 * scale)


@needs_native
@pytest.mark.parametrize("n", [1, 5, 13, 29, 100, 65541])
def test_quantize_of_any_length_agrees(monkeypatch, n):
    """quantize also takes vectors that are not a padded length (ragged ends of 8-lane kernels)."""
    codec = THCCodec(THCConfig(), seed=2)
    y = torch.randn(n, generator=torch.Generator().manual_seed(n))
    fast, slow = both_paths(monkeypatch, lambda: codec.quantize(y, float(y.norm()), round=0, bucket=0, worker=0))
    assert torch.equal(fast, slow)


@needs_native
def test_lookup_of_out_of_table_indices_matches(monkeypatch):
    codec = THCCodec(THCConfig())
    indices = torch.arange(256, dtype=torch.uint8).repeat(5)[:1283 - 256]  # a ragged end, too
    fast, slow = both_paths(monkeypatch, lambda: codec.table_values(indices))
    assert torch.equal(fast, slow)
    assert fast[:16].tolist() == list(codec.config.table) and int(fast[16:256].abs().sum()) == 0


@needs_native
def test_thread_count_does_not_change_results():
    codec = THCCodec(THCConfig())
    x = torch.randn(1 << 19)
    previous = torch.get_num_threads()
    outputs = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            idx = codec.encode(x, float(x.norm()), round=0, bucket=0, worker=0)
            outputs.append((idx, codec.decode(codec.table_values(idx), 1, float(x.norm()), round=0, bucket=0,
                                              length=x.numel())))  # fmt: skip
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])


@needs_native
def test_nan_inputs_stay_in_range(monkeypatch):
    codec = THCCodec(THCConfig())
    y = torch.tensor([float("nan"), 1.0, -1.0, float("nan")] * 4)
    fast, slow = both_paths(monkeypatch, lambda: codec.quantize(y, 4.0, round=0, bucket=0, worker=0))
    assert torch.equal(fast, slow) and int(fast.max()) < 16


def test_torch_path_runs_without_the_extension(torch_path):
    assert not native_available()
    codec = THCCodec(THCConfig())
    x = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # disabled on purpose: no warning
        idx = codec.encode(x, float(x.norm()), round=0, bucket=0, worker=0)
    mean = codec.decode(codec.table_values(idx), 1, float(x.norm()), round=0, bucket=0, length=3000)
    assert float((mean - x).norm() ** 2 / x.norm() ** 2) < 0.05


def test_missing_extension_warns_once(monkeypatch):
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "load_error", "No module named 'ina.compression._native'")
    monkeypatch.setattr(codec_module, "_warned_fallback", False)
    codec = THCCodec(THCConfig())
    with pytest.warns(RuntimeWarning, match="native CPU kernels unavailable") as record:
        codec.rotate(torch.randn(10), round=0, bucket=0)
        codec.rotate(torch.randn(10), round=0, bucket=0)
    assert len([w for w in record if issubclass(w.category, RuntimeWarning)]) == 1


@pytest.mark.skipif(not os.environ.get("INA_REQUIRE_NATIVE"), reason="INA_REQUIRE_NATIVE is not set (CI sets it)")
def test_native_kernels_built_where_required():
    assert native_available(), f"the C kernels did not load: {native.load_error}"
