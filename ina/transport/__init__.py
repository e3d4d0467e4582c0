"""Transports: how the hook's compressed reductions reach the other workers.

A transport is chosen by name (``THCState(transport="collective")``, ``ina demo --transport``)
or passed as an instance. Names map to factories that import their module only when called,
so listing them does not import torch.
"""
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    import torch.distributed as dist

    from ina.transport.base import Transport


def _collective(process_group: "Optional[dist.ProcessGroup]") -> "Transport":
    from ina.transport.collective import CollectiveTransport

    return CollectiveTransport(process_group)


TRANSPORTS: dict[str, Callable[["Optional[dist.ProcessGroup]"], "Transport"]] = {
    "collective": _collective,
}


def create_transport(name: str, process_group: "Optional[dist.ProcessGroup]") -> "Transport":
    """Build the transport registered as ``name`` for the workers of ``process_group``."""
    try:
        factory = TRANSPORTS[name]
    except KeyError:
        raise ValueError(
            f"unknown transport {name!r}; use one of {sorted(TRANSPORTS)} or pass a Transport instance"
        ) from None
    return factory(process_group)
