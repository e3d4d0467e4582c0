"""The top-k baseline hook: exact against a hand computation of top-k with error feedback, two gloo workers."""
import pytest
import torch
from conftest import FakeBucket
from torch.nn.parallel import DistributedDataParallel

from ina.launch import run_workers
from ina.topk import TopKState, topk_hook

# Each rank's gradient at iterations 0..3; ratio 0.5 of 4 coordinates: k = 2.
GRADIENTS = {0: [[1, 2, 3, 4], [0, 0, 0, 2], [1, -5, 2, 0.5], [0, 0, 0, 1]],
             1: [[3, 2, 1, 0], [2, 0, 0, 0], [4, 1, -3, 0], [0.1, 0.5, 0, 0]]}  # fmt: skip
# By hand. Iterations 0 and 1 warm up: the plain mean. Iteration 2: rank 0 sends -5 (at 1) and 2 (at 2) and
# keeps [1, 0, 0, 0.5]; rank 1 sends 4 (at 0) and -3 (at 2) and keeps [0, 1, 0, 0]. Iteration 3 adds the memory:
# rank 0 has [1, 0, 0, 1.5] and sends all of it, rank 1 has [0.1, 1.5, 0, 0] and sends all of it.
EXPECTED = [[2, 2, 2, 2], [1, 0, 0, 1], [2, -2.5, -0.5, 0], [0.55, 0.75, 0, 0.75]]


def _reduce(rank: int, workers: int) -> tuple[list[list[float]], int, list[float]]:
    DistributedDataParallel(torch.nn.Linear(2, 1)).register_comm_hook(TopKState(), topk_hook)  # DDP checks the hook's annotations
    state = TopKState(ratio=0.5, start_iter=2)
    means = [topk_hook(state, FakeBucket(torch.tensor(g, dtype=torch.float32), 0)).wait().tolist() for g in GRADIENTS[rank]]
    return means, state.bytes_sent, state.errors[0].tolist()


def test_top_k_with_error_feedback_matches_the_hand_computation():
    for means, sent, memory in run_workers(_reduce, 2):
        assert [m == pytest.approx(e) for m, e in zip(means, EXPECTED)] == [True] * 4, means
        assert sent == 2 * 16 + 2 * 16  # two dense warm-up buckets of 4 floats, then 2 pairs of 8 bytes twice
        assert memory == [0, 0, 0, 0]  # everything it held at iteration 3 went out


@pytest.mark.parametrize("options", [{"ratio": 0}, {"ratio": 1.5}, {"start_iter": 1}])
def test_bad_settings_are_refused(options):
    with pytest.raises(ValueError):
        TopKState(**options)
