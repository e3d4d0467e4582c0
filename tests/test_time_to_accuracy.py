"""Time to accuracy: the run files' model kinds and targets, the first wall time at the target, the workloads
themselves (they learn), and the benchmark's table. No root, no Mininet."""

from __future__ import annotations

import pytest
import torch

from benchmarks import publish, time_to_accuracy
from ina.demo_training import batches_of
from ina.testbed import spec
from ina.testbed.results import time_to_target
from ina.testbed.spec import SpecError
from ina.workloads import CONTEXT, Workload, build


def test_each_model_kind_gets_its_data_and_learning_rate_and_a_target_in_its_metric():
    jobs = spec.parse({"jobs": [{"name": "c", "model": {"kind": "convnet", "width": 16}, "target": 0.97},
                                {"name": "t", "model": {"kind": "transformer"}, "target": 3.5, "hook": "topk", "ratio": 0.05},
                                {"name": "m"}]}).jobs  # fmt: skip
    assert [(j.kind, j.data, j.lr, j.metric) for j in jobs] == [("convnet", "digits", 0.1, "accuracy"),
                                                                ("transformer", "pydoc", 0.003, "test_loss"), ("mlp", "digits", 0.05, "accuracy")]  # fmt: skip
    assert (jobs[0].width, jobs[1].ratio, jobs[1].method) == (16, 0.05, "topk")
    assert jobs[0].reached(0.97) and not jobs[0].reached(0.969)  # an accuracy: at or above
    assert jobs[1].reached(3.5) and not jobs[1].reached(3.51)  # a loss: at or below
    assert not jobs[2].reached(1.0)  # no target


@pytest.mark.parametrize("job, message", [
    ({"model": {"kind": "rnn"}}, "jobs[0].model.kind: 'rnn'"),
    ({"model": {"kind": "transformer"}, "data": "digits"}, "jobs[0].data: 'digits': must be one of ['pydoc']"),
    ({"hook": "topk", "warm_up": 1}, "topk needs at least 2 steps"),
    ({"hook": "topk", "ratio": 2}, "jobs[0].ratio: 2.0: must be between"),
    ({"hook": "thc", "ratio": 0.1}, "jobs[0].ratio: only topk jobs take it"),
    ({"model": {"kind": "convnet", "hidden": [64]}}, "jobs[0].model.hidden: only the mlp takes it"),
])  # fmt: skip
def test_a_bad_model_target_or_top_k_setting_is_refused(job, message):
    with pytest.raises(SpecError) as refused:
        spec.parse({"jobs": [job]})
    assert message in str(refused.value)


def test_time_to_target_is_the_wall_time_of_the_first_evaluation_at_the_target():
    job = spec.parse({"jobs": [{"model": {"kind": "convnet"}, "target": 0.9}]}).jobs[0]
    steps = [{"step": 0, "wall": 0.5}, {"step": 1, "wall": 1.0, "accuracy": 0.85}, {"step": 2, "wall": 1.7},
             {"step": 3, "wall": 2.25, "accuracy": 0.92}, {"step": 4, "wall": 3.0, "accuracy": 0.95}]  # fmt: skip
    assert time_to_target(job, steps) == {"target": 0.9, "time_to_target": 2.25, "steps_to_target": 4}
    assert time_to_target(job, steps[:3])["time_to_target"] is None
    language = spec.parse({"jobs": [{"model": {"kind": "transformer"}, "target": 4.0}]}).jobs[0]
    losses = [{"step": 0, "wall": 1.0, "test_loss": 4.5}, {"step": 1, "wall": 2.0, "test_loss": 3.9}]
    assert time_to_target(language, losses)["time_to_target"] == 2.0


def _train(workload: Workload, lr: float, steps: int, batch: int) -> torch.optim.lr_scheduler.LRScheduler:
    """`steps` steps of the workload's own optimiser and schedule on one process; the schedule."""
    optimizer, schedule = workload.optimizer(workload.model.parameters(), lr, steps)
    batches = batches_of(workload.train_size, batch, torch.Generator().manual_seed(0))
    for _ in range(steps):
        workload.train_step(workload.model, optimizer, schedule, next(batches))
    return schedule


