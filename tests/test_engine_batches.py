"""The engine takes a batch as if packet by packet, sends a burst at once, and its frames path
(what the UDP runner uses) sends what its Node path sends."""

from __future__ import annotations

import numpy as np
import pytest
from engine_paths import engine_paths
from test_engine import K, PS, SWITCH, config, fetch, result_for

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import Header, Kind, parse
from ina.transport.engine import Engine
from ina.transport.native import NativeEngine
from ina.protocol.batch import VECTORIZE_FROM
from ina.transport.priority import FixedPriority

use_each_engine = engine_paths(__name__)

STRANGER = ("6.6.6.6", 47100)


@pytest.mark.parametrize("strangers", [0, VECTORIZE_FROM])  # a small batch, and one checked by valid_mask
def test_a_batch_is_taken_as_if_packet_by_packet_in_arrival_order(strangers):
    engine = Engine(config(window=8))
    engine.submit(np.zeros(4 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    data = engine.tick(0.0)
    result = [result_for(d, np.full(K, 10 + i)) for i, d in enumerate(data)]
    batch = [
        result_for(data[0], np.zeros(K), lane_bits=16),           # wrong format: unexpected
        result[0],                                                # delivered
        result[0],                                                # its duplicate: late
        Datagram(Header(Kind.STATUS, 7, 1, bitmap=0b11).pack(), PS),  # status
        result[1],                                                # delivered
        Datagram(Header(Kind.STATUS, 7, 1, bitmap=0b11).pack(), PS),  # after its chunk's result: late
        Datagram(fetch(1), PS),                                   # answered with result[1]
        Datagram(fetch(2), PS),                                   # not yet received: fetch_missing
        result[2],                                                # delivered
        result_for(data[3], np.zeros(K), workers=2),              # not every worker: unexpected
    ] + [Datagram(result[3].data, STRANGER)] * strangers          # foreign
    assert engine.receive(batch, 0.01) == [Datagram(result[1].data, PS)]
    assert engine.counters == {"sent": 4, "delivered": 3, "unexpected": 2, "late": 2, "status": 1,
                               "fetch_answered": 1, "fetch_missing": 1} | ({"foreign": strangers} if strangers else {})
    assert engine.completed() == [] and not engine.idle
    engine.receive([result[3]], 0.02)
    ((_, sums),) = engine.completed()
    assert sums.tolist() == [10] * K + [11] * K + [12] * K + [13] * K


def test_a_window_of_results_in_one_batch_reordered_and_duplicated_completes_exactly():
    window = 4 * VECTORIZE_FROM
    engine = Engine(config(window=window, pool=window))
    engine.submit(np.zeros(3 * window * K, dtype=np.uint32), lane_bits=8, now=0.0)
    sent, received = engine.tick(0.0), 0
    rng = np.random.default_rng(5)
    while sent:
        results = [result_for(d, np.full(K, parse(d.data, K)[0].seq)) for d in sent]
        batch = [results[i] for i in rng.permutation(len(results))] + results[: len(results) // 3]
        received += len(batch)
        sent = engine.receive(batch, 0.001)
    ((_, sums),) = engine.completed()
    assert sums.tolist() == np.repeat(np.arange(3 * window), K).tolist()
    assert engine.counters["delivered"] == 3 * window and engine.counters["late"] == received - 3 * window


def test_the_frames_path_sends_what_the_node_path_sends():
    """Bursts, answers to FETCH and resends: the same bytes to the same peers either way."""
    node, frames = Engine(config(window=2)), Engine(config(window=2))
    for engine in (node, frames):
        engine.submit(np.arange(3 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    first = node.tick(0.0)
    assert frames.tick_frames(0.0).datagrams() == first
    answer = [result_for(first[0], np.ones(K)), Datagram(fetch(0), PS)]
    out = node.receive(answer, 0.001)
    assert [d.addr for d in out] == [PS, SWITCH]  # the FETCH's answer, then the chunk the window lets go
    assert frames.receive_frames(Frames.of(answer), 0.001).datagrams() == out
    due = node.next_deadline()
    resent = node.tick(due)
    assert resent and all(parse(d.data, K)[0].resend for d in resent)
    assert frames.tick_frames(due).datagrams() == resent
    assert node.counters == frames.counters


def test_the_priority_is_asked_once_per_reduction_and_burst():
    if Engine is NativeEngine:
        pytest.skip("a policy of its own runs on the Python engine only (test_engine_priority: the native one refuses it)")

    class Counting(FixedPriority):
        asked = 0

        def priority(self, queued_at: float, now: float) -> int:
            Counting.asked += 1
            return 3

    engine = Engine(config(window=8), Counting())
    engine.submit(np.zeros(3 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    engine.submit(np.zeros(2 * K, dtype=np.uint32), lane_bits=8, now=0.0)
    sent = engine.tick(0.0)
    assert len(sent) == 5 and Counting.asked == 2
    assert {parse(d.data, K)[0].priority for d in sent} == {3}
