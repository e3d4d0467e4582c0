"""Every instruction set's C kernels compute the bits of the pure-torch path: signs, rotations,
indices, table values and decoded means, so workers on different CPUs never drift apart.

These skip where the optional extension could not be built (no C compiler); CI sets
INA_REQUIRE_NATIVE=1, and then a missing build fails a test instead.
"""
import functools
import os
import subprocess
import sys
import warnings

import pytest
import torch

from ina.compression import THCCodec, THCConfig, codec as codec_module, native, native_available

needs_native = pytest.mark.skipif(not native_available(), reason="native kernels not built (needs a C compiler at pip install -e .)")

ISAS = native.isas()  # best first; empty without the extension
CONFIGS = {
    "thc4": THCConfig(),
    "thc1": THCConfig(bits=1, granularity=5, clip=0.2),
    "thc3-odd": THCConfig(bits=3, granularity=17, clip=0.01, block_size=64),
    "thc8": THCConfig(bits=8, granularity=255, block_size=4096),
    "uhc2": THCConfig.uniform(2, block_size=2),
    "thc4-b8": THCConfig(block_size=8),
    "thc4-b16": THCConfig(block_size=16),
    "thc4-b32": THCConfig(block_size=32),
}
# Tiny and odd lengths, and lengths around the edges of vectors, tiles, blocks, the 32 rows that
# share sign words, and work items of several tiles.
LENGTHS = [1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 1000, 1023, 1025, 4096, 16385, 70001, 2**18 + 3]
WHERE = {"round": 2, "bucket": 9}


@pytest.fixture(params=ISAS)
def isa(request):
    """Run the test with each instruction set's kernels in turn."""
    previous = native.isa()
    native.use_isa(request.param)
    yield request.param
    native.use_isa(previous)


@pytest.fixture
def torch_path(monkeypatch):
    """Run the codec as if the extension were disabled on purpose (no warning)."""
    monkeypatch.setattr(native, "_lib", None)
    monkeypatch.setattr(native, "load_error", None)


def on_torch_path(run):
    """run() with the extension disabled on purpose."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(native, "_lib", None)
        patch.setattr(native, "load_error", None)
        return run()


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bit patterns: signed zeros and NaN payloads count, as they do between workers."""
    return tensor.view(torch.int32) if tensor.dtype == torch.float32 else tensor


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(bits(a), bits(b))


def codec_outputs(name: str, n: int) -> dict[str, torch.Tensor]:
    """Everything the codec computes from one vector (seeds and norm vary with n)."""
    codec = THCCodec(CONFIGS[name], seed=n % 7)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)) * 3
    norm = float(x.norm()) * (1 + n % 5 / 4)
    y = codec.rotate(x, **WHERE)
    indices = codec.quantize(y, norm, worker=1, **WHERE)
    values = codec.table_values(indices)
    total = values.int() * 3
    return {
        "rotate": y,
        "unrotate": codec.unrotate(y, length=n, **WHERE),
        "quantize": indices,
        "table_values": values,
        "encode": codec.encode(x, norm, worker=1, **WHERE),
        "encode values": codec.encode(x, norm, worker=1, values=True, **WHERE),
        "decode uint8": codec.decode(values, 1, norm, length=n, **WHERE),
        "decode int32": codec.decode(total, 3, norm, length=n, **WHERE),
        "decode int64": codec.decode(total.long(), 3, norm, length=n, **WHERE),
    }


@functools.lru_cache(maxsize=None)
def torch_outputs(name: str, n: int) -> dict[str, torch.Tensor]:
    return on_torch_path(lambda: codec_outputs(name, n))


@needs_native
@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("n", LENGTHS)
def test_every_isa_computes_the_torch_paths_bits(isa, name, n):
    got, want = codec_outputs(name, n), torch_outputs(name, n)
    for what in want:
        assert same_bits(got[what], want[what]), f"{what} differs from the torch path with {isa}"
    assert torch.equal(got["encode"], got["quantize"]), "fused encode is rotate then quantize"
    assert torch.equal(got["encode values"], got["table_values"]), "encode's values are the indices' table values"


