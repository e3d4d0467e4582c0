"""The PS's building blocks: exact-cover merging, the result ring, the index table lookup."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ina.protocol import pack_fields, result_words, unpack_fields
from ina.ps.lookup import IndexTable
from ina.ps.pieces import PieceSet
from ina.ps.results import ResultRing

WORDS = 3


def _combine(contributions: np.ndarray, bitmap: int, is_max: bool) -> np.ndarray:
    rows = contributions[[r for r in range(len(contributions)) if bitmap >> r & 1]]
    return rows.max(axis=0) if is_max else rows.sum(axis=0, dtype=np.uint32)


def _cover_exists(bitmaps: set[int], full: int) -> bool:
    """Brute force: unions reachable with pairwise disjoint pieces, each used once."""
    reachable = {0}
    for b in bitmaps:
        reachable |= {m | b for m in reachable if not m & b}
    return full in reachable


@st.composite
def chunk_pieces(draw):
    n = draw(st.integers(1, 6))
    full = (1 << n) - 1
    contributions = np.array(draw(st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=WORDS, max_size=WORDS),
                                           min_size=n, max_size=n)), dtype=np.uint32)
    bitmaps = draw(st.lists(st.integers(1, full), min_size=1, max_size=14))
    # Usually also a disjoint partition, as the switch produces, shuffled in among the rest.
    if draw(st.booleans()):
        owner = draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
        partition = [sum(1 << r for r in range(n) if owner[r] == o) for o in set(owner)]
        bitmaps = draw(st.permutations(bitmaps + partition))
    return n, contributions, bitmaps, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(chunk_pieces())
def test_completes_exactly_once_a_disjoint_cover_exists_and_counts_every_worker_once(case):
    n, contributions, bitmaps, is_max = case
    full = (1 << n) - 1
    pieces = PieceSet(full, is_max)
    seen: set[int] = set()
    for bitmap in bitmaps:
        assert pieces.add(bitmap, _combine(contributions, bitmap, is_max)) == (bitmap not in seen)
        seen.add(bitmap)
        assert pieces.held == np.bitwise_or.reduce(list(seen))
        if pieces.result is not None:
            break
        assert not _cover_exists(seen, full), f"a cover of {sorted(seen)} exists but the chunk did not complete"
    if _cover_exists(seen, full):
        assert pieces.result is not None
        np.testing.assert_array_equal(pieces.result, _combine(contributions, full, is_max))
    else:
        assert pieces.result is None


def test_an_overlapping_partial_waits_for_a_disjoint_cover():
    w = np.array([[1], [10], [100]], dtype=np.uint32)
    pieces = PieceSet(0b111, is_max=False)
    pieces.add(0b001, w[0])  # worker 0's resend
    pieces.add(0b011, w[0] + w[1])  # a partial that also holds worker 0
    pieces.add(0b100, w[2])
    assert pieces.result is not None and pieces.result.tolist() == [111]


def test_sums_wrap_at_32_bits_and_big_endian_pieces_are_read_as_numbers():
    pieces = PieceSet(0b11, is_max=False)
    pieces.add(0b01, np.array([0xFFFFFFFF, 7], dtype=">u4"))
    pieces.add(0b10, np.array([2, 0x80000000], dtype=np.uint32))
    assert pieces.result.tolist() == [1, 0x80000007]


def test_result_ring_replays_recent_results_and_evicts_the_oldest():
    ring = ResultRing(2)
    assert ring.put(5, False, b"five") and ring.put(6, True, b"six")
    assert not ring.put(5, False, b"other"), "a stored result is never replaced"
    assert ring.put(7, False, b"seven")
    assert ring.get(5) is None and ring.get(6) == (True, b"six") and len(ring) == 2
    with pytest.raises(ValueError):
        ResultRing(0)


@pytest.mark.parametrize("index_bits", range(1, 9))
@pytest.mark.parametrize("lane_bits", [8, 16, 32])
def test_index_table_matches_a_per_coordinate_reference(index_bits, lane_bits):
    rng = np.random.default_rng(index_bits * 100 + lane_bits)
    words = 5
    table = rng.integers(0, 2**lane_bits, size=1 << index_bits, dtype=np.uint64)
    count = words * (32 // index_bits)
    indices = rng.integers(0, 1 << index_bits, size=(3, count))
    payloads = np.stack([pack_fields(row, index_bits) for row in indices])
    lanes = IndexTable(table.tolist(), index_bits, lane_bits).lanes(payloads)
    assert lanes.shape == (3, result_words(words, index_bits, lane_bits))
    for row, got in zip(indices, lanes):
        np.testing.assert_array_equal(got, pack_fields(table[row], lane_bits))
        np.testing.assert_array_equal(unpack_fields(got, lane_bits, count), table[row])
