"""The error every transport raises when a reduction cannot complete."""


class TransportError(RuntimeError):
    """A peer (switch, PS or another worker) did not answer in time; the message says which."""


def too_many_workers(workers: int, limit: int, *, nodes: bool) -> TransportError:
    """The refusal of a job with more workers than the protocol takes (docs/protocol.md, section 1),
    saying what to do; every rank raises it before anything is set up, so none waits for the others."""
    if nodes:
        return TransportError(
            f"{workers} nodes: the switch and the PS take at most {limit} workers per job, and a two-level job "
            f"sends one worker per node (docs/protocol.md, section 1). Put more ranks on each node (at most {limit} "
            "nodes, of any number of ranks), or use transport='collective'"
        )
    return TransportError(
        f"{workers} workers: the switch and the PS take at most {limit} per job (docs/protocol.md, section 1). "
        f"Sum inside each node first with THCState(hierarchy='node'), which sends one worker per node (at most "
        f"{limit} nodes, of any number of ranks), or use transport='collective'"
    )
