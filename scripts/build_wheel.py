"""`make wheel`: a manylinux wheel of bloomwise, repaired by auditwheel, stripped, without the generated C sources.

    .venv/bin/python scripts/build_wheel.py               # dist/bloomwise-<version>-cp3X-cp3X-manylinux_*.whl
    .venv/bin/python scripts/build_wheel.py --out DIR

1. ``pip wheel . --no-deps --no-build-isolation``: the environment's setuptools and Cython compile the core (the
   generated ``*.c`` files stay out of the wheel: ``include-package-data = false`` in pyproject.toml, so only the
   listed package data goes in). The build stages files in ``build/lib.*``; whatever an earlier build left there,
   other than the compiled modules (kept, so an unchanged core is not compiled again), is removed first;
2. ``auditwheel repair --strip``: the platform tag becomes the oldest ``manylinux_2_X`` this machine's libraries
   allow (package indexes refuse ``linux_x86_64``), external libraries would be vendored with patchelf (Debian's
   ``patchelf``), and the extension modules lose their debugging symbols;
3. checks of the result: a manylinux tag, no ``.c`` file, every extension module stripped (no ``.symtab``).

The wheel is tagged for this machine's glibc: to publish for older systems, run the same steps in a manylinux
container. Exit codes: 0 the wheel was written (its path is the last line printed), 1 a step failed, 2 auditwheel or
patchelf is missing (the message says how to install it).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def missing_tools() -> list[str]:
    """What this script needs and does not find, each with how to install it."""
    missing = []
    if shutil.which("patchelf") is None:
        missing.append("patchelf (Debian: apt-get install patchelf; scripts/system-deps.sh installs it)")
    try:
        import auditwheel  # noqa: F401
    except ImportError:
        missing.append("auditwheel (pip install auditwheel; the `wheel` extra)")
    return missing


def wheel_problems(path: Path) -> list[str]:
    """What is wrong with a repaired wheel: its tag, C sources inside, extension modules with symbols."""
    problems = []
    if "-manylinux_" not in path.name and "-manylinux20" not in path.name:
        problems.append(f"{path.name} has no manylinux tag")
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            if name.endswith(".c"):
                problems.append(f"{name}: a generated C source")
            elif name.endswith(".so") and b".symtab" in wheel.read(name):
                problems.append(f"{name}: not stripped (it has a .symtab)")
    return problems


def clear_staging() -> None:
    """Remove what earlier builds staged in ``build/lib.*`` except the compiled modules: a file left there (such as a
    generated ``.c`` of an older configuration) would otherwise go into the wheel."""
    for staging in (ROOT / "build").glob("lib.*"):
        for path in staging.rglob("*"):
            if path.is_file() and not path.name.endswith(".so"):
                path.unlink()


def build(out: Path) -> Path:
    """Build, repair and check the wheel; return its path in ``out``. RuntimeError naming the failed step."""
    out.mkdir(parents=True, exist_ok=True)
    clear_staging()
    with tempfile.TemporaryDirectory(prefix="bloomwise-wheel-") as scratch:
        raw = Path(scratch) / "raw"
        step = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "--no-build-isolation", "-q",
                "-w", str(raw)]
        if subprocess.call(step) != 0:
            raise RuntimeError("pip wheel failed (see above)")
        [built] = raw.glob("bloomwise-*.whl")
        repaired = Path(scratch) / "repaired"
        step = [sys.executable, "-m", "auditwheel", "repair", "--strip", "-w", str(repaired), str(built)]
        if subprocess.call(step) != 0:
            raise RuntimeError("auditwheel repair failed (see above)")
        [wheel] = repaired.glob("bloomwise-*.whl")
        problems = wheel_problems(wheel)
        if problems:
            raise RuntimeError("the repaired wheel is not right: " + "; ".join(problems))
        target = out / wheel.name
        shutil.copyfile(wheel, target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the wheel goes (default dist/)")
    args = parser.parse_args(argv)
    missing = missing_tools()
    if missing:
        print("build_wheel: missing " + "; ".join(missing), file=sys.stderr)
        return 2
    try:
        wheel = build(args.out)
    except RuntimeError as error:
        print(f"build_wheel: {error}", file=sys.stderr)
        return 1
    print(f"{wheel.stat().st_size / 2 ** 20:.1f} MiB")
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
