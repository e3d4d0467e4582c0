"""The watch's arithmetic on hand-made snapshots: who is charged, how much, and who is stalled."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ina.control.watch import Lateness, Waiting, Watch, words_of


def snapshot(*chunks: tuple[int, int, int]) -> Waiting:
    """(job, chunk, present bitmap) per held chunk."""
    job, chunk, present = (np.array(column, dtype=dtype) for column, dtype in
                           zip(zip(*chunks) if chunks else ((), (), ()), (np.int64, np.uint64, np.uint32)))  # fmt: skip
    return Waiting(job, chunk, present)


def test_each_sample_charges_its_period_to_every_rank_missing_from_a_started_chunk():
    lateness = Lateness(half_life=10.0, stall_after=0.25)
    fanins = {7: 3, 8: 2}
    lateness.observe(0.0, fanins, snapshot((7, 1, 0b011)))  # the first sample has no period yet
    lateness.observe(0.1, fanins, snapshot((7, 1, 0b011), (7, 2, 0b001), (8, 5, 0b00)))  # job 8's chunk: nobody yet
    lateness.observe(0.3, fanins, snapshot((7, 2, 0b101)))
    report = lateness.report(7)
    waits = [rank["wait_seconds"] for rank in report["ranks"]]
    # 0.1 s: chunk 1 waits for rank 2, chunk 2 for ranks 1 and 2; 0.2 s: chunk 2 waits for rank 1
    assert waits == pytest.approx([0.0, 0.1 + 0.2, 0.1 + 0.1])
    assert [rank["waiting_chunks"] for rank in report["ranks"]] == [0, 1, 0]
    assert report["ranks"][1]["oldest_wait"] == pytest.approx(0.2)  # chunk 2 first seen at 0.1
    assert report["slowest_rank"] == 1 and report["stalled_ranks"] == [] and report["held"] == 1
    lateness.observe(0.4, fanins, snapshot((7, 2, 0b101)))
    assert lateness.report(7)["stalled_ranks"] == [1]  # waiting 0.3 s >= stall_after
    assert lateness.report(8)["slowest_rank"] is None and lateness.report(9) is None


def test_a_job_of_more_than_32_ranks_is_charged_rank_by_rank_past_the_first_word():
    lateness = Lateness(stall_after=0.25)
    everyone = (1 << 40) - 1
    wide = Waiting(np.array([7, 7]), np.array([1, 2], dtype=np.uint64), words_of([everyone & ~(1 << 35), everyone & ~(1 << 3)], 2))
    lateness.observe(0.0, {7: 40}, wide)
    lateness.observe(0.5, {7: 40}, wide)
    report = lateness.report(7)
    assert len(report["ranks"]) == 40 and report["stalled_ranks"] == [3, 35]
    assert [rank["wait_seconds"] for rank in report["ranks"] if rank["wait_seconds"]] == pytest.approx([0.5, 0.5])
    assert wide.bitmaps() == [everyone & ~(1 << 35), everyone & ~(1 << 3)]


def test_a_job_that_leaves_or_comes_back_with_other_ranks_starts_afresh():
    lateness = Lateness()
    lateness.observe(0.0, {7: 2}, snapshot((7, 1, 0b01)))
    lateness.observe(1.0, {7: 2}, snapshot((7, 1, 0b01)))
    assert lateness.report(7)["ranks"][1]["wait_seconds"] == pytest.approx(1.0)
    lateness.observe(2.0, {7: 3}, snapshot())
    assert [rank["wait_seconds"] for rank in lateness.report(7)["ranks"]] == [0.0, 0.0, 0.0]
    lateness.observe(3.0, {}, snapshot((7, 1, 0b01)))
    assert lateness.report(7) is None


def test_recent_waiting_decays_with_its_half_life():
    lateness = Lateness(half_life=1.0)
    for t in range(20):  # one chunk always waiting for rank 1: the average tends to 1
        lateness.observe(float(t), {7: 2}, snapshot((7, t, 0b01)))
    assert lateness.report(7)["ranks"][1]["waited_on"] == pytest.approx(1.0, abs=1e-4)
    lateness.observe(21.0, {7: 2}, snapshot())  # two half-lives with nothing waiting
    assert lateness.report(7)["ranks"][1]["waited_on"] == pytest.approx(0.25, abs=1e-4)


def test_a_watch_samples_until_closed_and_survives_a_target_that_cannot_be_read():
    calls = []

    def waiting() -> Waiting:
        calls.append(1)
        if len(calls) == 2:
            raise ConnectionError("the target is restarting")
        return snapshot((7, 1, 0b01))

    watch = Watch(waiting, lambda: {7: 2}, period=0.01)
    while len(calls) < 5:
        time.sleep(0.01)
    watch.close()
    count = len(calls)
    assert watch.lateness.report(7)["ranks"][1]["wait_seconds"] > 0
    with pytest.raises(ValueError, match="positive"):
        Watch(waiting, dict, period=0)
    assert len(calls) == count  # closed: no more samples
