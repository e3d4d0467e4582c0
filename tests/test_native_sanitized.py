"""The native packet cores and codec kernels under AddressSanitizer and UndefinedBehaviorSanitizer.

A copy of the working tree is built with INA_SANITIZE=1 (setup.py) and the exactness and fuzz
tests run there in a subprocess with the sanitizer runtimes preloaded: an out-of-bounds access,
a use after free or undefined behaviour in the C code fails the run with the sanitizer's report.
It takes a few minutes; docs/native.md gives the same steps by hand.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What runs sanitized: every test that drives a native core with exact expectations or fuzzed input.
SANITIZED_TESTS = ["tests/test_exactness.py", "tests/test_exactness_failures.py", "tests/test_exactness_fetch.py",
                   "tests/test_switch_fuzz.py", "tests/test_ps_fuzz.py", "tests/test_engine_fuzz.py",
                   "tests/test_switch_vectors.py", "tests/test_transport_udp_engine.py", "tests/test_codec_native.py"]  # fmt: skip


def _runtime(name: str) -> str | None:
    """The path of a sanitizer runtime the compiler ships, or None."""
    if shutil.which("gcc") is None:
        return None
    path = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


RUNTIMES = [_runtime("libasan.so"), _runtime("libubsan.so")]


def _native_runs(tree: Path, env: dict[str, str], tests: list[str]) -> list[str]:
    """The ids of the tests in `tests`, but for the Python references' runs of parametrized tests (those with
    "python" among their parameters): they add nothing under a C sanitizer."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *tests],
                            cwd=tree, env=env, capture_output=True, text=True, check=True).stdout.splitlines()  # fmt: skip
    ids = [line for line in listed if "::" in line]
    assert ids, "no tests collected"
    return [test for test in ids if "python" not in test.partition("[")[2]]


def _copy_tree(destination: Path) -> None:
    """The files git knows of (tracked, or untracked and not ignored): the tree a clean checkout builds."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, check=True).stdout.split(b"\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = destination / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (destination / "ina" / "compression").symlink_to(destination / "compression")  # the package-dir mapping


@pytest.mark.skipif(not os.environ.get("INA_REQUIRE_NATIVE"), reason="INA_REQUIRE_NATIVE is not set (CI sets it)")
@pytest.mark.parametrize("module", ["ina.switch._native", "ina.ps._native", "ina.transport._native"])
def test_every_native_packet_core_is_built_where_required(module: str) -> None:
    """Without a build the native tests skip; where a compiler is known to exist (CI), that is a failure."""
    importlib.import_module(module)


@pytest.mark.skipif(None in RUNTIMES, reason="needs gcc with its ASan and UBSan runtimes (libasan.so, libubsan.so)")
@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs a git checkout to copy")
def test_the_exactness_and_fuzz_tests_run_clean_under_asan_and_ubsan(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    _copy_tree(tree)
    environment = {**os.environ, "INA_SANITIZE": "1"}
    build = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree, env=environment,
                           capture_output=True, text=True)  # fmt: skip
    assert build.returncode == 0, build.stdout + build.stderr
    # Built in place, not setuptools' copies under build/; ina/compression is the codec (the symlink above).
    built = sorted(str(path.relative_to(tree)) for path in tree.glob("ina/*/_native*.so"))
    assert len(built) == len(list(tree.glob("ina/*/_native.c"))), f"a sanitized extension did not build: {built}"
    env = {**environment, "PYTHONPATH": str(tree), "LD_PRELOAD": " ".join(RUNTIMES),  # type: ignore[arg-type]
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
           "INA_REQUIRE_NATIVE": "1"}  # fmt: skip
    probe = subprocess.run([sys.executable, "-c", "import ina.compression._native as m; print(m.__file__)"], cwd=tree,
                           env=env, capture_output=True, text=True)  # fmt: skip
    assert probe.stdout.startswith(str(tree)), f"the sanitized build is not what Python imports: {probe.stdout}{probe.stderr}"
    tests = [test for test in SANITIZED_TESTS if (tree / test).exists()]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *_native_runs(tree, env, tests)],
        cwd=tree, env=env, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    report = run.stdout[-6000:] + run.stderr[-6000:]
    assert run.returncode == 0, report
    assert "ERROR: AddressSanitizer" not in report and "runtime error:" not in report, report
