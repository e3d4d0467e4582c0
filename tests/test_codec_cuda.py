"""CUDA: the GPU paths agree with the CPU path and keep tensors on the device, and DDP trains through them.

With Triton (CUDA builds of torch ship it) CUDA tensors take the fused kernels of
compression/triton_kernels.py, else the torch path; the Triton tests check the kernels'
contract on a GPU: the quantizer is the reference's bit for bit, indices differ from the CPU's
only where the transform's last bit crosses a rounding boundary, and decoding repeats bit for bit.
"""
import importlib.util

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel

from conftest import UDP_TRANSPORTS, loss_on, mlp, regression_problem, shard, thc_state
from ina import thc_hook
from ina.compression import THCCodec, THCConfig, codec as codec_module, hadamard, quantize
from ina.launch import run_workers

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
CONFIGS = [THCConfig(), THCConfig(bits=8, granularity=255), THCConfig.uniform(2)]


@pytest.fixture(params=["fused", "torch"])
def gpu_path(request, monkeypatch):
    """Each test runs with the Triton kernels (where Triton is installed) and with the torch path."""
    if request.param == "torch":
        monkeypatch.setattr(codec_module, "_triton_kernels", lambda: None)
    elif importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    return request.param


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("n", [1, 1000, 70001])
def test_cuda_matches_cpu(gpu_path, config, n):
    codec = THCCodec(config, seed=3)
    x = torch.randn(n, generator=torch.Generator().manual_seed(n))
    gpu = x.cuda()
    norm = float(x.norm())
    y_cpu, y_gpu = codec.rotate(x, round=1, bucket=2), codec.rotate(gpu, round=1, bucket=2)
    assert y_gpu.is_cuda and y_gpu.dtype == torch.float32
    assert torch.allclose(y_gpu.cpu(), y_cpu, rtol=0, atol=1e-6 * float(x.abs().max()))
    idx_cpu = codec.quantize(y_cpu, norm, round=1, bucket=2, worker=0)
    idx_gpu = codec.quantize(y_gpu, torch.tensor(norm, device="cuda"), round=1, bucket=2, worker=0)
    assert idx_gpu.is_cuda and idx_gpu.dtype == torch.uint8
    assert float((idx_gpu.cpu() != idx_cpu).float().mean()) <= 1e-3
    total = codec.table_values(idx_gpu).int() * 2
    assert total.is_cuda
    mean_gpu = codec.decode(total, 2, torch.tensor(norm, device="cuda"), round=1, bucket=2, length=n)
    mean_cpu = codec.decode(total.cpu(), 2, norm, round=1, bucket=2, length=n)
    assert mean_gpu.is_cuda
    assert torch.allclose(mean_gpu.cpu(), mean_cpu, rtol=0, atol=1e-5 * float(x.abs().max()))
    back = codec.unrotate(y_gpu, round=1, bucket=2, length=n)
    assert torch.allclose(back.cpu(), x, rtol=0, atol=1e-5 * float(x.abs().max()))


def test_cuda_half_precision_and_zero_norm(gpu_path):
    codec = THCCodec(THCConfig())
    x = torch.zeros(3000, device="cuda", dtype=torch.bfloat16)
    idx = codec.encode(x, torch.zeros((), device="cuda"), round=0, bucket=0, worker=0)
    mean = codec.decode(codec.table_values(idx).int(), 1, 0.0, round=0, bucket=0, length=3000)
    assert mean.is_cuda and int(mean.count_nonzero()) == 0


def test_cuda_mean_is_accurate(gpu_path):
    codec = THCCodec(THCConfig())
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(1 << 16, generator=generator).cuda() for _ in range(4)]
    norm = torch.stack([x.norm() for x in xs]).max()
    total = sum(codec.table_values(codec.encode(x, norm, round=0, bucket=0, worker=w)).int() for w, x in enumerate(xs))
    mean = codec.decode(total, 4, norm, round=0, bucket=0, length=1 << 16)
    exact = torch.stack(xs).mean(0)
    assert float((mean - exact).norm() ** 2 / exact.norm() ** 2) < 0.03


@needs_triton
def test_cuda_buckets_take_the_triton_kernels():
    kernels = codec_module._triton_kernels()
    assert kernels is not None and kernels.__name__ == "ina.compression.triton_kernels"
    assert codec_module._kernels(torch.zeros(4096, device="cuda"), 1024) is kernels
    assert codec_module._kernels(torch.zeros(100, device="cuda"), 128) is None  # blocks under 512: the torch path


