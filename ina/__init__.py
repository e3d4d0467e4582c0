"""ina: in-network aggregation of THC-compressed gradients for torch DDP.

``from ina import THCState, thc_hook`` loads the hook (and torch) on first use only, so the
torch-free parts (protocol, software switch, parameter server) import quickly without it.
"""
from typing import Any

__all__ = ["THCState", "thc_hook"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ina import hook

        return getattr(hook, name)
    raise AttributeError(f"module 'ina' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
