"""The worker's batch code agrees with the per-packet codec: packets built, headers read, frames joined,
results kept (ina.transport.packets, ina.transport.chunks, Frames.of_rows and Frames.join)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Header, Kind, MalformedPacket, parse, result_words
from ina.transport import packets
from ina.transport.chunks import NO_STATUS, Outstanding, ResultStore
from ina.transport.packets import data_packets, gather, read

K = 8


@settings(deadline=None)
@given(
    first_seq=st.integers(0, 2**33),
    chunks=st.integers(1, 9),
    extra=st.integers(0, K - 1),
    op_max=st.booleans(),
    index_bits=st.integers(0, 8),
    lane_bits=st.sampled_from([8, 16, 32]),
    rank=st.integers(0, 31),
    job=st.integers(0, 2**16 - 1),
    seed=st.integers(0, 2**32 - 1),
)
def test_data_packets_are_byte_identical_to_header_pack(first_seq, chunks, extra, op_max, index_bits, lane_bits, rank, job, seed):
    words = np.random.default_rng(seed).integers(0, 2**32, size=(chunks - 1) * K + extra + 1, dtype=np.uint32)
    flags = Flag.MAX if op_max else Flag.NONE
    template = Header(Kind.DATA, job, 0, flags, rank, 0, 0, index_bits, lane_bits, 1 << rank)
    seqs = np.arange(first_seq, first_seq + chunks, dtype=np.int64)
    slots = (3 + seqs) & 63
    rows = data_packets(template, seqs, slots, words, K)
    padded = np.zeros(chunks * K, dtype=np.uint32)
    padded[: words.size] = words
    for i, seq in enumerate(seqs.tolist()):
        expected = template.with_(seq=seq & 0xFFFFFFFF, slot=int(slots[i])).pack(padded[i * K : (i + 1) * K])
        assert rows[i].tobytes() == expected


def _packet(draw) -> bytes:
    """A valid packet of any kind, one broken in one field or its length, or random bytes."""
    kind = draw(st.sampled_from(list(Kind)))
    index_bits = draw(st.integers(0, 8))
    lane_bits = draw(st.sampled_from([8, 16, 32]))
    rank = draw(st.integers(0, 31))
    header = Header(kind, draw(st.integers(0, 2**16 - 1)), draw(st.integers(0, 2**32 - 1)),
                    Flag(draw(st.integers(0, 3))), rank if kind == Kind.DATA else 0, draw(st.integers(0, 255)),
                    draw(st.integers(0, 2**16 - 1)), index_bits, lane_bits,
                    1 << rank if kind == Kind.DATA else draw(st.integers(0, 2**32 - 1)))  # fmt: skip
    if kind == Kind.DATA:
        words = K
    elif kind in (Kind.RESULT, Kind.PARTIAL):
        words = result_words(K, index_bits, lane_bits)
    else:
        words = 0
    data = bytearray(header.pack(np.arange(words, dtype=np.uint32)))
    damage = draw(st.sampled_from(["none", "none", "byte", "truncate", "extend", "random"]))
    if damage == "byte":
        data[draw(st.integers(0, HEADER_LEN - 1))] = draw(st.integers(0, 255))
    elif damage == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif damage == "extend":
        data += b"\0\0\0\0"
    elif damage == "random":
        data = bytearray(draw(st.binary(max_size=64)))
    return bytes(data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.integers(1, 40))
def test_reading_a_batch_agrees_with_parse_packet_by_packet(data, count):
    """Small batches are parsed one by one, larger ones checked by valid_mask: both agree with parse."""
    datagrams = [Datagram(_packet(data.draw), ("10.0.0.1", 1)) for _ in range(count)]
    headers, valid = read(Frames.of(datagrams), K)
    assert valid.dtype == bool and headers.shape == valid.shape == (count,)
    for (packet, _), header, ok in zip(datagrams, headers, valid.tolist()):
        try:
            expected, _ = parse(packet, K)
        except MalformedPacket:
            assert not ok
            continue
        assert ok
        got = Header(Kind(int(header["kind"])), int(header["job"]), int(header["seq"]), Flag(int(header["flags"])),
                     int(header["rank"]), int(header["priority"]), int(header["slot"]), int(header["index_bits"]),
                     int(header["lane_bits"]), int(header["bitmap"]))  # fmt: skip
        assert got == expected


def test_both_validators_serve_their_batch_sizes(monkeypatch):
    used = []
    monkeypatch.setattr(packets, "valid_mask", lambda *args: used.append("valid_mask") or np.zeros(len(args[0]), bool))
    monkeypatch.setattr(packets, "parse", lambda data, words: used.append("parse"))
    packet = Datagram(Header(Kind.RESULT, 1, 2, lane_bits=8, bitmap=3).pack(np.zeros(K, np.uint32)), ("h", 1))
    read(Frames.of([packet] * (packets.VECTORIZE_FROM - 1)), K)
    assert used == ["parse"] * (packets.VECTORIZE_FROM - 1)
    used.clear()
    read(Frames.of([packet] * packets.VECTORIZE_FROM), K)
    assert used == ["valid_mask"]


def test_gather_copies_datagrams_out_of_the_buffer():
    datagrams = [Datagram(bytes([i]) * (10 + i), ("h", i)) for i in range(4)]
    frames = Frames.of(datagrams)
    frames = Frames(frames.buffer.copy(), frames.start, frames.length, frames.peer, frames.addresses)  # as a socket's, reused
    rows = gather(frames, np.array([3, 1]), 10)
    assert rows.tolist() == [[3] * 10, [1] * 10]
    frames.buffer[:] = 0
    assert rows.tolist() == [[3] * 10, [1] * 10]


def test_frames_of_rows_and_join_keep_every_datagram_in_order():
    a = Frames.of_rows(np.arange(12, dtype=np.uint8).reshape(3, 4), ("a", 1))
    b = Frames.of([Datagram(b"xy", ("b", 2)), Datagram(b"z", ("a", 1))])
    joined = Frames.join([b, Frames.empty(), a])
    assert joined.datagrams() == b.datagrams() + a.datagrams()
    assert a.datagrams() == [Datagram(bytes(range(i, i + 4)), ("a", 1)) for i in (0, 4, 8)]
    assert Frames.join([a]) is a and not len(Frames.join([]))


def test_results_are_kept_for_the_newest_capacity_chunks_across_the_wrap_and_any_length():
    store = ResultStore(4)
    assert store.get(0) is None and store.get(2**32 - 1) is None
    first = 2**32 - 2
    store.put(np.arange(first, first + 3), np.arange(30, dtype=np.uint8).reshape(3, 10))
    store.put(np.array([first + 3]), np.full((1, 14), 7, dtype=np.uint8))  # a longer RESULT
    assert store.get(2**32 - 2) == bytes(range(10))
    assert store.get(0) == bytes(range(20, 30))
    assert store.get(1) == bytes([7] * 14)
    store.put(np.array([first + 4]), np.full((1, 4), 9, dtype=np.uint8))  # evicts first
    assert store.get(2**32 - 2) is None and store.get(2) == bytes([9] * 4) and store.get(3) is None


def test_outstanding_chunks_are_found_completed_and_timed_by_entry():
    chunks = Outstanding(4)
    assert chunks.oldest(10) == 10 and chunks.next_deadline() is None
    chunks.add(np.arange(6, 9), now=1.0, deadline=2.0)
    entries, live = chunks.find(np.array([6, 8, 9, 2]))  # 2 shares seq 6's entry
    assert entries.tolist() == [2, 0, 1, 2] and live.tolist() == [True, True, False, False]
    assert chunks.status[entries[0]] == NO_STATUS and chunks.count == 3
    chunks.complete(np.array([2]))
    assert chunks.oldest(10) == 7 and chunks.next_deadline() == 2.0 and chunks.count == 2
    chunks.complete(np.array([0, 3]))
    assert chunks.oldest(10) == 10 and chunks.next_deadline() is None


@pytest.mark.parametrize("size", [0, 5])
def test_short_datagrams_read_zero_past_their_end_and_invalid(size):
    datagrams = [Datagram(b"\xa7" * size, ("h", 1))] * packets.VECTORIZE_FROM
    headers, valid = read(Frames.of(datagrams), K)
    raw = headers.view(np.uint8).reshape(-1, HEADER_LEN)
    assert not valid.any() and (raw[:, :size] == 0xA7).all() and (raw[:, size:] == 0).all()