def test_the_convnet_learns_digits_with_its_optimiser_and_schedule():
    torch.manual_seed(0)
    workload = build("convnet", 8, seed=0)
    assert workload.model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    schedule = _train(workload, lr=0.1, steps=25, batch=32)
    assert workload.evaluate(workload.model) > 0.8  # from chance, 10%
    assert schedule.get_last_lr()[0] == pytest.approx(0.01)  # the cosine ends at a tenth


def test_the_language_model_predicts_the_next_token_and_its_test_loss_falls():
    workload = build("transformer", 16, seed=0)
    x, y = workload.inputs(torch.tensor([0, 5]))
    assert x.shape == (2, CONTEXT) and torch.equal(x[:, 1:], y[:, :-1])  # the targets: the inputs shifted by one
    before = workload.evaluate(workload.model)
    _train(workload, lr=0.02, steps=30, batch=8)
    assert before > 8.0 and workload.evaluate(workload.model) < 6.0  # from uniform over 4096 tokens (8.3 nats)


def _row(method: str, bw: float, seed: int, tta, accuracy: float = 0.98) -> dict:
    return {"job": method, "method": method.split("-")[0], "bw": bw, "seed": seed, "time_to_target": tta, "accuracy": accuracy, "test_loss": None,
            "tx_bytes_per_worker_step": 2e6, "step_time_median": 0.5}  # fmt: skip


def test_the_table_gives_each_methods_mean_time_to_target_over_fp32s_and_says_where_a_seed_missed_it():
    rows = [_row("fp32", 100, 0, 30.0), _row("fp32", 100, 1, 50.0), _row("thc4-switch", 100, 0, 10.0),
            _row("thc4-switch", 100, 1, 30.0), _row("topk", 100, 0, 20.0), _row("topk", 100, 1, None, 0.9),
            _row("powersgd", 100, 0, 12.0), _row("powersgd-r1", 100, 0, None, 0.9)]  # one method, two jobs: two rows  # fmt: skip
    lines = time_to_accuracy.table("convnet", 0.97, rows)
    assert lines[4] == "| fp32 | 40.0 | 1.00 | 98.0% | 2.00 | 0.500 |"
    assert lines[5] == "| thc4-switch | 20.0 | 2.00 | 98.0% | 2.00 | 0.500 |"
    assert lines[6] == "| topk | 20.0 (1/2) | - | 94.0% | 2.00 | 0.500 |"  # no speed-up from the seeds that made it alone
    assert lines[7:] == ["| powersgd | 12.0 | 3.33 | 98.0% | 2.00 | 0.500 |", "| powersgd-r1 | not reached | - | 90.0% | 2.00 | 0.500 |"]


def test_the_tables_replace_what_stands_between_the_docs_markers(tmp_path):
    docs = tmp_path / "doc.md"
    docs.write_text(f"intro\n{publish.BEGIN}\nold\n{publish.END}\nafter\n")
    publish.write_docs(docs, ["new", "table"])
    assert docs.read_text() == f"intro\n{publish.BEGIN}\nnew\ntable\n{publish.END}\nafter\n"


def test_a_study_of_some_jobs_replaces_their_rows_and_keeps_the_others(tmp_path):
    first = [_row("fp32", 100, 0, 30.0), _row("topk", 100, 0, 20.0), _row("thc8-collective", 100, 0, 40.0)]
    again = [_row("thc8-collective", 100, 0, 10.0), _row("fp32", 100, 0, 20.0)]
    lines = time_to_accuracy.table("convnet", 0.97, time_to_accuracy.latest_rows([first, again]))
    # fp32 and thc8-collective as the later study measured them, each speed-up over fp32 of its own study
    assert lines[4:] == ["| fp32 | 20.0 | 1.00 | 98.0% | 2.00 | 0.500 |", "| topk | 20.0 | 1.50 | 98.0% | 2.00 | 0.500 |",
                         "| thc8-collective | 10.0 | 2.00 | 98.0% | 2.00 | 0.500 |"]  # fmt: skip
    path = time_to_accuracy.run_file("convnet", 1000, tmp_path, ["fp32", "thc8-collective"])
    document = spec.load(str(path))
    assert [j.name for j in document.jobs] == ["fp32", "thc8-collective"] and document.link.bw == 1000
    with pytest.raises(SystemExit, match="no job \\['thc9'\\]"):
        time_to_accuracy.run_file("convnet", 1000, tmp_path, ["thc9"])
