"""The worker engine on a real socket: `UdpRunner.call_soon` and `UdpEngine` against the
software switch and PS on loopback, no torch.distributed (the training tests are elsewhere)."""

import threading
import time
from contextlib import contextmanager
from typing import Iterator

import numpy as np
import pytest
from engine_paths import SERVED, engine_paths

from ina.control import Endpoint, JobSpec
from ina.launch import LocalAggregators
from ina.net.frames import Frames
from ina.net.udp import UdpRunner, open_socket
from ina.protocol import pack_fields, result_words, unpack_fields
from ina.transport.engine import EngineConfig
from ina.transport.errors import TransportError
from ina.transport.udp_engine import UdpEngine
from ina.transport.udp_setup import Aggregator, deregister, locate, register

use_each_engine = engine_paths(__name__, "UdpEngine", SERVED)

LOOPBACK = ("127.0.0.1", 0)
WORDS = 16
TABLE = tuple(range(16))  # PS-only: index i looks up i, so the lane sums are the index sums


class Idle:
    """A node with no packets and no timers that counts how often the loop asks for its deadline."""

    def __init__(self) -> None:
        self.asked = 0
        self.threads: list[str] = []

    def receive(self, datagrams, now):
        return []

    def tick(self, now):
        return []

    def next_deadline(self):
        self.asked += 1
        return None


def test_call_soon_runs_calls_on_the_serving_thread_in_order_then_the_loop_sleeps_again():
    node = Idle()
    runner = UdpRunner.bind(node, LOOPBACK).start()
    try:
        done = threading.Event()
        for i in range(5):
            runner.call_soon(lambda i=i: node.threads.append(f"{threading.current_thread().name}:{i}"))
        runner.call_soon(done.set)
        started = time.monotonic()
        assert done.wait(2.0) and time.monotonic() - started < 0.5  # woken at once, not at a timeout
        assert node.threads == [f"udp-runner:{i}" for i in range(5)]
        time.sleep(0.05)
        asked = node.asked
        time.sleep(0.2)
        assert node.asked == asked  # the wake-ups were drained: the loop blocks instead of spinning
    finally:
        runner.close()
    assert runner.error is None


def test_an_exception_in_a_call_stops_the_loop_and_is_kept():
    runner = UdpRunner.bind(Idle(), LOOPBACK).start()

    def fail():
        raise RuntimeError("boom")

    runner.call_soon(fail)
    runner._thread.join(2.0)
    assert isinstance(runner.error, RuntimeError)
    runner.close()


def test_a_node_whose_timers_answer_frames_has_them_sent_as_frames():
    """The engine's bursts leave through `tick_frames` (one buffer), not `tick`."""
    sink = open_socket(LOOPBACK)
    sink.settimeout(2.0)

    class Burst(Idle):
        def __init__(self) -> None:
            super().__init__()
            self.due: float | None = 0.0

        def tick(self, now):
            raise AssertionError("tick_frames is the timers' path for this node")

        def tick_frames(self, now):
            self.due = None
            return Frames.of_rows(np.arange(12, dtype=np.uint8).reshape(3, 4), sink.getsockname())

        def next_deadline(self):
            return self.due

    runner = UdpRunner.bind(Burst(), LOOPBACK).start()
    try:
        assert [sink.recv(100) for _ in range(3)] == [bytes(range(i, i + 4)) for i in (0, 4, 8)]
    finally:
        runner.close()
        sink.close()
    assert runner.error is None


@pytest.fixture(scope="module")
def local():
    with LocalAggregators(words=WORDS) as aggregators:
        yield aggregators


@contextmanager
def job(local: LocalAggregators, with_switch: bool, workers: int, lane_bits: int = 8, pad: bool = False,
        **timing: float) -> Iterator[list[UdpEngine]]:  # fmt: skip
    """A job registered with `local` as rank 0 registers it, and one UdpEngine per rank (`pad`: DATA padded to K,
    as for a switch of whole chunks)."""
    options = local.options("switch")
    ps = Aggregator.configure("ps", options["ps"], options["ps_control"])
    switch = Aggregator.configure("switch", options["switch"], options["switch_control"]) if with_switch else None
    deployment = locate(ps, switch)
    sockets = [open_socket(LOOPBACK) for _ in range(workers)]
    spec = JobSpec(job=5, workers=tuple(Endpoint(*s.getsockname()) for s in sockets), window=4, lane_bits=lane_bits,
                   index_bits=0 if with_switch else 4, table=() if with_switch else TABLE)  # fmt: skip
    registration = register(ps, switch, deployment, spec, pick_job=True)
    sources = frozenset(filter(None, (deployment.switch, deployment.ps)))
    engines = [
        UdpEngine(EngineConfig(job=registration.job, rank=rank, workers=workers, words=WORDS, window=4,
                               destination=deployment.destination, sources=sources, pool=deployment.pool,
                               slot_base=registration.slot_base, span=registration.span, ps_only=not with_switch, pad=pad,
                               **timing), sock)  # fmt: skip
        for rank, sock in enumerate(sockets)
    ]
    try:
        yield engines
    finally:
        for engine in engines:
            engine.close()
        deregister([a for a in (ps, switch) if a is not None], registration.job)


