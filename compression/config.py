"""THCConfig: the codec's parameters, validated once, with the derived table and threshold."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .lanes import collective_packing
from .table import _require_clip, _require_int, clip_threshold, thc_table, uniform_table, MAX_BITS, MAX_GRANULARITY


@dataclass(frozen=True)
class THCConfig:
    """Parameters of THC; the defaults are the reference's (4 bits, g = 30, p = 1/32, 1024-blocks).

    ``uniform_levels`` selects the UHC baseline table 0..2**bits - 1 (see :meth:`uniform`)
    instead of the optimal THC table.
    """

    bits: int = 4
    granularity: int = 30
    clip: float = 1 / 32
    block_size: int = 1024
    grid: int = 1001
    uniform_levels: bool = False

    def __post_init__(self) -> None:
        _require_int("bits", self.bits, 1, MAX_BITS)
        _require_int("granularity", self.granularity, 2**self.bits - 1, MAX_GRANULARITY)
        _require_clip(self.clip)
        _require_int("block_size", self.block_size, 2)
        if self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two (e.g. 1024), got {self.block_size}")
        _require_int("grid", self.grid, 2)
        if not isinstance(self.uniform_levels, bool):
            raise ValueError(f"uniform_levels must be a bool, got {self.uniform_levels!r}")
        if self.uniform_levels and self.granularity != 2**self.bits - 1:
            raise ValueError(
                f"granularity must be 2**bits - 1 = {2**self.bits - 1} with uniform_levels, "
                f"got {self.granularity}; use THCConfig.uniform(bits)"
            )

    @classmethod
    def uniform(cls, bits: int, clip: float = 1e-4, block_size: int = 1024) -> THCConfig:
        """UHC: uniform levels 0..2**bits - 1 (granularity 2**bits - 1), clipping only far tails."""
        _require_int("bits", bits, 1, MAX_BITS)
        return cls(bits=bits, granularity=2**bits - 1, clip=clip, block_size=block_size, uniform_levels=True)

    @cached_property
    def table(self) -> tuple[int, ...]:
        """The quantization levels, 2**bits integers from 0 to granularity."""
        if self.uniform_levels:
            return tuple(uniform_table(self.bits))
        return tuple(thc_table(self.bits, self.granularity, self.clip, self.grid))

    @property
    def threshold(self) -> float:
        """T: normalized coordinates are clipped to [-T, T]."""
        return clip_threshold(self.clip)

    def check_workers(self, workers: int) -> None:
        """Raise ValueError unless ``workers`` table values always sum within a collective's int64 lanes."""
        collective_packing(workers, self.granularity)