@needs_native
@pytest.mark.parametrize("exponent", [-140, -100, -60, 0, 60, 100, 120])
def test_every_isa_matches_at_extreme_scales(isa, exponent):
    """Norms outside [2**-40, 2**40] go through power-of-two rescaling; denormal inputs at -140."""
    codec = THCCodec(THCConfig(), seed=1)
    x = torch.randn(5000, generator=torch.Generator().manual_seed(exponent + 200)) * 2.0**exponent
    norm = codec.norm(x)

    def run():
        indices = codec.encode(x, norm, worker=0, **WHERE)
        return indices, codec.decode(codec.table_values(indices), 1, norm, length=x.numel(), **WHERE)

    for got, want in zip(run(), on_torch_path(run)):
        assert same_bits(got, want)


@needs_native
def test_every_isa_matches_on_zero_and_non_finite_input(isa):
    codec = THCCodec(THCConfig(block_size=64), seed=4)
    x = torch.randn(3000, generator=torch.Generator().manual_seed(4))
    x[[5, 700]], x[1500] = float("inf"), float("nan")  # spread over the blocks that hold them

    def run():
        return (codec.rotate(x, **WHERE), codec.quantize(codec.rotate(x, **WHERE), 40.0, worker=0, **WHERE),
                codec.encode(torch.zeros(3000), 0.0, worker=0, **WHERE))  # fmt: skip

    (rotated, indices, zeros), (rotated_t, indices_t, zeros_t) = run(), on_torch_path(run)
    nan = rotated.isnan()
    assert torch.equal(nan, rotated_t.isnan()) and 0 < int(nan.sum()) < nan.numel()
    assert same_bits(rotated[~nan], rotated_t[~nan])
    assert torch.equal(indices, indices_t) and int(indices.max()) < 16
    assert torch.equal(zeros, zeros_t)


@needs_native
@pytest.mark.parametrize("n", [1, 5, 13, 29, 100, 65541])
def test_quantize_of_any_length_agrees(isa, n):
    """quantize also takes vectors that are not a padded length (ragged ends of the vector kernels)."""
    codec = THCCodec(THCConfig(), seed=2)
    y = torch.randn(n, generator=torch.Generator().manual_seed(n))

    def run():
        return codec.quantize(y, float(y.norm()), round=0, bucket=0, worker=0)

    assert torch.equal(run(), on_torch_path(run))


@needs_native
def test_lookup_of_out_of_table_indices_matches(isa):
    codec = THCCodec(THCConfig())
    indices = torch.arange(256, dtype=torch.uint8).repeat(5)[:1283 - 256]  # a ragged end, too
    values = codec.table_values(indices)
    assert torch.equal(values, on_torch_path(lambda: codec.table_values(indices)))
    assert values[:16].tolist() == list(codec.config.table) and int(values[16:256].abs().sum()) == 0


