"""Build hook for the optional native kernels; all metadata lives in pyproject.toml.

- ina.compression._native: the THC codec's CPU kernels (compression/_native.c);
- ina.<package>._native: the native packet path of each package that has a `_native.c`
  (the worker engine, the PS, the software switch), on the shared headers in ina/csrc.

Every extension is optional: without a C compiler the install still succeeds and each part
falls back to its Python reference (with a message). INA_SANITIZE=1 builds them with
AddressSanitizer and UndefinedBehaviorSanitizer (docs/native.md says how to run the tests so).
"""
import os
from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError

OPENMP = "-fopenmp"

SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=undefined"]
sanitize = SANITIZE if os.environ.get("INA_SANITIZE") == "1" else []

codec = Extension(
    "ina.compression._native",
    # The bindings, and the kernels once per instruction set (each file sets its own target).
    sources=[f"compression/_native{part}.c" for part in ("", "_baseline", "_avx2", "_avx512")],
    depends=["compression/_native.h", "compression/_native_kernels.h"],
    # -ffp-contract=off: no FMA contraction, so the kernels round exactly like the torch path.
    extra_compile_args=["-O3", "-ffp-contract=off", OPENMP, "-Wno-psabi", *sanitize],
    extra_link_args=[OPENMP, *sanitize],
    optional=True,
)

packet_cores = [
    Extension(
        source[: -len(".c")].replace("/", "."),
        sources=[source],
        include_dirs=["ina/csrc"],
        depends=glob("ina/csrc/*.h"),
        extra_compile_args=["-O3", "-pthread", "-Wall", "-Wextra", "-Wno-missing-field-initializers", *sanitize],
        extra_link_args=["-pthread", *sanitize],
        optional=True,
    )
    for source in sorted(glob("ina/*/_native.c"))
]


class BuildWithoutOpenMPWhereMissing(build_ext):
    """A compiler without OpenMP (Apple's clang) still builds the codec: its kernels then run on one thread."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except (CCompilerError, ExecError):
            if OPENMP not in ext.extra_compile_args:
                raise
            print(f"{ext.name}: the compiler has no OpenMP; building it single-threaded")
            ext.extra_compile_args = [arg for arg in ext.extra_compile_args if arg != OPENMP]
            ext.extra_link_args = [arg for arg in ext.extra_link_args if arg != OPENMP]
            super().build_extension(ext)


setup(ext_modules=[codec, *packet_cores], cmdclass={"build_ext": BuildWithoutOpenMPWhereMissing})
