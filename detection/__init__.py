"""loopboard's detection engine: plain Python, no Django, Celery or `runs` import.

import detection
analysis = detection.analyze(run, detection.Policy.load("loopboard.toml"))
monitor = detection.Monitor(policy)          # live, inside an agent loop
monitor.check("search", {"q": "x"})           # before a call: would it be a loop?
monitor.observe(step)                         # after it: findings that fire now
"""

from .detectors import DETECTORS
from .engine import Monitor, analyze
from .findings import Analysis, Check, Finding, Ledger, LedgerEntry, Waste
from .keys import DEFAULT_VOLATILE, call_signature, digest, normalize, progress_signature
from .model import KINDS, Run, Step
from .policy import Policy, ToolSettings

__all__ = [
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
    "analyze",
    "call_signature",
    "digest",
    "normalize",
    "progress_signature",
]
