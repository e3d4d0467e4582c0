"""Control plane: job registration (docs/protocol.md, section 7) and its JSON-over-HTTP API."""

from ina.control.jobs import Endpoint, JobSpec

__all__ = ["Endpoint", "JobSpec"]
