"""Build of the trainmon Python package (python/trainmon).

The extension compiles the few libtrainmon sources it needs directly (the
record writer and reader, the in-process record layouts and the shared
helpers), so that `pip install .` works on a clean checkout without `make`.
"""
from setuptools import Extension, setup

LIB_SOURCES = [
    "src/lib/util.c",
    "src/lib/rec.c",
    "src/lib/recread.c",
    "src/lib/inproc.c",
    "src/lib/safefile.c",
    "src/lib/steps.c",
    "src/lib/follow.c",
]

ext = Extension(
    "trainmon._trainmon",
    sources=["python/trainmon/_trainmon.c"] + LIB_SOURCES,
    include_dirs=["include", "src/lib"],
    define_macros=[("_GNU_SOURCE", None)],
    extra_compile_args=["-std=c11", "-O2", "-pthread", "-Wall", "-Wno-missing-field-initializers"],
    extra_link_args=["-pthread"],
    libraries=["m"],
)

setup(
    name="trainmon",
    version="0.1.0",
    description="In-process flight recorder for PyTorch training jobs",
    package_dir={"": "python"},
    packages=["trainmon"],
    ext_modules=[ext],
    python_requires=">=3.8",
)
