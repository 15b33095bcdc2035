"""`make wheel`: the manylinux wheel installs into a fresh virtual environment and runs there, outside the checkout.

Building the wheel compiles the core (minutes on 2 cores), so the tests that need one run only when asked:
``BLOOMWISE_WHEEL=DIR`` tests the newest manylinux wheel in DIR (what `make wheel` does after building it), and
``BLOOMWISE_TEST_WHEEL=1`` builds one for the session with scripts/build_wheel.py. Otherwise they skip and say so;
so do they when auditwheel or Debian's patchelf is missing. The checker of a wheel's contents is tested always.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from bloomwise import BloomFilter

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_wheel", ROOT / "scripts" / "build_wheel.py")
build_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_wheel)

EXTENSION_MODULES = sorted(path.stem for path in (ROOT / "src" / "bloomwise" / "_native").glob("*.pyx"))


def test_the_checker_names_c_sources_unstripped_modules_and_a_plain_linux_tag(tmp_path):
    wheel = tmp_path / "bloomwise-0.2.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("bloomwise/_native/bloom.c", "/* generated */")
        archive.writestr("bloomwise/_native/bloom.cpython-311-x86_64-linux-gnu.so", b"\x7fELF....symtab.strtab")
        archive.writestr("bloomwise/_native/core.cpython-311-x86_64-linux-gnu.so", b"\x7fELF....dynsym")
    assert build_wheel.wheel_problems(wheel) == [
        f"{wheel.name} has no manylinux tag",
        "bloomwise/_native/bloom.c: a generated C source",
        "bloomwise/_native/bloom.cpython-311-x86_64-linux-gnu.so: not stripped (it has a .symtab)",
    ]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("BLOOMWISE_WHEEL")
    if given:
        wheels = sorted(Path(given).glob("bloomwise-*manylinux*.whl"), key=lambda path: path.stat().st_mtime)
        assert wheels, f"BLOOMWISE_WHEEL={given}: no manylinux bloomwise wheel there"
        return wheels[-1]
    if not os.environ.get("BLOOMWISE_TEST_WHEEL"):
        pytest.skip("building the wheel compiles the core (minutes): `make wheel` runs these tests, or set "
                    "BLOOMWISE_TEST_WHEEL=1 (or BLOOMWISE_WHEEL=DIR for a wheel already built)")
    missing = build_wheel.missing_tools()
    if missing:
        pytest.skip("make wheel needs " + "; ".join(missing))
    return build_wheel.build(tmp_path_factory.mktemp("wheel"))


@pytest.mark.wheel
def test_the_wheel_is_manylinux_stripped_and_without_c_sources(wheel):
    assert build_wheel.wheel_problems(wheel) == []
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    modules = sorted(Path(name).name.split(".")[0] for name in names
                     if name.startswith("bloomwise/_native/") and name.endswith(".so"))
    assert modules == EXTENSION_MODULES
    assert wheel.stat().st_size < 8 * 2 ** 20, f"{wheel.stat().st_size:,} bytes"  # was 13 MB of C + 2.7 MB a module


@pytest.mark.wheel
def test_the_wheel_installs_and_runs_in_a_fresh_environment(wheel, tmp_path):
    environment = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(environment)], check=True, timeout=300)
    python = environment / "bin" / "python"
    clean = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True,
                             env=clean, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]

    plan = subprocess.run([str(environment / "bin" / "bloomwise"), "plan", "--n", "1e6", "--p", "1%"],
                          capture_output=True, text=True, env=clean, cwd=tmp_path, timeout=120)
    assert plan.returncode == 0, plan.stderr
    assert f"m  bits                 {BloomFilter(10 ** 6, 0.01).num_cells:,} = " in plan.stdout

    code = ("import importlib, json, bloomwise\n"
            f"names = {EXTENSION_MODULES!r}\n"
            "files = [importlib.import_module('bloomwise._native.' + name).__file__ for name in names]\n"
            "f = bloomwise.BloomFilter(1000, 0.01); f.update(['a', 'b']); assert 'a' in f and 'zz' not in f\n"
            "print(json.dumps(files))")
    imported = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=clean, cwd=tmp_path,
                              timeout=120)
    assert imported.returncode == 0, imported.stderr
    files = [Path(path) for path in json.loads(imported.stdout)]
    assert len(files) == len(EXTENSION_MODULES)
    assert all(environment in path.parents for path in files), files  # the wheel's modules, not the checkout's
