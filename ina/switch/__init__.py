"""The software switch: the executable reference of docs/protocol.md, section 5.

Numpy only (no torch), and it talks only in packets, so the same tests drive it and the
P4 targets. `SwitchCore` is the readable reference; `NativeSwitchCore` runs the same algorithm
in C (ina/switch/_native.c) and is what `switch_core` and the server pick wherever it built.
"""

from ina.switch.config import SwitchConfig
from ina.switch.core import COUNTERS, OUTCOMES, SwitchCore
from ina.switch.native import NativeSwitchCore, switch_core

__all__ = ["COUNTERS", "OUTCOMES", "NativeSwitchCore", "SwitchConfig", "SwitchCore", "switch_core"]
