"""Build hook for the optional native THC kernels; all metadata lives in pyproject.toml.

The extension is optional: without a C compiler the install still succeeds and the codec
falls back to its pure-torch path (with a warning).
"""
from setuptools import Extension, setup

native = Extension(
    "ina.compression._native",
    sources=["compression/_native.c"],
    # -ffp-contract=off: no FMA contraction, so the kernels round exactly like the torch path.
    extra_compile_args=["-O3", "-ffp-contract=off", "-pthread", "-Wno-psabi"],
    extra_link_args=["-pthread"],
    optional=True,
)

setup(ext_modules=[native])
