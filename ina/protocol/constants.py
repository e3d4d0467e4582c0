"""Numbers fixed by docs/protocol.md."""

from enum import IntEnum, IntFlag

MAGIC = 0xA7
VERSION = 1
HEADER_LEN = 20
INA_PORT = 47100
DEFAULT_SWITCH_CONTROL_PORT = 47180
DEFAULT_PS_CONTROL_PORT = 47181
MAX_WORKERS = 32
LANE_WIDTHS = (8, 16, 32)
MAX_INDEX_BITS = 8
KIND_OFFSET = 2
"""The header byte that holds a packet's kind."""
FLAGS_OFFSET = 3
"""The header byte that holds a packet's flags."""
PRIORITY_OFFSET = 7
"""The header byte that holds a packet's priority."""
EGRESS_QUEUES = 8
"""Strict-priority egress queues of a switch with `queues: priority` (section 5, "Egress queues"): a DATA or PARTIAL
in queue min(priority >> 3, 6) + 1, a RESULT flagged HOLD in queue 1, every other packet in queue 0."""


class Kind(IntEnum):
    DATA = 1
    RESULT = 2
    PARTIAL = 3
    FLUSH = 4
    STATUS = 5
    FETCH = 6
    SWEEP = 7


class Flag(IntFlag):
    NONE = 0
    RESEND = 0x01
    MAX = 0x02
    HOLD = 0x04  # a RESULT the switch holds its slot for until the PS returns it (policy atp)
    SPINE = 0x08  # a racked job's spine level: rank is a rack, bitmap counts racks (section 10)


KNOWN_FLAGS = int(Flag.RESEND | Flag.MAX | Flag.HOLD | Flag.SPINE)
MAX_RACKS = 32
"""The most racks (leaves) one job spans (section 10): the spine's bitmap has 32 bits."""
