"""Where the P4 tools are: p4lang's compilers, BMv2 and p4testgen are not pip packages, so ina looks
for them on PATH, or where an environment variable points, and says so when they are missing."""

from __future__ import annotations

import os
import shutil

TOOLS = {
    "p4c": "INA_P4C",
    "simple_switch_grpc": "INA_SIMPLE_SWITCH_GRPC",
    "bf-p4c": "INA_BF_P4C",
    "p4testgen": "INA_P4TESTGEN",
}
"""Each tool ina runs, and the environment variable that overrides where it is found."""

INSTALL_HINTS = {
    "p4c": "install p4lang's p4c (https://github.com/p4lang/p4c: packages for Ubuntu, or build from source)",
    "simple_switch_grpc": "install p4lang's BMv2 with its gRPC server (https://github.com/p4lang/behavioral-model, "
                          "built with PI: packages for Ubuntu, or build from source)",
    "bf-p4c": "build p4lang/p4c with its Tofino back end (cmake -DENABLE_TOFINO=ON; docs/p4.md, \"Tofino\")",
    "p4testgen": "build p4lang/p4c's p4testgen with its Tofino target (cmake -DENABLE_TEST_TOOLS=ON -DENABLE_TOFINO=ON)",
}


class ToolMissing(RuntimeError):
    """A P4 tool is not installed where ina looks."""


def find(tool: str) -> str | None:
    """The path of `tool`: the file its environment variable names, else the one on PATH, else None."""
    override = os.environ.get(TOOLS[tool])
    if override:
        return override if os.path.isfile(override) and os.access(override, os.X_OK) else None
    return shutil.which(tool)


def require(tool: str) -> str:
    """`find(tool)`, or ToolMissing saying where ina looked and what to install."""
    path = find(tool)
    if path is None:
        variable = TOOLS[tool]
        looked = f"${variable}={os.environ[variable]!r} (not an executable file)" if os.environ.get(variable) else f"PATH (and ${variable} is unset)"
        raise ToolMissing(f"{tool} not found: looked in {looked}; {INSTALL_HINTS[tool]}, or set {variable} to its path")
    return path


def missing(*tools: str) -> str | None:
    """Why a test that needs `tools` must skip, or None when all are there."""
    absent = [tool for tool in tools if find(tool) is None]
    if not absent:
        return None
    hints = "; ".join(INSTALL_HINTS[tool] for tool in absent)
    return f"needs {', '.join(absent)} (on PATH or via {', '.join('$' + TOOLS[t] for t in absent)}); {hints}"
