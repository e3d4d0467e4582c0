"""Headers read a batch at a time agree with the per-packet codec (ina.protocol.batch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import HEADER_LEN, Flag, Header, Kind, MalformedPacket, parse, result_words
from ina.protocol import batch
from ina.protocol.batch import VECTORIZE_FROM, read_headers
from ina.transport.packets import payloads

K = 8


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
    frames = Frames.of(datagrams)
    headers = read_headers([d.data for d in datagrams], K, (frames.buffer, frames.start, frames.length) if with_frames else None)
    assert len(headers) == count
    for (packet, _), got in zip(datagrams, headers):
        try:
            header, payload = parse(packet, K)
        except MalformedPacket:
            assert got is None
            continue
        assert got == header
        if header.kind == Kind.RESULT:
            assert payloads([packet], payload.size)[0].tolist() == payload.tolist()


def test_both_validators_serve_their_batch_sizes(monkeypatch):
    used = []
    monkeypatch.setattr(batch, "valid_mask", lambda *args: used.append("valid_mask") or np.zeros(len(args[0]), bool))
    monkeypatch.setattr(batch, "parse", lambda data, words: used.append("parse") or parse(data, words))
    packet = Header(Kind.RESULT, 1, 2, lane_bits=8, bitmap=3).pack(np.zeros(K, np.uint32))
    read_headers([packet] * (VECTORIZE_FROM - 1), K)
    assert used == ["parse"] * (VECTORIZE_FROM - 1)
    used.clear()
    read_headers([packet] * VECTORIZE_FROM, K)
    assert used == ["valid_mask"]


@pytest.mark.parametrize("size", [0, 5, HEADER_LEN])
def test_short_datagrams_are_invalid_in_batches_of_any_size(size):
    for count in (1, VECTORIZE_FROM):
        assert read_headers([b"\xa7" * size] * count, K) == [None] * count
