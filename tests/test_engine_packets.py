"""The worker's batch code agrees with the per-packet codec: packets built, payloads taken, frames
joined (ina.transport.packets, Frames.of_rows and Frames.join)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.net.frames import Frames
from ina.net.node import Datagram
from ina.protocol import Flag, Header, Kind
from ina.transport.packets import data_lengths, data_packets, payloads

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


def test_payloads_of_several_results_are_one_matrix():
    results = [Header(Kind.RESULT, 1, seq, lane_bits=8, bitmap=3).pack(np.arange(seq, seq + K, dtype=np.uint32)) for seq in range(3)]
    assert payloads(results, K).tolist() == [list(range(seq, seq + K)) for seq in range(3)]


def test_a_reductions_last_chunk_is_as_long_as_its_words_unless_padded():
    assert data_lengths(2 * K + 3, K, pad=False).tolist() == [20 + 4 * K, 20 + 4 * K, 20 + 4 * 3]
    assert data_lengths(2 * K + 3, K, pad=True).tolist() == [20 + 4 * K] * 3
    assert data_lengths(1, K, pad=False).tolist() == [24]  # a MAX chunk
    short = Header(Kind.RESULT, 1, 0, lane_bits=8, bitmap=3).pack(np.array([7, 8], dtype=np.uint32))
    assert payloads([short], K).tolist() == [[7, 8] + [0] * (K - 2)]
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)
    assert [d.data for d in Frames.of_rows(rows, ("a", 1), np.array([4, 4, 2])).datagrams()] == [b"\0\1\2\3", b"\4\5\6\7", b"\x08\x09"]


def test_frames_of_rows_and_join_keep_every_datagram_in_order():
    a = Frames.of_rows(np.arange(12, dtype=np.uint8).reshape(3, 4), ("a", 1))
    b = Frames.of([Datagram(b"xy", ("b", 2)), Datagram(b"z", ("a", 1))])
    joined = Frames.join([b, Frames.empty(), a])
    assert joined.datagrams() == b.datagrams() + a.datagrams()
    assert a.datagrams() == [Datagram(bytes(range(i, i + 4)), ("a", 1)) for i in (0, 4, 8)]
    assert Frames.join([a]) is a and not len(Frames.join([]))
