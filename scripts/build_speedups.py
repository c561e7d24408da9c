"""Compile the detection engine with mypyc into build/speedups/ (make runs this).

    python scripts/build_speedups.py [--force]

The package stays plain Python: detection/__init__.py loads the compiled modules only when
build/speedups/detection/STAMP matches the current sources and interpreter, so an edit to a
.py file simply falls back to Python until the next `make`. When mypyc or a C compiler is
missing, this says so and leaves the engine in Python (about twice as slow), unless
LOOPBOARD_REQUIRE_SPEEDUPS=1 (CI), which makes that an error.

mypyc (part of mypy) turns the typed classes of detection/ into C structs and its methods
into C functions; it needs no code of ours but the type annotations already there.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["LOOPBOARD_PURE_PYTHON"] = "1"  # hash the sources; never load an old build here

import detection  # noqa: E402

SETUP = """
import sys
from setuptools import setup
from mypyc.build import mypycify

files = sys.argv[1:]
sys.argv[1:] = ["build_ext", "--build-lib", {build_lib!r}, "--build-temp", {build_temp!r}]
setup(
    name="loopboard-detection-speedups",
    ext_modules=mypycify(
        files, opt_level="3", group_name="detection._native", target_dir={c_dir!r}
    ),
)
"""


def require() -> bool:
    return os.environ.get("LOOPBOARD_REQUIRE_SPEEDUPS", "") not in ("", "0")


def give_up(reason: str) -> int:
    print(f"speedups: not built ({reason}); the detection engine runs as plain Python.")
    return 1 if require() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = parser.parse_args(argv)
    target = detection.SPEEDUPS_DIR
    stamp_file = target / "detection" / "STAMP"
    stamp = detection.sources_stamp()
    if not args.force and stamp_file.is_file() and stamp_file.read_text().strip() == stamp:
        print(f"speedups: up to date in {target}")
        return 0
    try:
        import mypyc  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError as exc:
        return give_up(f"{exc.name} is not installed: pip install -e '.[speed]'")
    sources = [path.relative_to(ROOT).as_posix() for path in detection.compiled_sources()]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="loopboard-mypyc-") as temp:
        staging = Path(temp) / "out"
        script = SETUP.format(
            build_lib=str(staging), build_temp=str(Path(temp) / "tmp"), c_dir=str(Path(temp) / "c")
        )
        env = dict(os.environ, MYPY_CACHE_DIR=str(Path(temp) / "mypy-cache"))
        print(f"speedups: compiling {len(sources)} modules of detection/ with mypyc ...")
        done = subprocess.run(
            [sys.executable, "-c", script, *sources],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            print(tail, file=sys.stderr)
            return give_up("mypyc failed, see above")
        built = staging / "detection"
        if not any(built.glob("engine*")):
            return give_up(f"mypyc made no engine module in {built}")
        (built / "STAMP").write_text(stamp + "\n")
        # swap in the new build whole, so an import never sees half of one
        target.mkdir(parents=True, exist_ok=True)
        old = target / "detection.old"
        shutil.rmtree(old, ignore_errors=True)
        if (target / "detection").exists():
            (target / "detection").rename(old)
        shutil.copytree(built, target / "detection")
        shutil.rmtree(old, ignore_errors=True)
    print(f"speedups: built in {time.monotonic() - started:.0f} s into {target / 'detection'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
