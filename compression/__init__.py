"""THC (Tensor Homomorphic Compression) codec, imported as ``ina.compression``.

Standalone: imports nothing else of ``ina``. See THCCodec for the encode/decode flow.
"""
from .codec import THCCodec
from .config import THCConfig
from .lanes import SumPacking, collective_packing, sum_lane_bits
from .native import move_to_huge_pages, native_available
from .packing import pack_bits, unpack_bits
from .table import clip_threshold, thc_table, uniform_table

__all__ = [
    "SumPacking",
    "THCCodec",
    "THCConfig",
    "clip_threshold",
    "collective_packing",
    "move_to_huge_pages",
    "native_available",
    "pack_bits",
    "sum_lane_bits",
    "thc_table",
    "uniform_table",
    "unpack_bits",
]
