"""Build the compiled core (Cython). Everything else is configured in pyproject.toml."""
import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

NATIVE = os.path.join("src", "bloomwise", "_native")
COMPILE_ARGS = ["-O3", "-fno-strict-aliasing"]
if sys.platform != "win32":
    COMPILE_ARGS += ["-std=c11"]
# Opt-in: tune for this machine's CPU (the default build is portable x86-64).
if os.environ.get("BLOOMWISE_NATIVE_ARCH"):
    COMPILE_ARGS.append("-march=native")


def native(name: str, extra_args=()) -> Extension:
    return Extension(
        f"bloomwise._native.{name}",
        [os.path.join(NATIVE, f"{name}.pyx")],
        include_dirs=[NATIVE],
        extra_compile_args=COMPILE_ARGS + list(extra_args),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


setup(
    ext_modules=cythonize(
        [native("core"), native("storage"), native("hashes"), native("bloom"), native("counting"), native("served"),
         native("scalable"),
         # the cache simulator's request loop over arrays (bloomwise.cache.fast_replay)
         native("replay", ["-ffp-contract=off"]),
         # csv trace lines -> the replay's arrays (bloomwise.cache.traces.cachesim.CsvTraceReader.record_arrays)
         native("trace_reader"),
         # HTTP/1.1 responses off a byte stream (bloomwise.proxy.peer_client's peer queries)
         native("http1"),
         # the selective filters' decisions: the same double operations as numpy, so no fused multiply-adds
         native("decide", ["-ffp-contract=off"])],
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
            "cdivision": True,
            "initializedcheck": False,
            "embedsignature": True,
        },
        include_path=[NATIVE],
    ),
)
