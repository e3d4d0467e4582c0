"""Transports: how the hook's compressed reductions reach the other workers.

A transport is chosen by name (``THCState(transport="collective")``, ``ina demo --transport``)
or passed as an instance. Names map to factories that import their module only when called,
so listing them does not import torch. ``"switch"`` and ``"ps"`` take their addresses from
keyword options or, when none are given, from the environment (see ``ina.transport.udp``).
"""
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:
    import torch.distributed as dist

    from ina.transport.base import Transport


def _collective(process_group: "Optional[dist.ProcessGroup]") -> "Transport":
    from ina.transport.collective import CollectiveTransport

    return CollectiveTransport(process_group)


def _switch(process_group: "Optional[dist.ProcessGroup]", **options: Any) -> "Transport":
    from ina.transport.udp import SwitchTransport

    return SwitchTransport(**options)  # the process group comes with attach()


def _ps(process_group: "Optional[dist.ProcessGroup]", **options: Any) -> "Transport":
    from ina.transport.udp import PSTransport

    return PSTransport(**options)


TRANSPORTS: dict[str, Callable[..., "Transport"]] = {
    "collective": _collective,
    "switch": _switch,
    "ps": _ps,
}


def create_transport(name: str, process_group: "Optional[dist.ProcessGroup]", **options: Any) -> "Transport":
    """Build the transport registered as ``name`` for the workers of ``process_group``, with its ``options``."""
    try:
        factory = TRANSPORTS[name]
    except KeyError:
        raise ValueError(
            f"unknown transport {name!r}; use one of {sorted(TRANSPORTS)} or pass a Transport instance"
        ) from None
    return factory(process_group, **options)
