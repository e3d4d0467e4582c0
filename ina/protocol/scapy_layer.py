"""The ina header as a scapy layer, for packet tests, captures and tools.

    0               1               2               3
    +---------------+---------------+---------------+---------------+
    |  magic 0xA7   |  version      |     kind      |     flags     |
    |              job              |     rank      |   priority    |
    |                              seq                              |
    |              slot             |  index_bits   |   lane_bits   |
    |                            bitmap                             |
    |                    payload: 32-bit words ...                  |
    +---------------------------------------------------------------+

Bound to UDP destination port 47100 (docs/protocol.md).
"""

from scapy.fields import ByteEnumField, ByteField, FlagsField, IntField, ShortField, XByteField, XIntField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from ina.protocol.constants import INA_PORT, MAGIC, VERSION, Kind


class INA(Packet):
    """One ina packet header; the payload words follow as Raw."""

    name = "INA"
    fields_desc = [
        XByteField("magic", MAGIC),
        ByteField("version", VERSION),
        ByteEnumField("kind", Kind.DATA, {k.value: k.name for k in Kind}),
        FlagsField("flags", 0, 8, ["RESEND", "MAX", "HOLD", "SPINE"]),
        ShortField("job", 0),
        ByteField("rank", 0),
        ByteField("priority", 0),
        IntField("seq", 0),
        ShortField("slot", 0),
        ByteField("index_bits", 0),
        ByteField("lane_bits", 32),
        XIntField("bitmap", 0),
    ]


bind_layers(UDP, INA, dport=INA_PORT)
