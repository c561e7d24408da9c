"""loopboard's detection engine: plain Python, no Django, Celery or `runs` import.

import detection
analysis = detection.analyze(run, detection.Policy.load("loopboard.toml"))
monitor = detection.Monitor(policy)          # live, inside an agent loop
monitor.check("search", {"q": "x"})           # before a call: would it be a loop?
monitor.observe(step)                         # after it: findings that fire now

Speed-ups: `make` compiles this package with mypyc into ``build/speedups/`` (see
scripts/build_speedups.py). This file is never compiled: it puts that folder in front of the
package's own when it was built from exactly these sources by this interpreter, so the
compiled modules load instead of the .py files; otherwise (not built, sources edited since,
another Python, ``LOOPBOARD_PURE_PYTHON=1``) the plain Python below is what runs. Both give
the same findings (tests/detection/test_speedups.py); ``detection.COMPILED`` says which runs.
"""

import hashlib
import os
import sysconfig
from pathlib import Path

_HERE = Path(__file__).resolve().parent
#: Where scripts/build_speedups.py puts the compiled package (LOOPBOARD_SPEEDUPS_DIR moves it).
SPEEDUPS_DIR = Path(os.environ.get("LOOPBOARD_SPEEDUPS_DIR") or _HERE.parent / "build" / "speedups")
#: The modules left as Python: this file (it chooses) and the run model, which importers
#: fill freely (its Step, in step.py, is compiled: the engine reads every field of it).
NOT_COMPILED = ("__init__.py", "model.py")


def compiled_sources() -> list[Path]:
    """Return the source files the speed-ups are compiled from, in a stable order."""
    files = sorted(_HERE.rglob("*.py"))
    return [path for path in files if path.relative_to(_HERE).as_posix() not in NOT_COMPILED]


def sources_stamp() -> str:
    """Return what a build must have been made from: the sources' digest and the ABI. The
    run model counts too: it is not compiled, but the compiled code checks its annotations."""
    digest = hashlib.sha256()
    for path in [*compiled_sources(), _HERE / "model.py"]:
        digest.update(path.relative_to(_HERE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"{digest.hexdigest()} {sysconfig.get_config_var('EXT_SUFFIX')}"


def _use_speedups() -> bool:
    if os.environ.get("LOOPBOARD_PURE_PYTHON"):
        return False
    build = SPEEDUPS_DIR / "detection"
    try:
        stamp = (build / "STAMP").read_text().strip()
    except OSError:
        return False
    if stamp != sources_stamp():
        return False
    __path__.insert(0, str(build))  # the package's own search path: looked in first
    return True


COMPILED = _use_speedups()

from . import catalogue
from .detectors import DETECTORS
from .engine import Monitor, analyze
from .findings import Analysis, Check, Finding, Ledger, LedgerEntry, Waste
from .keys import DEFAULT_VOLATILE, call_signature, digest, normalize, progress_signature
from .model import KINDS, Run, Step
from .policy import Policy, ToolSettings

__all__ = [
    "COMPILED",
    "DEFAULT_VOLATILE",
    "DETECTORS",
    "KINDS",
    "Analysis",
    "Check",
    "Finding",
    "Ledger",
    "LedgerEntry",
    "Monitor",
    "Policy",
    "Run",
    "Step",
    "ToolSettings",
    "Waste",
    "catalogue",
    "analyze",
    "call_signature",
    "digest",
    "normalize",
    "progress_signature",
]
