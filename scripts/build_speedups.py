"""Compile the detection engine with mypyc into build/speedups/ (make runs this).

    python scripts/build_speedups.py [--force] [--background]

`make test` builds first and waits (the suite tests the compiled engine); `make run` passes
--background, so the first page does not wait for the compiler: that start runs the plain
engine and the next one loads the build. Each module is its own C file, and the C compiler
runs on every core at once.

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
import fcntl
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

# One C file per module (multi_file), compiled on every core at once: distutils compiles an
# extension's sources one after another, so its compile step is replaced by one that runs a
# compiler per source in a thread pool (the work is in the compiler processes).
SETUP = """
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import setup  # first: it puts its own distutils in place
from distutils.ccompiler import CCompiler
from mypyc.build import mypycify


def compile_in_parallel(self, sources, output_dir=None, macros=None, include_dirs=None,
                        debug=False, extra_preargs=None, extra_postargs=None, depends=None):
    macros, objects, extra_postargs, pp_opts, build = self._setup_compile(
        output_dir, macros, include_dirs, sources, depends, extra_postargs
    )
    cc_args = self._get_cc_args(pp_opts, debug, extra_preargs)
    todo = [(obj, *build[obj]) for obj in objects if obj in build]
    todo.sort(key=lambda job: -os.path.getsize(job[1]))  # the biggest first: no long tail
    with ThreadPoolExecutor({jobs}) as pool:
        list(pool.map(lambda job: self._compile(*job, cc_args, extra_postargs, pp_opts), todo))
    return objects


CCompiler.compile = compile_in_parallel
files = sys.argv[1:]
sys.argv[1:] = ["build_ext", "--build-lib", {build_lib!r}, "--build-temp", {build_temp!r}]
extensions = mypycify(
    files, opt_level="3", group_name="detection._native", target_dir={c_dir!r}, multi_file=True
)
for extension in extensions:  # the group's headers are in detection/, its module files not
    extension.include_dirs.append(os.path.join({c_dir!r}, "detection"))
setup(name="loopboard-detection-speedups", ext_modules=extensions)
"""


def require() -> bool:
    return os.environ.get("LOOPBOARD_REQUIRE_SPEEDUPS", "") not in ("", "0")


def give_up(reason: str) -> int:
    print(f"speedups: not built ({reason}); the detection engine runs as plain Python.")
    return 1 if require() else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    parser.add_argument(
        "--background",
        action="store_true",
        help="when a build is needed, start it detached (output in var/speedups.log) and return",
    )
    args = parser.parse_args(argv)
    target = detection.SPEEDUPS_DIR
    stamp = detection.sources_stamp()
    if not args.force and up_to_date(target, stamp):
        print(f"speedups: up to date in {target}")
        return 0
    if args.background and not require():
        return start_in_background()
    target.mkdir(parents=True, exist_ok=True)
    # One build at a time (a background one from `make run`, then `make test`): the second
    # waits for the first, then finds it up to date.
    with open(target / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not args.force and up_to_date(target, stamp):
            print(f"speedups: up to date in {target}")
            return 0
        return build(target, stamp)


def up_to_date(target: Path, stamp: str) -> bool:
    stamp_file = target / "detection" / "STAMP"
    return stamp_file.is_file() and stamp_file.read_text().strip() == stamp


def start_in_background() -> int:
    """Start this script detached (its own session, so Ctrl-C on `make run` leaves it be, and
    at a low priority, so the first page is served first); the next start loads its build."""
    log = Path(os.environ.get("LOOPBOARD_VAR_DIR") or ROOT / "var") / "speedups.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        subprocess.Popen(
            [sys.executable, __file__],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: os.nice(10),
        )
    print(
        f"speedups: compiling detection/ with mypyc in the background ({log}); until it is"
        " done, loopboard runs the plain Python engine, and the next start loads the compiled one."
    )
    return 0


def build(target: Path, stamp: str) -> int:
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
            build_lib=str(staging),
            build_temp=str(Path(temp) / "tmp"),
            c_dir=str(Path(temp) / "c"),
            jobs=len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
        )
        env = dict(os.environ, MYPY_CACHE_DIR=str(Path(temp) / "mypy-cache"))
        print(
            f"speedups: compiling {len(sources)} modules of detection/ with mypyc ...", flush=True
        )
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
        # Swap in the new build whole, so an import never sees half of one: copied next to
        # the old one, then renamed into place (`make run` builds while loopboard runs).
        new, old = target / "detection.new", target / "detection.old"
        for folder in (new, old):
            shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(built, new)
        if (target / "detection").exists():
            (target / "detection").rename(old)
        new.rename(target / "detection")
        shutil.rmtree(old, ignore_errors=True)
    print(f"speedups: built in {time.monotonic() - started:.0f} s into {target / 'detection'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
