"""CUDA: the torch path on the GPU agrees with the CPU path and keeps tensors on the device."""
import pytest
import torch

from ina.compression import THCCodec, THCConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("config", [THCConfig(), THCConfig(bits=8, granularity=255), THCConfig.uniform(2)])
@pytest.mark.parametrize("n", [1, 1000, 70001])
def test_cuda_matches_cpu(config, n):
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


def test_cuda_half_precision_and_zero_norm():
    codec = THCCodec(THCConfig())
    x = torch.zeros(3000, device="cuda", dtype=torch.bfloat16)
    idx = codec.encode(x, torch.zeros((), device="cuda"), round=0, bucket=0, worker=0)
    mean = codec.decode(codec.table_values(idx).int(), 1, 0.0, round=0, bucket=0, length=3000)
    assert mean.is_cuda and int(mean.count_nonzero()) == 0


def test_cuda_mean_is_accurate():
    codec = THCCodec(THCConfig())
    generator = torch.Generator().manual_seed(0)
    xs = [torch.randn(1 << 16, generator=generator).cuda() for _ in range(4)]
    norm = torch.stack([x.norm() for x in xs]).max()
    total = sum(codec.table_values(codec.encode(x, norm, round=0, bucket=0, worker=w)).int() for w, x in enumerate(xs))
    mean = codec.decode(total, 4, norm, round=0, bucket=0, length=1 << 16)
    exact = torch.stack(xs).mean(0)
    assert float((mean - exact).norm() ** 2 / exact.norm() ** 2) < 0.03