@pytest.mark.parametrize("with_switch, pad", [(True, False), (False, False), (True, True)], ids=["switch", "ps", "padded"])
def test_reductions_submitted_from_several_threads_complete_with_exact_sums(local, with_switch, pad):
    rng = np.random.default_rng(1)
    values = rng.integers(0, 16, size=(3, 1000), dtype=np.uint32)  # 3 x 15 fits 8-bit lanes
    with job(local, with_switch, 3, pad=pad) as engines:
        futures: dict[int, list] = {}

        def submit_three(rank: int) -> None:
            words = pack_fields(values[rank], 8 if with_switch else 4)
            futures[rank] = [engines[rank].submit(words, lane_bits=8, index_bits=0 if with_switch else 4) for _ in range(3)]

        threads = [threading.Thread(target=submit_three, args=(rank,)) for rank in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for rank in range(3):
            for future in futures[rank]:
                assert np.array_equal(_lanes(future.result(timeout=10), with_switch)[:1000], values.sum(axis=0))
        words = -(-1000 // (4 if with_switch else 8))  # 8-bit lanes or 4-bit indices, 1000 of them: 250 or 125
        chunks = -(-words // WORDS)
        padding = 3 * 4 * (chunks * WORDS - words) if pad else 0  # the last chunk's zero words, each reduction
        wire = 3 * (20 * chunks + 4 * words) + padding  # a header a chunk and the words, the last chunk short unless padded
        assert all(engine.bytes_sent == wire or engine.bytes_sent > wire and engine.counters["resent"] for engine in engines)
        assert all(engine.counters.get("padding_bytes", 0) >= padding and (pad or not engine.counters.get("padding_bytes"))
                   for engine in engines)  # fmt: skip


@pytest.mark.parametrize("lane_bits", [8, 16, 32])
def test_switch_lanes_of_every_width_sum_without_carries(local, lane_bits):
    """THC never needs 32-bit lanes (32 workers x granularity 255 < 2**16), the protocol allows them."""
    rng = np.random.default_rng(lane_bits)
    values = rng.integers(0, 2 ** (lane_bits - 1), size=(2, 300), dtype=np.uint64)  # two halves: no carry
    with job(local, True, 2, lane_bits=lane_bits) as engines:
        futures = [engine.submit(pack_fields(v, lane_bits), lane_bits=lane_bits) for engine, v in zip(engines, values)]
        for future in futures:
            assert np.array_equal(unpack_fields(future.result(timeout=10), lane_bits, 300), values.sum(axis=0))


def _lanes(words: np.ndarray, with_switch: bool) -> np.ndarray:
    """8-bit lane sums; PS-only results come per chunk of 8 * K indices."""
    if with_switch:
        return unpack_fields(words, 8, 4 * words.size)
    per_result = result_words(WORDS, 4, 8)
    return np.concatenate([unpack_fields(chunk, 8, 8 * WORDS) for chunk in words.reshape(-1, per_result)])


def test_a_dead_ps_fails_the_pending_and_every_later_reduction_within_the_peer_timeout():
    timing = dict(min_rto=0.01, initial_rto=0.01, max_rto=0.1, peer_timeout=0.5)
    with LocalAggregators(words=WORDS) as own, job(own, False, 2, **timing) as engines:
        own.ps.close()
        ps_gone = time.monotonic()
        future = engines[0].submit(np.ones(4, dtype=np.uint32), lane_bits=8, index_bits=4)
        with pytest.raises(TransportError, match=r"peer_timeout=0\.5s from the PS at .*no STATUS came from the PS"):
            future.result(timeout=5)
        assert time.monotonic() - ps_gone < 1.5
        with pytest.raises(TransportError, match="peer_timeout"):
            engines[0].submit(np.ones(4, dtype=np.uint32), lane_bits=8, index_bits=4).result(timeout=1)


def test_closing_fails_what_is_unfinished_and_what_comes_later(local):
    with job(local, True, 2) as engines:
        future = engines[0].submit(np.ones(4, dtype=np.uint32), lane_bits=8)  # rank 1 never contributes
        engines[0].close()
        with pytest.raises(TransportError, match="closed"):
            future.result(timeout=2)
        with pytest.raises(TransportError, match="closed"):
            engines[0].submit(np.ones(4, dtype=np.uint32), lane_bits=8).result(timeout=1)
        engines[0].close()  # twice is harmless


def test_workers_pad_chunks_only_for_a_switch_that_takes_whole_chunks(local, monkeypatch):
    options = local.options("switch")
    ps = Aggregator.configure("ps", options["ps"], options["ps_control"])
    switch = Aggregator.configure("switch", options["switch"], options["switch_control"])
    assert locate(ps, switch).short_chunks and locate(ps, None).short_chunks  # the software switch and the PS take them
    describe = Aggregator.describe
    monkeypatch.setattr(Aggregator, "describe", lambda self: {k: v for k, v in describe(self).items() if k != "short_chunks"})
    assert not locate(ps, switch).short_chunks  # a switch that does not say so gets whole chunks (a P4 switch says false)


def test_a_derived_job_id_moves_to_the_first_id_free_at_both_aggregators(local):
    options = local.options("switch")
    ps = Aggregator.configure("ps", options["ps"], options["ps_control"])
    switch = Aggregator.configure("switch", options["switch"], options["switch_control"])
    deployment = locate(ps, switch)
    jobs = []
    for port in (9001, 9002, 9003):
        spec = JobSpec(job=65535, workers=(Endpoint("127.0.0.1", port),), window=4)
        jobs.append(register(ps, switch if port != 9002 else None, deployment, spec, pick_job=True).job)
    try:
        assert jobs == [65535, 0, 1]  # the second holds 0 at the PS only, which the third avoids too
    finally:
        for job_id, with_switch in zip(jobs, (True, False, True)):
            deregister([ps, switch] if with_switch else [ps], job_id)


@pytest.mark.parametrize("role", ["switch", "ps"])
def test_a_missing_aggregator_is_named_with_what_to_start_or_set(local, role):
    options = local.options("switch")
    ps = Aggregator.configure("ps", options["ps"], "127.0.0.1:9" if role == "ps" else options["ps_control"])
    switch = Aggregator.configure("switch", control="127.0.0.1:9" if role == "switch" else options["switch_control"])
    variable = f"INA_{role.upper()}"
    with pytest.raises(TransportError, match=rf"no {role} control API answers at 127\.0\.0\.1:9 .*`ina {role}`.*{variable}=host:port"):
        locate(ps, switch)


def test_aggregators_are_found_from_options_then_the_environment_then_defaults(monkeypatch):
    monkeypatch.delenv("INA_SWITCH_CONTROL", raising=False)
    monkeypatch.setenv("INA_SWITCH", "10.0.0.1:5000")
    assert Aggregator.configure("switch") == Aggregator("switch", ("10.0.0.1", 47180), ("10.0.0.1", 5000))
    assert Aggregator.configure("switch", control="h:1") == Aggregator("switch", ("h", 1), ("10.0.0.1", 5000))
    monkeypatch.delenv("INA_PS", raising=False)
    monkeypatch.setenv("INA_PS_CONTROL", "10.0.0.2:7000")
    assert Aggregator.configure("ps") == Aggregator("ps", ("10.0.0.2", 7000), None)  # data address: ask its control API
    monkeypatch.delenv("INA_PS_CONTROL")
    assert Aggregator.configure("ps") == Aggregator("ps", ("127.0.0.1", 47181), None)
    with pytest.raises(ValueError, match="INA_PS"):
        Aggregator.configure("ps", "nowhere")


def test_the_data_address_comes_from_the_control_api_and_both_must_agree_on_k(local):
    options = local.options("switch")
    deployment = locate(Aggregator.configure("ps", control=options["ps_control"]),
                        Aggregator.configure("switch", control=options["switch_control"]))  # fmt: skip
    assert (deployment.switch, deployment.ps, deployment.words, deployment.pool) == (local.switch.address, local.ps.address, WORDS, 64)
    with LocalAggregators(words=2 * WORDS) as other:
        with pytest.raises(TransportError, match="same --words"):
            locate(Aggregator.configure("ps", control=options["ps_control"]),
                   Aggregator.configure("switch", control=other.options("switch")["switch_control"]))  # fmt: skip
