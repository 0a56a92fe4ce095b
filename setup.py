"""Build of the trainmon Python package (python/trainmon) and the trainmon
command.

The extension compiles the few libtrainmon sources it needs directly (the
record writer and reader, the in-process record layouts and the shared
helpers), so that `pip install .` works on a clean checkout without `make`.
The `trainmon` binary (src/cli + src/lib) is compiled by the same build
with the same compiler and shipped as a script of the wheel: pip puts it in
the environment's bin/ (on PATH in an activated virtualenv), as tools that
ship native executables in wheels do.  The Makefile stays the way to build
for development; both compile the same sources.
"""
import glob
import os
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
try:
    from setuptools.command.build_scripts import build_scripts
except ImportError:  # setuptools < 69: distutils' (setuptools' own copy once it is imported)
    from distutils.command.build_scripts import build_scripts

LIB_SOURCES = [
    "src/lib/util.c",
    "src/lib/fastclock.c",  # the agent's clock
    "src/lib/rec.c",
    "src/lib/recread.c",
    "src/lib/inproc.c",
    "src/lib/safefile.c",
    "src/lib/steps.c",
    "src/lib/follow.c",
    "src/lib/stops.c",  # follow.c's totals of what stopped the loop
    "src/lib/anatomy.c",  # follow.c names devices as the report does
]

ext = Extension(
    "trainmon._trainmon",
    sources=["python/trainmon/_trainmon.c"] + LIB_SOURCES,
    include_dirs=["include", "src/lib"],
    define_macros=[("_GNU_SOURCE", None)],
    # (a function a Python version lacks must fail the build, not the import)
    extra_compile_args=["-std=c11", "-O2", "-pthread", "-Wall", "-Wno-missing-field-initializers",
                        "-Werror=implicit-function-declaration"],
    extra_link_args=["-pthread"],
    libraries=["m"],
)

HERE = os.path.dirname(os.path.abspath(__file__))
CLI_OUT = os.path.join("build", "cli-bin", "trainmon")


def _c_string(path):
    """src/cli/sitecustomize.py as C string literals (the Makefile's sed)."""
    out = []
    for line in open(path, encoding="utf-8").read().splitlines():
        esc = "".join("\\" + c if c in '\\"?' else c for c in line)
        out.append('"%s\\n"\n' % esc)
    return "".join(out)


class build_cli(build_ext):
    """Compiles the trainmon command after the extension, with the
    compiler setuptools found (its error names a missing compiler)."""

    def run(self):
        super().run()
        if not self.inplace:  # `make` builds the extension in place and the binary itself
            self.build_cli()

    def build_cli(self):
        cc = self.compiler
        gen = os.path.join(self.build_temp, "gen")
        os.makedirs(gen, exist_ok=True)
        with open(os.path.join(gen, "sitecustomize.inc"), "w") as f:
            f.write(_c_string(os.path.join("src", "cli", "sitecustomize.py")))
        macros = [("_GNU_SOURCE", None)]
        if not self._has_header("microhttpd.h"):
            macros.append(("TM_NO_HTTP", None))  # `trainmon serve` off, as with make
        srcs = sorted(glob.glob("src/lib/*.c")) + sorted(glob.glob("src/cli/*.c"))
        objs = cc.compile(srcs, output_dir=os.path.join(self.build_temp, "cli"), macros=macros,
                          include_dirs=["include", "src/lib", gen],
                          extra_postargs=["-std=c11", "-O2", "-pthread", "-fPIC"])
        os.makedirs(os.path.dirname(CLI_OUT), exist_ok=True)
        cc.link_executable(objs, "trainmon", output_dir=os.path.dirname(CLI_OUT),
                           libraries=["dl", "pthread", "m"], extra_postargs=["-pthread"])

    def _has_header(self, name):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "probe.c")
            with open(src, "w") as f:
                f.write("#include <%s>\nint main(void) { return 0; }\n" % name)
            try:
                self.compiler.compile([src], output_dir=d)
                return True
            except Exception:
                return False


class build_binary_scripts(build_scripts):
    """The script is the compiled binary: copied as it is (setuptools would
    read it as Python to fix its #! line).  `build` runs build_ext before
    build_scripts, so it exists by then."""

    def copy_scripts(self):
        self.mkpath(self.build_dir)
        out = []
        for script in self.scripts:
            dst = os.path.join(self.build_dir, os.path.basename(script))
            self.copy_file(script, dst)
            os.chmod(dst, 0o755)
            out.append(dst)
        return out, out


setup(
    name="trainmon",
    version="0.1.0",
    description="In-process flight recorder for PyTorch training jobs",
    package_dir={"": "python"},
    packages=["trainmon"],
    ext_modules=[ext],
    cmdclass={"build_ext": build_cli, "build_scripts": build_binary_scripts},
    scripts=[CLI_OUT],
    python_requires=">=3.9",  # (Py_SET_TYPE, PyFrame_GetCode, PyObject_CallMethodNoArgs)
)
