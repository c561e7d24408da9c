"""`make run` does not wait for mypyc (issue 27 part 3): `build_speedups.py --background`
starts the build detached and returns at once, so the first page is served by the plain
engine; the next start loads the build (tests/detection/test_speedups.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run in its own process: importing the script sets LOOPBOARD_PURE_PYTHON in os.environ.
# The build is stale (up_to_date answers False) and nothing is really started.
PROGRAM = r"""
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("build_speedups", sys.argv[1])
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)
started, built = [], []
script.up_to_date = lambda target, stamp: False
script.fcntl.flock = lambda fd, op: None  # never wait for a real build of this checkout
script.build = lambda target, stamp: built.append(target) or 0
script.subprocess.Popen = lambda args, **kw: started.append(
    {"args": args, "new_session": kw.get("start_new_session"), "nice": kw.get("preexec_fn") is not None})
begin = time.monotonic()
code = script.main(["--background"])
print(json.dumps({"code": code, "seconds": time.monotonic() - begin, "started": started,
                  "built": len(built)}))
"""


def run(tmp_path: Path, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, str(ROOT / "scripts" / "build_speedups.py")],
        env={**os.environ, "LOOPBOARD_VAR_DIR": str(tmp_path), **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_stale_build_is_started_detached_and_the_command_returns_at_once(tmp_path):
    out = run(tmp_path, LOOPBOARD_REQUIRE_SPEEDUPS="0")
    assert out["code"] == 0 and out["built"] == 0  # it compiled nothing itself
    assert out["seconds"] < 5
    (started,) = out["started"]
    assert (
        started["args"][-1].endswith("build_speedups.py") and "--background" not in started["args"]
    )
    assert started["new_session"] and started["nice"]  # Ctrl-C on make run leaves it be
    assert (tmp_path / "speedups.log").exists()  # where its output goes


def test_ci_which_requires_the_compiled_engine_builds_in_the_foreground(tmp_path):
    out = run(tmp_path, LOOPBOARD_REQUIRE_SPEEDUPS="1")
    assert out["started"] == [] and out["built"] == 1
