"""The software switch: the executable reference of docs/protocol.md, section 5.

Numpy only (no torch), and it talks only in packets, so the same tests drive it and the
P4 targets.
"""

from ina.switch.config import SwitchConfig
from ina.switch.core import COUNTERS, OUTCOMES, SwitchCore

__all__ = ["COUNTERS", "OUTCOMES", "SwitchConfig", "SwitchCore"]
