"""The quantization table: test vector, structure, and optimality of the dynamic program."""
import itertools
import math

import numpy as np
import pytest

from ina.compression import clip_threshold, thc_table, uniform_table

REFERENCE_TABLE = [0, 3, 5, 7, 9, 11, 13, 14, 16, 17, 19, 21, 23, 25, 27, 30]


def expected_variance(table, granularity, clip, grid):
    """Direct evaluation of the DP objective: sum_k w_k (v_k - lo)(hi - v_k) over the grid."""
    t = clip_threshold(clip)
    total = 0.0
    for k in range(grid):
        v = granularity * k / (grid - 1)
        u = 2 * t * v / granularity - t
        w = math.exp(-u * u / 2) / math.sqrt(2 * math.pi) * (2 * t / (grid - 1))
        if k in (0, grid - 1):
            w += clip / 2
        hi = next(level for level in table if level >= v)
        lo = max(level for level in table if level <= v)
        total += w * (v - lo) * (hi - v)
    return total


def symmetric_tables(bits, granularity):
    """Every mirror-symmetric strictly increasing table of 2**bits levels from 0 to g."""
    half = 2 ** (bits - 1)
    for inner in itertools.combinations(range(1, (granularity - 1) // 2 + 1), half - 1):
        lower = [0, *inner]
        yield lower + [granularity - r for r in reversed(lower)]


def test_reference_test_vector():
    assert thc_table(4, 30, 1 / 32, 1001) == REFERENCE_TABLE
    assert thc_table(4, 30, 1 / 32) == REFERENCE_TABLE


def test_clip_threshold():
    assert clip_threshold(1 / 32) == pytest.approx(2.15387, abs=5e-6)
    assert clip_threshold(0.05) == pytest.approx(1.959964, abs=1e-6)


def test_uniform_table():
    assert uniform_table(1) == [0, 1]
    assert uniform_table(4) == list(range(16))
    assert uniform_table(8) == list(range(256))


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("clip", [1e-4, 1 / 32, 0.2, 0.7])
def test_table_structure(bits, clip):
    levels = 2**bits
    for granularity in sorted({levels - 1, min(255, levels), min(255, 2 * levels + 1), 255}):
        table = thc_table(bits, granularity, clip)
        assert len(table) == levels
        assert table[0] == 0 and table[-1] == granularity
        assert all(isinstance(level, int) for level in table)
        assert all(a < b for a, b in zip(table, table[1:])), "strictly increasing"
        assert all(table[i] + table[-1 - i] == granularity for i in range(levels)), "mirror-symmetric"


@pytest.mark.parametrize(
    "bits,granularity,clip,grid",
    [(2, 7, 0.1, 101), (2, 12, 0.05, 201), (3, 12, 1 / 32, 301), (3, 9, 0.2, 101), (3, 15, 0.01, 101),
     (2, 30, 1 / 32, 1001), (3, 18, 0.5, 51), (1, 6, 0.3, 11), (2, 6, 0.9, 2)],
)  # fmt: skip
def test_dp_matches_brute_force(bits, granularity, clip, grid):
    best = min(expected_variance(t, granularity, clip, grid) for t in symmetric_tables(bits, granularity))
    found = expected_variance(thc_table(bits, granularity, clip, grid), granularity, clip, grid)
    assert found == pytest.approx(best, rel=1e-9, abs=1e-12)


def test_thc_table_beats_uniform_spacing_for_gaussians():
    """The point of the DP: less expected variance than evenly spread levels."""
    even = [round(i * 30 / 15) for i in range(16)]
    assert expected_variance(REFERENCE_TABLE, 30, 1 / 32, 1001) < expected_variance(even, 30, 1 / 32, 1001)


def test_result_is_a_fresh_list():
    table = thc_table(4, 30, 1 / 32)
    table.append(99)
    assert thc_table(4, 30, 1 / 32) == REFERENCE_TABLE


@pytest.mark.parametrize(
    "args,name",
    [((0, 30, 0.1), "bits"), ((9, 255, 0.1), "bits"), ((4, 14, 0.1), "granularity"), ((4, 256, 0.1), "granularity"),
     ((4, 30, 0.0), "clip"), ((4, 30, 1.0), "clip"), ((4, 30, 0.1, 1), "grid"), ((4.0, 30, 0.1), "bits"),
     ((4, 30, "x"), "clip")],
)  # fmt: skip
def test_thc_table_rejects_bad_arguments(args, name):
    with pytest.raises(ValueError, match=name):
        thc_table(*args)


def test_uniform_and_threshold_reject_bad_arguments():
    with pytest.raises(ValueError, match="bits"):
        uniform_table(9)
    with pytest.raises(ValueError, match="clip"):
        clip_threshold(1.5)


def test_dp_handles_the_largest_tables_quickly():
    table = thc_table(8, 255, 1 / 32)
    assert table == list(range(256))  # 256 levels in 0..255 leave no choice
    assert np.all(np.diff(thc_table(7, 255, 1 / 32)) >= 1)
