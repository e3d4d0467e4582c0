"""The error every transport raises when a reduction cannot complete."""


class TransportError(RuntimeError):
    """A peer (switch, PS or another worker) did not answer in time; the message says which."""
