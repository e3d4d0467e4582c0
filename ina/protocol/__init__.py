"""The wire protocol: the ground floor every other part builds on (see docs/protocol.md).

Imports neither torch nor any switch, PS or hook code, so the software switch, the PS
and tests can all use it.
"""

from ina.protocol.constants import (
    DEFAULT_PS_CONTROL_PORT,
    DEFAULT_SWITCH_CONTROL_PORT,
    HEADER_LEN,
    INA_PORT,
    MAGIC,
    MAX_WORKERS,
    VERSION,
    Flag,
    Kind,
)
from ina.protocol.header import HEADER_DTYPE, Header, MalformedPacket, parse, result_words
from ina.protocol.packing import pack_fields, unpack_fields

__all__ = [
    "DEFAULT_PS_CONTROL_PORT",
    "DEFAULT_SWITCH_CONTROL_PORT",
    "HEADER_DTYPE",
    "HEADER_LEN",
    "INA_PORT",
    "MAGIC",
    "MAX_WORKERS",
    "VERSION",
    "Flag",
    "Header",
    "Kind",
    "MalformedPacket",
    "pack_fields",
    "parse",
    "result_words",
    "unpack_fields",
]