@pytest.mark.parametrize("length", LENGTHS)
def test_4_bit_packing_matches_the_torch_path(isa, length):
    from ina.compression import pack_bits

    indices = torch.randint(0, 16, (length,), dtype=torch.uint8, generator=torch.Generator().manual_seed(length))
    words = pack_bits(indices, 4)
    assert words.numel() == -(-length // 8) and torch.equal(words, on_torch_path(lambda: pack_bits(indices, 4)))


@pytest.mark.parametrize("where", [0, 2**17 + 1, 2**18 + 2])  # the first, one in a later thread's part, the odd last
def test_4_bit_packing_refuses_an_index_above_15_anywhere(isa, where):
    from ina.compression import pack_bits

    indices = torch.zeros(2**18 + 3, dtype=torch.uint8)
    indices[where] = 16
    with pytest.raises(ValueError, match="0..2\\*\\*4 - 1"):
        pack_bits(indices, 4)


@needs_native
def test_thread_count_does_not_change_results(isa):
    codec = THCCodec(THCConfig())
    x = torch.randn(1 << 19, generator=torch.Generator().manual_seed(3))
    norm = float(x.norm())
    previous = torch.get_num_threads()
    outputs = []
    try:
        for threads in (1, 3):
            torch.set_num_threads(threads)
            indices = codec.encode(x, norm, worker=0, **WHERE)
            outputs.append((indices, codec.decode(codec.table_values(indices), 1, norm, length=x.numel(), **WHERE)))
    finally:
        torch.set_num_threads(previous)
    assert torch.equal(outputs[0][0], outputs[1][0]) and same_bits(outputs[0][1], outputs[1][1])


@pytest.mark.parametrize("path", ["native", "torch"])
def test_decode_writes_into_out(path, monkeypatch):
    if path == "native" and not native_available():
        pytest.skip("native kernels not built")
    if path == "torch":
        monkeypatch.setattr(native, "_lib", None)
        monkeypatch.setattr(native, "load_error", None)
    codec = THCCodec(THCConfig())
    x = torch.randn(3000, generator=torch.Generator().manual_seed(5))
    total = codec.table_values(codec.encode(x, float(x.norm()), worker=0, **WHERE))
    mean = codec.decode(total, 1, float(x.norm()), length=3000, **WHERE)
    for out in (torch.full((3000,), 7.0), torch.full((6000,), 7.0)[::2]):  # contiguous, and a strided view
        assert codec.decode(total, 1, float(x.norm()), length=3000, out=out, **WHERE) is out
        assert same_bits(out.contiguous(), mean)


def test_decode_refuses_an_out_it_cannot_fill():
    codec = THCCodec(THCConfig())
    total = torch.zeros(1024, dtype=torch.uint8)
    for out in (torch.empty(1000, dtype=torch.float16), torch.empty(999), torch.empty(10, 100)):
        with pytest.raises(ValueError, match="out must be an fp32 tensor of shape"):
            codec.decode(total, 1, 1.0, length=1000, out=out, **WHERE)


def _isa_in_subprocess(forced):
    """(exit status, stdout, stderr) of a fresh interpreter reporting its kernels' instruction set."""
    env = {key: value for key, value in os.environ.items() if key != "INA_COMPRESSION_ISA"}
    env.update({"INA_COMPRESSION_ISA": forced} if forced else {})
    probe = "from ina.compression import native; print(native.isa())"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    return done.returncode, done.stdout.strip(), done.stderr


@needs_native
def test_the_best_isa_is_the_default_and_the_environment_forces_another():
    assert "baseline" in ISAS
    assert _isa_in_subprocess(None)[:2] == (0, ISAS[0])
    assert _isa_in_subprocess("baseline")[:2] == (0, "baseline")


@needs_native
def test_an_isa_this_cpu_or_build_lacks_is_refused():
    status, _, error = _isa_in_subprocess("sse9")
    assert status != 0 and "INA_COMPRESSION_ISA=sse9" in error
    with pytest.raises(ValueError, match="sse9"):
        native.use_isa("sse9")


def test_torch_path_runs_without_the_extension(torch_path):
    assert not native_available() and native.isas() == [] and native.isa() is None
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


@needs_native
@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
def test_the_kernels_share_torchs_openmp_runtime():
    """One OpenMP runtime in the process: the kernels' threads are torch's, not a second pool competing for cores."""
    codec = THCCodec(THCConfig())
    x = torch.randn(1 << 20)
    codec.encode(x, float(x.norm()), worker=0, **WHERE)
    with open("/proc/self/maps") as maps:
        runtimes = {line.split()[-1] for line in maps if "gomp" in line or "libomp" in line or "iomp" in line}
    assert len(runtimes) == 1, runtimes


def _huge_page_bytes(tensor: torch.Tensor) -> int:
    """AnonHugePages of the mappings that overlap the tensor's memory (/proc/self/smaps; advice splits mappings)."""
    start = tensor.data_ptr()
    end, total, inside = start + tensor.numel() * tensor.element_size(), 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            first = line.split()[0]
            if "-" in first and ":" not in first:
                low, high = (int(edge, 16) for edge in first.split("-"))
                inside = low < end and start < high
            elif inside and first == "AnonHugePages:":
                total += int(line.split()[1]) * 1024
    return total


def _collapses_pages() -> bool:
    """Linux 6.1+ (MADV_COLLAPSE) with transparent huge pages not switched off."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as setting:
            enabled = "[never]" not in setting.read()
    except OSError:
        return False
    major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    return enabled and (major, minor) >= (6, 1)


@needs_native
@pytest.mark.skipif(not _collapses_pages(), reason="needs Linux 6.1+ with transparent huge pages enabled")
def test_a_bucket_moves_to_huge_pages_with_its_contents():
    bucket = torch.randn(8 << 20, generator=torch.Generator().manual_seed(0))
    before = bucket.clone()
    assert _huge_page_bytes(bucket) == 0  # torch's own allocation: 4 KiB pages
    native.move_to_huge_pages(bucket)
    assert torch.equal(bucket, before)
    assert _huge_page_bytes(bucket) >= 16 << 20  # all but the partial 2 MiB pages at its ends
