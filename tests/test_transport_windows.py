"""The PS-only transport's default window (docs/transport.md's option table)."""
import pytest

from ina.net.udp import SOCKET_BUFFER_BYTES
from ina.transport.udp import PSTransport
from ina.transport.udp_setup import Deployment


@pytest.mark.parametrize("workers, words, window", [(4, 8185, 64), (16, 8185, 16), (64, 8185, 4), (4, 64, 64),
                                                     (1024, 8185, 1)])  # fmt: skip
def test_ps_only_windows_together_fit_the_ps_receive_buffer(workers, words, window):
    transport = PSTransport(ps="127.0.0.1:1", ps_control="127.0.0.1:2")
    transport._workers = workers  # what attach learns from the process group
    got = transport._default_window(Deployment(words, 1, ("127.0.0.1", 1), None))
    assert got == window
    assert got == 1 or workers * got * 4 * words <= SOCKET_BUFFER_BYTES
