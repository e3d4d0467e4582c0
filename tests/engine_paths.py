"""The worker engine's two paths, for tests parametrized over them: the Python reference and the native core.

A test module runs every test once per path with `use_each_engine = engine_paths(__name__)`: the
module's global `Engine` is then each path's class in turn (the native one is skipped, with the
reason, where it is not built); `engine_paths(__name__, "UdpEngine", SERVED)` does the same for
the engines served on a socket.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import pytest

from ina.transport.engine import Engine
from ina.transport.native import NativeEngine, native_module
from ina.transport.udp_engine import NativeUdpEngine, UdpEngine

_NOT_BUILT = pytest.mark.skipif(native_module() is None, reason="ina.transport._native is not built")
ENGINES = [pytest.param(Engine, id="python"), pytest.param(NativeEngine, id="native", marks=_NOT_BUILT)]
SERVED = [pytest.param(UdpEngine, id="python"), pytest.param(NativeUdpEngine, id="native", marks=_NOT_BUILT)]


def engine_paths(module: str, name: str = "Engine", paths: list = ENGINES) -> Callable[..., Any]:
    """An autouse fixture that sets `module`'s global `name` to each path's class in turn."""

    @pytest.fixture(autouse=True, params=paths)
    def engine_class(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
        monkeypatch.setattr(sys.modules[module], name, request.param)
        return request.param

    return engine_class
