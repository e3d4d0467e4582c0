"""The worker's batch code agrees with the per-packet codec: packets built, headers read, frames
joined (ina.transport.packets, Frames.of_rows and Frames.join)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Header, Kind, MalformedPacket, parse, result_words
from ina.transport import packets
from ina.transport.packets import data_packets, payloads, read

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
@given(st.data(), st.integers(1, 40), st.booleans())
def test_reading_a_batch_agrees_with_parse_packet_by_packet(data, count, with_frames):
    """Small batches are parsed one by one, larger ones checked by valid_mask: both agree with parse."""
    datagrams = [Datagram(_packet(data.draw), ("10.0.0.1", 1)) for _ in range(count)]
    fields = read(datagrams, K, Frames.of(datagrams) if with_frames else None)
    assert len(fields) == count
    for (packet, _), (ok, *got) in zip(datagrams, fields):
        try:
            header, payload = parse(packet, K)
        except MalformedPacket:
            assert not ok
            continue
        assert ok and got == [header.kind, header.job, header.seq, header.flags, header.lane_bits, header.index_bits,
                              header.bitmap]  # fmt: skip
        if header.kind == Kind.RESULT:
            assert payloads([packet], payload.size)[0].tolist() == payload.tolist()


def test_both_validators_serve_their_batch_sizes(monkeypatch):
    used = []
    monkeypatch.setattr(packets, "valid_mask", lambda *args: used.append("valid_mask") or np.zeros(len(args[0]), bool))
    monkeypatch.setattr(packets, "parse", lambda data, words: used.append("parse") or parse(data, words))
    packet = Datagram(Header(Kind.RESULT, 1, 2, lane_bits=8, bitmap=3).pack(np.zeros(K, np.uint32)), ("h", 1))
    read([packet] * (packets.VECTORIZE_FROM - 1), K)
    assert used == ["parse"] * (packets.VECTORIZE_FROM - 1)
    used.clear()
    read([packet] * packets.VECTORIZE_FROM, K)
    assert used == ["valid_mask"]


def test_payloads_of_several_results_are_one_matrix():
    results = [Header(Kind.RESULT, 1, seq, lane_bits=8, bitmap=3).pack(np.arange(seq, seq + K, dtype=np.uint32)) for seq in range(3)]
    assert payloads(results, K).tolist() == [list(range(seq, seq + K)) for seq in range(3)]


def test_frames_of_rows_and_join_keep_every_datagram_in_order():
    a = Frames.of_rows(np.arange(12, dtype=np.uint8).reshape(3, 4), ("a", 1))
    b = Frames.of([Datagram(b"xy", ("b", 2)), Datagram(b"z", ("a", 1))])
    joined = Frames.join([b, Frames.empty(), a])
    assert joined.datagrams() == b.datagrams() + a.datagrams()
    assert a.datagrams() == [Datagram(bytes(range(i, i + 4)), ("a", 1)) for i in (0, 4, 8)]
    assert Frames.join([a]) is a and not len(Frames.join([]))


@pytest.mark.parametrize("size", [0, 5, HEADER_LEN])
def test_short_datagrams_are_invalid_in_batches_of_any_size(size):
    for count in (1, packets.VECTORIZE_FROM):
        assert not any(ok for ok, *_ in read([Datagram(b"\xa7" * size, ("h", 1))] * count, K))