@needs_triton
@pytest.mark.parametrize("config", CONFIGS)
def test_triton_quantizer_is_the_reference_bit_for_bit(config):
    codec = THCCodec(config, seed=4)
    y = torch.randn(1 << 20, generator=torch.Generator().manual_seed(1)) * 2
    y[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e30])
    norm = float(y.norm())
    reference = quantize.quantize(y, quantize.normalizer(norm, y.numel()), codec._levels_on(y.device),
                                  codec._round_key(0, 1, 2))  # fmt: skip
    assert torch.equal(codec.quantize(y.cuda(), norm, round=0, bucket=1, worker=2).cpu(), reference)


@needs_triton
@pytest.mark.parametrize("config", CONFIGS)
def test_triton_indices_are_the_references_but_at_rounding_boundaries(config):
    codec = THCCodec(config, seed=4)
    n = (1 << 22) + 17
    x = torch.randn(n, generator=torch.Generator().manual_seed(2)) * 3
    norm = float(x.norm())
    fused = codec.encode(x.cuda(), norm, round=5, bucket=1, worker=2)
    assert torch.equal(fused, codec.quantize(codec.rotate(x.cuda(), round=5, bucket=1), norm, round=5, bucket=1, worker=2))
    padded, block, key = codec.padded_length(n), codec._block(n), codec._sign_key(5, 1)
    reference = quantize.quantize(hadamard.rotate(x, padded, block, key), quantize.normalizer(norm, padded),
                                  codec._levels_on(x.device), codec._round_key(5, 1, 2))  # fmt: skip
    differ = fused.cpu() != reference
    assert float(differ.float().mean()) <= 1e-4, int(differ.sum())
    assert bool(((fused.cpu().int() - reference.int()).abs()[differ] == 1).all())


@needs_triton
def test_triton_decode_repeats_bit_for_bit():
    codec = THCCodec(THCConfig(), seed=6)
    n = (1 << 20) + 3
    total = torch.randint(0, 8 * 30 + 1, (codec.padded_length(n),), dtype=torch.int32, device="cuda")
    first = codec.decode(total, 8, 3.5, round=2, bucket=0, length=n)
    into = torch.full((n,), float("nan"), device="cuda")
    assert codec.decode(total, 8, 3.5, round=2, bucket=0, length=n, out=into) is into
    assert torch.equal(first, into) and torch.equal(first, codec.decode(total, 8, 3.5, round=2, bucket=0, length=n))
    reference = codec.decode(total.cpu(), 8, 3.5, round=2, bucket=0, length=n)
    assert torch.allclose(first.cpu(), reference, rtol=0, atol=1e-6 * float(reference.abs().max()))


@needs_triton
def test_triton_kernels_run_on_the_tensors_gpu_whatever_the_current_one():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    codec = THCCodec(THCConfig(), seed=1)
    x = torch.randn(1 << 16, generator=torch.Generator().manual_seed(3))
    on = {device: codec.encode(x.to(device), 2.0, round=0, bucket=0, worker=0) for device in ("cuda:0", "cuda:1")}
    assert on["cuda:1"].device == torch.device("cuda:1") and torch.equal(on["cuda:1"].cpu(), on["cuda:0"].cpu())


def _train_on_gpus(rank: int, workers: int, options: dict) -> dict:
    """A few SGD steps through each transport on this rank's GPU; each run's final parameters, on the host."""
    torch.cuda.set_device(rank)
    x, y = (t.cuda() for t in regression_problem())
    outcome = {}
    for name in ("collective", *UDP_TRANSPORTS):
        model = mlp().cuda()
        ddp = DistributedDataParallel(model, device_ids=[rank])
        state = thc_state(name, options, start_iter=0, min_compression_elements=0)
        ddp.register_comm_hook(state, thc_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(4):
            batch = shard(step, rank, workers).cuda()
            optimizer.zero_grad()
            loss_on(ddp, x[batch], y[batch]).backward()
            optimizer.step()
        torch.distributed.barrier()
        outcome[name] = {"bytes": state.transport.bytes_sent, "parameters": [p.detach().cpu() for p in model.parameters()]}
        state.transport.close()
    return outcome


def test_nccl_and_the_udp_transports_train_gpu_buckets_to_the_same_bits(transport_options):
    """The sums are the same integers on every path, so the same training steps give the same parameters."""
    workers = min(2, torch.cuda.device_count())
    results = run_workers(_train_on_gpus, workers, transport_options, backend="nccl")
    for result in results:
        first = result["collective"]["parameters"]
        for name, run in result.items():
            assert run["bytes"] > 0, name
            assert all(torch.equal(a, b) for a, b in zip(run["parameters"], first)), name
            assert all(torch.equal(a, b) for a, b in zip(run["parameters"], results[0][name]["parameters"])), name
    assert not all(torch.equal(a, b) for a, b in zip(results[0]["collective"]["parameters"], mlp().parameters()))
