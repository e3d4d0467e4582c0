"""Quantization levels: the THC table found by dynamic programming, and the uniform (UHC) one.

The table is the set of integer levels in 0..granularity that stochastic rounding snaps to.
THC places them where the normalized, rotated coordinates are dense, so the expected rounding
variance under a clipped standard normal is minimal (DESIGN.md, "THC", step 6).
"""
from __future__ import annotations

from functools import lru_cache
from statistics import NormalDist

import numpy as np

MAX_BITS = 8
MAX_GRANULARITY = 255  # table values travel as uint8 (THCCodec.table_values)


def _require_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """Return ``value`` if it is an int in [low, high], else raise ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in {low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def _require_clip(clip: object) -> float:
    """Return ``clip`` as a float if it is a fraction strictly between 0 and 1."""
    if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not 0.0 < clip < 1.0:
        raise ValueError(f"clip must be a fraction strictly between 0 and 1 (e.g. 1/32), got {clip!r}")
    return float(clip)


def clip_threshold(clip: float) -> float:
    """T = Phi^-1(1 - clip/2): the normalized magnitude beyond which a fraction ``clip`` is clipped."""
    return NormalDist().inv_cdf(1.0 - _require_clip(clip) / 2.0)


def uniform_table(bits: int) -> list[int]:
    """The UHC baseline: every integer level 0..2**bits - 1."""
    return list(range(2 ** _require_int("bits", bits, 1, MAX_BITS)))


def thc_table(bits: int, granularity: int, clip: float, grid: int = 1001) -> list[int]:
    """The mirror-symmetric table of 2**bits levels in 0..granularity with least expected variance.

    The variance of rounding v to its bracketing levels lo <= v <= hi is (v - lo)(hi - v); it is
    weighted over ``grid`` points of [0, granularity] by the standard normal density of the
    matching point of [-T, T], with the clipped tail mass added at both ends.
    """
    _require_int("bits", bits, 1, MAX_BITS)
    _require_int("granularity", granularity, 2**bits - 1, MAX_GRANULARITY)
    _require_clip(clip)
    _require_int("grid", grid, 2)
    return list(_solve(bits, granularity, float(clip), grid))


@lru_cache(maxsize=64)
def _solve(bits: int, granularity: int, clip: float, grid: int) -> tuple[int, ...]:
    """Dynamic program over the lower half of a symmetric table (the upper half mirrors it)."""
    g = granularity
    cost = _interval_costs(g, clip, grid)
    half = 2 ** (bits - 1)
    # Lower-half levels are < g/2 so that the mirrored upper half is strictly above them.
    lows = np.arange((g - 1) // 2 + 1)
    # best[r]: least cost of levels 0 = R[0] < ... < R[j] = r (each interval counted twice,
    # once for its mirror image); choice[j][r]: the R[j-1] that achieves it.
    best = np.full(lows.size, np.inf)
    best[0] = 0.0
    choice: list[np.ndarray] = []
    sub = cost[np.ix_(lows, lows)]
    for _ in range(1, half):
        total = best[:, None] + 2.0 * sub  # total[q, r] with q < r (sub is inf elsewhere)
        choice.append(np.argmin(total, axis=0))
        best = total[choice[-1], lows]
    middle = best + cost[lows, g - lows]  # the central interval [r, g - r] is its own mirror
    level = int(np.argmin(middle))
    lower = [level]
    for step in reversed(choice):
        level = int(step[level])
        lower.append(level)
    lower.reverse()
    return tuple(lower + [g - r for r in reversed(lower)])


def _interval_costs(granularity: int, clip: float, grid: int) -> np.ndarray:
    """cost[a, b] = sum over grid points v in [a, b] of w(v) (v - a)(b - v); inf unless a < b."""
    threshold = clip_threshold(clip)
    v = np.linspace(0.0, granularity, grid)
    u = v * (2.0 * threshold / granularity) - threshold
    w = np.exp(-0.5 * u * u) / np.sqrt(2.0 * np.pi) * (2.0 * threshold / (grid - 1))
    w[0] += clip / 2.0
    w[-1] += clip / 2.0
    # Prefix sums of w, w v, w v^2 turn each interval sum into three differences.
    prefix = [np.concatenate(([0.0], np.cumsum(w * v**k))) for k in range(3)]
    levels = np.arange(granularity + 1, dtype=np.float64)
    start = np.searchsorted(v, levels, side="left")
    stop = np.searchsorted(v, levels, side="right")
    a, b = levels[:, None], levels[None, :]
    i, j = start[:, None], stop[None, :]
    s0, s1, s2 = (p[np.maximum(j, i)] - p[i] for p in prefix)
    cost = -s2 + (a + b) * s1 - a * b * s0
    cost[a >= b] = np.inf
    return cost
