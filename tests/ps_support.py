"""The PS's two paths for its tests: the `ps_path` fixture runs a test on the Python reference and on
the native PS, and `make_core` builds the PS of the path under test."""

from __future__ import annotations

from typing import Any

import pytest

from ina.ps.core import ParameterServer
from ina.ps.native import NativeParameterServer, native_module, ps_core

NATIVE_BUILT = native_module() is not None
PS_PATHS = ["python", pytest.param("native", marks=pytest.mark.skipif(not NATIVE_BUILT, reason="the native PS is not built (or INA_NATIVE_PACKETS=0)"))]  # fmt: skip
"""The PS's two paths, for `pytest.mark.parametrize("ps_path", PS_PATHS)`."""

_current = ["python"]


@pytest.fixture(params=PS_PATHS, autouse=True)
def ps_path(request: pytest.FixtureRequest) -> str:
    """Every test of a module that imports this fixture runs on both PSes; `make_core` builds the one under test."""
    _current[0] = request.param
    yield request.param
    _current[0] = "python"


def make_core(words: int, **options: Any) -> ParameterServer | NativeParameterServer:
    """The PS on the path under test."""
    return ps_core(words, _current[0], **options)
