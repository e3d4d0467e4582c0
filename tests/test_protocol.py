"""The header codec, its scapy twin, the batch validator and the field packing agree with the spec."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scapy.layers.inet import IP, UDP
from scapy.packet import Raw

from ina.control import Endpoint, JobSpec
from ina.protocol import (HEADER_DTYPE, HEADER_LEN, INA_PORT, Flag, Header, Kind, MalformedPacket, pack_fields, parse,
                          result_words, unpack_fields)
from ina.protocol.header import valid_mask
from ina.protocol.scapy_layer import INA

WORDS = 4

headers = st.builds(
    Header,
    kind=st.sampled_from(list(Kind)),
    job=st.integers(0, 0xFFFF),
    seq=st.integers(0, 0xFFFFFFFF),
    flags=st.sampled_from([Flag.NONE, Flag.RESEND, Flag.MAX, Flag.RESEND | Flag.MAX]),
    rank=st.integers(0, 31),
    priority=st.integers(0, 255),
    slot=st.integers(0, 0xFFFF),
    index_bits=st.integers(0, 8),
    lane_bits=st.sampled_from([8, 16, 32]),
    bitmap=st.integers(0, 0xFFFFFFFF),
)


def test_header_bytes_match_the_diagram():
    header = Header(Kind.DATA, job=0x0102, seq=0x03040506, flags=Flag.RESEND, rank=3, priority=9,
                    slot=0x0708, index_bits=4, lane_bits=8, bitmap=1 << 3)
    assert header.pack() == bytes.fromhex("a7 01 01 01 0102 03 09 03040506 0708 04 08 00000008")


@given(headers, st.binary(max_size=64))
def test_scapy_layer_and_struct_codec_agree_byte_for_byte(header, payload):
    ours = header.pack(payload)
    theirs = INA(kind=int(header.kind), flags=int(header.flags), job=header.job, rank=header.rank,
                 priority=header.priority, seq=header.seq, slot=header.slot, index_bits=header.index_bits,
                 lane_bits=header.lane_bits, bitmap=header.bitmap) / Raw(payload)
    assert bytes(theirs) == ours
    dissected = INA(ours)
    assert (dissected.job, dissected.seq, dissected.bitmap) == (header.job, header.seq, header.bitmap)


def test_scapy_dissects_ina_inside_udp_on_its_port():
    frame = IP(bytes(IP() / UDP(sport=1234, dport=INA_PORT) / Header(Kind.FLUSH, job=7, seq=1).pack()))
    assert frame[INA].job == 7 and frame[INA].kind == Kind.FLUSH


def _payload_words(header: Header, chunk: int) -> int:
    """The payload of a valid packet of this kind for a chunk of `chunk` DATA words."""
    if header.kind == Kind.DATA:
        return chunk
    return result_words(chunk, header.index_bits, header.lane_bits) if header.kind in (Kind.RESULT, Kind.PARTIAL) else 0


def _assert_parsers_agree(data: bytes) -> None:
    """`parse` accepts exactly the packets `valid_mask` marks valid, and neither crashes."""
    try:
        parse(data, WORDS)
        single = True
    except MalformedPacket:
        single = False
    row = np.zeros(1, dtype=HEADER_DTYPE)
    head = data[:HEADER_LEN]
    row.view(np.uint8)[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    assert bool(valid_mask(row, np.array([len(data)]), WORDS)[0]) == single


@settings(max_examples=500)
@given(headers, st.integers(0, WORDS + 1), st.integers(-5, 5))
def test_batch_validator_agrees_with_parse(header, chunk, length_error):
    """Chunks of 0..K+1 words (short ones included), each length off by a few bytes too."""
    _assert_parsers_agree(header.pack(bytes(max(0, 4 * _payload_words(header, chunk) + length_error))))


@given(st.binary(max_size=120))
def test_random_bytes_never_crash_the_parsers(data):
    _assert_parsers_agree(data)


def test_parse_returns_payload_words_and_rejects_wrong_lengths():
    words = np.array([1, 2, 0xFFFFFFFF, 4], dtype=np.uint32)
    header = Header(Kind.DATA, job=1, seq=2, rank=5, bitmap=1 << 5, lane_bits=8)
    parsed, payload = parse(header.pack(words), WORDS)
    assert parsed == header and payload.tolist() == words.tolist()
    assert parse(header.pack(words[:1]), WORDS)[1].tolist() == [1]  # a short chunk: a bucket's tail, a MAX
    for wrong in (b"", words.tobytes() + bytes(4), words.tobytes()[:7]):  # none, more than K, not whole words
        with pytest.raises(MalformedPacket, match="carries no chunk"):
            parse(header.pack(wrong), WORDS)
    indices = Header(Kind.RESULT, job=1, seq=2, index_bits=4, lane_bits=8, bitmap=1)
    assert [m for m in range(12) if _parses(indices.pack(bytes(4 * m)))] == [2, 4, 6, 8]  # 8 lanes per index word
    assert not _parses(Header(Kind.FLUSH, job=1, seq=2).pack(bytes(4)))
    with pytest.raises(MalformedPacket, match="bitmap"):
        parse(header.with_(bitmap=3).pack(words), WORDS)
    with pytest.raises(MalformedPacket, match="shorter"):
        parse(b"\xa7\x01", WORDS)


def _parses(data: bytes) -> bool:
    try:
        parse(data, WORDS)
    except MalformedPacket:
        return False
    return True


def test_packing_layout_example_from_the_spec():
    words = pack_fields(np.array([1, 2, 3, 4, 5]), 8)
    assert words.tolist() == [0x04030201, 0x00000005]
    assert words.astype(">u4").tobytes()[:4] == bytes([4, 3, 2, 1])


@pytest.mark.parametrize("width", range(1, 33))
def test_packing_round_trips_every_width(width):
    rng = np.random.default_rng(width)
    values = rng.integers(0, 2**width, size=1000, dtype=np.uint64).astype(np.uint32)
    words = pack_fields(values, width)
    assert words.size == -(-1000 // (32 // width))
    assert np.array_equal(unpack_fields(words, width, 1000), values)


def test_job_spec_validates_with_messages_that_say_what_to_change():
    workers = [{"host": "127.0.0.1", "port": 9000 + r} for r in range(4)]
    spec = JobSpec.from_json({"job": 3, "workers": workers, "window": 8, "ps": "127.0.0.1:47101"})
    assert spec.fanin == 4 and spec.full_bitmap == 0b1111 and spec.ps == Endpoint("127.0.0.1", 47101)
    assert JobSpec.from_json(spec.to_json()) == spec
    with pytest.raises(ValueError, match="window"):
        JobSpec.from_json({"job": 3, "workers": workers, "window": 0})
    with pytest.raises(ValueError, match="wider lane_bits"):
        JobSpec.from_json({"job": 3, "workers": workers * 8, "window": 1, "index_bits": 4, "table": list(range(0, 32, 2)),
                           "lane_bits": 8} | {"workers": [{"host": "h", "port": p} for p in range(1, 33)]})
    with pytest.raises(ValueError, match="same address"):
        JobSpec.from_json({"job": 3, "workers": workers[:1] * 2, "window": 1})
    with pytest.raises(ValueError, match="unknown job fields"):
        JobSpec.from_json({"job": 3, "workers": workers, "window": 1, "prio": 3})
