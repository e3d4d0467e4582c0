"""THCState's checks and the hook's use of the Transport interface, in this process (no workers)."""
import subprocess
import sys

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
    THCState(process_group=FakeGroup(8_000_000), granularity=255)  # 2.04e9 sums fit in int32
    with pytest.raises(ValueError, match="workers"):
        THCState(process_group=FakeGroup(9_000_000), granularity=255)


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


def test_importing_ina_does_not_load_torch():
    probe = "import sys, ina, ina.transport; assert 'torch' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", probe], check=True)
    assert ina.THCState is THCState  # resolved on first use
