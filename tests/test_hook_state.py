"""THCState's checks and the hook's use of the Transport interface, in this process (no workers)."""
import math
import subprocess
import sys
import threading

import pytest
import torch
from conftest import FakeBucket, FakeGroup

import ina
from ina import THCState, thc_hook
from ina.compression import THCCodec
from ina.transport import create_transport
from ina.transport.base import Transport


@pytest.mark.parametrize(
    "options, complaint",
    [
        ({"bits": 0}, "bits"),
        ({"bits": 9}, "bits"),
        ({"bits": 4, "granularity": 10}, "granularity"),
        ({"clip": 0}, "clip"),
        ({"block_size": 1000}, "block_size"),
        ({"start_iter": -1}, "start_iter"),
        ({"error_feedback": True, "start_iter": 1}, "start_iter >= 2"),
        ({"error_feedback": "yes"}, "error_feedback"),
        ({"min_compression_elements": -5}, "min_compression_elements"),
        ({"seed": 1.5}, "seed"),
        ({"transport": "carrier-pigeon"}, "unknown transport 'carrier-pigeon'"),
        ({"transport": 42}, "Transport instance"),
    ],
)
def test_bad_configurations_say_what_to_change(options, complaint):
    with pytest.raises(ValueError, match=complaint):
        THCState(process_group=FakeGroup(4), **options)


def test_too_many_workers_for_the_sum_width_is_refused():
    THCState(process_group=FakeGroup((2**63 - 1) // 255), granularity=255)  # sums fit an int64 word
    with pytest.raises(ValueError, match="workers"):
        THCState(process_group=FakeGroup((2**63 - 1) // 255 + 1), granularity=255)


def test_the_default_group_must_exist():
    with pytest.raises(RuntimeError, match="init_process_group"):
        THCState()


def test_unknown_transport_names_are_listed():
    with pytest.raises(ValueError, match=r"\['collective', 'ps', 'switch'\]"):
        create_transport("udp", None)


class SoloTransport(Transport):
    """One worker's reductions (the max and the sum of one), recording what the hook asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.attached: list[tuple[THCCodec, object]] = []

    def attach(self, codec: THCCodec, process_group) -> None:
        self.attached.append((codec, process_group))

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        self.calls.append(("norm_max", bucket))
        return _done(norm)

    def table_sum(
        self, indices: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        self.calls.append(("table_sum", bucket))
        return _done(codec.table_values(indices).to(torch.int32))

    def close(self) -> None:
        pass


def _done(value: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(value)
    return future


def _solo_state(error_feedback: bool = False) -> THCState:
    """A one-worker state past its warm-up."""
    state = THCState(
        process_group=FakeGroup(1), error_feedback=error_feedback, start_iter=2, transport=SoloTransport()
    )
    state.iteration = 2
    return state


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_the_hook_reduces_through_the_transport_it_is_given(dtype):
    state = _solo_state()
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    buffer = gradient.to(dtype)
    averaged = thc_hook(state, FakeBucket(buffer, index=3)).wait()
    assert state.transport.calls == [("norm_max", 3), ("table_sum", 3)]
    assert averaged.dtype == dtype and averaged.data_ptr() == buffer.data_ptr()
    assert (averaged.float() - gradient).norm() < 0.3 * gradient.norm()
    assert state.iteration == 3


def test_the_state_attaches_its_transport_once_with_its_codec_and_workers():
    group, transport = FakeGroup(3, rank=1), SoloTransport()
    state = THCState(process_group=group, bits=2, granularity=6, transport=transport)
    assert transport.attached == [(state.codec, group)] and state.codec.config.bits == 2


@pytest.mark.parametrize("error_feedback", [False, True])
def test_an_fp32_bucket_gets_exactly_the_codecs_mean_in_place(error_feedback):
    """The hook's fused encode and its decode into the bucket give the bits of rotate, quantize, decode."""
    state = _solo_state(error_feedback)
    codec, where = state.codec, {"round": 2, "bucket": 1}
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(4))
    buffer = gradient.clone()
    averaged = thc_hook(state, FakeBucket(buffer, index=1)).wait()
    norm = codec.norm(gradient)
    indices = codec.quantize(codec.rotate(gradient, **where), norm, worker=0, **where)
    expected = codec.decode(codec.table_values(indices).int(), 1, norm, length=3000, **where)
    assert averaged.data_ptr() == buffer.data_ptr() and torch.equal(averaged, expected)
    assert not error_feedback or torch.equal(state.error_dict[1], gradient - expected)


class ValueSummingTransport(SoloTransport):
    """Takes table values from the encoder, sums them later on a thread of its own, and consumes its input."""

    takes_values = True

    def __init__(self) -> None:
        super().__init__()
        self.received: list[torch.Tensor] = []

    def table_sum(
        self, values: torch.Tensor, codec: THCCodec, workers: int, *, bucket: int
    ) -> torch.futures.Future[torch.Tensor]:
        self.received.append(values.clone())
        future: torch.futures.Future[torch.Tensor] = torch.futures.Future()

        def complete() -> None:
            total = values.to(torch.int32)
            values.fill_(255)  # summed in place: the hook must not read its input again
            future.set_result(total)

        threading.Timer(0.05, complete).start()
        return future


@pytest.mark.parametrize("last", [False, True])
def test_a_transport_that_takes_values_gets_the_encoders_table_values(last):
    """The lookup fused into encode; error feedback keeps its own copy; only the last bucket decodes in the call."""
    state = THCState(process_group=FakeGroup(1), error_feedback=True, start_iter=2, transport=ValueSummingTransport())
    state.iteration = 2
    codec, where = state.codec, {"round": 2, "bucket": 1}
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(4))
    returned = thc_hook(state, FakeBucket(gradient.clone(), index=1, last=last))
    assert returned.done() == last  # with nothing left to overlap, the last bucket is finished in the call
    averaged = returned.wait()
    norm = codec.norm(gradient)
    values = codec.table_values(codec.quantize(codec.rotate(gradient, **where), norm, worker=0, **where))
    assert torch.equal(state.transport.received[0], values)
    expected = codec.decode(values.int(), 1, norm, length=3000, **where)
    assert torch.equal(averaged, expected) and torch.equal(state.error_dict[1], gradient - expected)


def test_error_feedback_keeps_what_compression_lost():
    state = _solo_state(error_feedback=True)
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(1))
    first = thc_hook(state, FakeBucket(gradient.clone(), index=0)).wait()
    assert torch.equal(state.error_dict[0], gradient - first)  # one worker: the mean is its own decoding
    second = thc_hook(state, FakeBucket(gradient.clone(), index=0)).wait()
    assert torch.allclose(state.error_dict[0], 2 * gradient - first - second, atol=1e-5)


def test_a_zero_bucket_stays_zero():
    state = _solo_state(error_feedback=True)
    averaged = thc_hook(state, FakeBucket(torch.zeros(2048), index=0)).wait()
    assert torch.count_nonzero(averaged) == 0 and torch.count_nonzero(state.error_dict[0]) == 0


class OverflowElsewhere(SoloTransport):
    """As if another worker's bucket were non-finite: the max of the norms is NaN."""

    def norm_max(self, norm: torch.Tensor, *, bucket: int) -> torch.futures.Future[torch.Tensor]:
        super().norm_max(norm, bucket=bucket)
        return _done(torch.tensor(math.nan))


def _with_memory(state: THCState, gradient: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Run one finite step, so that bucket 0 has error memory; return a copy of it."""
    thc_hook(state, FakeBucket(gradient.to(dtype), index=0)).wait()
    state.transport.calls.clear()
    return state.error_dict[0].clone()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_a_non_finite_bucket_comes_back_all_nan_and_leaves_the_state_as_it_was(dtype, bad):
    state = _solo_state(error_feedback=True)
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(2))
    memory = _with_memory(state, gradient, dtype)
    buffer = gradient.to(dtype)
    buffer[123] = bad
    averaged = thc_hook(state, FakeBucket(buffer, index=0)).wait()  # raises nothing
    assert averaged.dtype == dtype and averaged.data_ptr() == buffer.data_ptr() and bool(averaged.isnan().all())
    assert state.transport.calls == [("norm_max", 0)]  # the verdict travels in the max; no quantizer, no SUM
    assert torch.equal(state.error_dict[0], memory) and state.iteration == 4


def test_another_workers_overflow_turns_a_finite_bucket_into_nan_too():
    state = THCState(process_group=FakeGroup(2), error_feedback=True, start_iter=2, transport=OverflowElsewhere())
    state.iteration = 2
    state.error_dict[0] = memory = torch.full((3000,), 0.5)
    averaged = thc_hook(state, FakeBucket(torch.randn(3000), index=0)).wait()
    assert bool(averaged.isnan().all()) and state.transport.calls == [("norm_max", 0)]
    assert state.error_dict[0] is memory and bool((memory == 0.5).all())


@pytest.mark.parametrize("k", [70, 100, 120])
def test_huge_buckets_average_like_unit_ones_scaled_bit_for_bit(k):
    """Norms from 2**64 square beyond fp32; near fp32's max the transform's sums would overflow."""
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(3))
    unit, huge = _solo_state(error_feedback=True), _solo_state(error_feedback=True)
    expected = thc_hook(unit, FakeBucket(gradient.clone(), index=0)).wait()
    averaged = thc_hook(huge, FakeBucket(gradient * 2.0**k, index=0)).wait()
    assert bool(averaged.isfinite().all()) and torch.equal(averaged, expected * 2.0**k)
    assert torch.equal(huge.error_dict[0], unit.error_dict[0] * 2.0**k)


def test_a_bucket_at_the_top_of_fp16_averages_to_finite_values():
    """THC's error can push a coordinate past the largest fp16 (65504): it is clamped, not inf."""
    gradient = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    buffer = (gradient / gradient.abs().max() * 65504).half()
    exact = buffer.float()
    averaged = thc_hook(_solo_state(), FakeBucket(buffer, index=0)).wait()
    assert bool(averaged.isfinite().all()) and float(averaged.float().abs().max()) == 65504
    assert (averaged.float() - exact).norm() < 0.3 * exact.norm()


def test_importing_ina_does_not_load_torch():
    probe = "import sys, ina, ina.transport; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", probe], check=True)
    assert ina.THCState is THCState  # resolved on first use
