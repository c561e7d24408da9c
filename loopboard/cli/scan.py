"""`loopboard scan [--format F] [--policy FILE] [--json] PATH...`: find loops, no database.

Reads every trace format through runs.importers (no Django), analyses each run with the
detection engine and prints, per run, its verdict, stall score and findings.
Exit status: 0 every run ok, 1 some run warn/stop, 2 bad input (still reports the good files).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import TextIO

import detection
from runs.importers import IMPORTERS, TraceError, iter_runs

#: Files a directory walk passes over: documentation and config next to the traces.
NOT_TRACES = (".md", ".txt", ".rst", ".toml", ".py", ".cfg", ".ini", ".lock")

FINDING_KEYS = ("detector", "severity", "tool", "signature", "seqs", "count", "threshold")


def _files(paths: list[str]) -> Iterator[str]:
    for path in paths:
        if os.path.isdir(path):
            found = []
            for root, dirs, names in os.walk(path):
                dirs[:] = [name for name in dirs if not name.startswith(".")]
                found.extend(
                    os.path.join(root, name)
                    for name in names
                    if not name.startswith(".") and not name.lower().endswith(NOT_TRACES)
                )
            yield from sorted(found)
        else:
            yield path


def _seqs(seqs: tuple[int, ...], limit: int = 12) -> str:
    shown = ", ".join(map(str, seqs[:limit]))
    return shown + (f", … ({len(seqs)} steps)" if len(seqs) > limit else "")


def _print_human(out: TextIO, source: str, run: detection.Run, result: detection.Analysis) -> None:
    label = run.id if os.path.basename(source) == run.id else f"{source} :: {run.id}"
    out.write(
        f"{result.verdict.upper():5} {label}  stall {result.stall_score:.2f}  "
        f"({result.steps} steps, {result.tool_calls} tool calls)\n"
    )
    for finding in result.findings:
        out.write(
            f"  [{finding.severity}] {finding.detector} {finding.tool or ''} "
            f"{finding.count}>={finding.threshold} ({finding.rule}) at step {finding.fired_at}; "
            f"steps {_seqs(finding.seqs)}\n"
        )
        out.write(f"      {finding.message}\n")
        waste = finding.waste
        if waste.steps:
            extra = "".join(
                f", {value} {unit}"
                for value, unit in (
                    (waste.tokens, "tokens"),
                    (waste.cost, "cost"),
                    (waste.seconds, "s"),
                )
                if value is not None
            )
            out.write(f"      waste after the first warn: {waste.steps} steps{extra}\n")


def _record(source: str, run: detection.Run, result: detection.Analysis) -> dict:
    return {
        "source": source,
        "run_id": run.id,
        "format": run.format,
        "steps": result.steps,
        "tool_calls": result.tool_calls,
        "stall_score": result.stall_score,
        "verdict": result.verdict,
        "waste": result.waste.to_dict(),
        "findings": [
            {
                **{key: getattr(finding, key) for key in FINDING_KEYS},
                "seqs": list(finding.seqs),
                "fired_at": finding.fired_at,
                "rule": finding.rule,
                "message": finding.message,
                "waste": finding.waste.to_dict(),
            }
            for finding in result.findings
        ],
    }


def main(argv: list[str] | None = None) -> int:
    """Scan trace files; return 0 (all ok), 1 (a run flagged) or 2 (bad input)."""
    parser = argparse.ArgumentParser(prog="loopboard scan", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories")
    parser.add_argument("--format", choices=sorted(IMPORTERS), help="force a trace format")
    parser.add_argument("--policy", metavar="FILE", help="policy TOML (thresholds, tools)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run per line")
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    policy = None
    if args.policy:
        try:
            policy = detection.Policy.load(args.policy)
        except (OSError, ValueError) as exc:
            err.write(f"{args.policy}: {exc}\n")
            return 2
    bad = flagged = False
    for path in _files(args.paths):
        shown: set[str] = set()  # importers may repeat a file's warnings on each run
        try:
            for run in iter_runs(path, source=path, format=args.format):
                for warning in run.warnings:
                    if warning not in shown:
                        shown.add(warning)
                        err.write(f"warning: skipped {warning}\n")
                result = detection.analyze(run, policy)
                flagged |= result.verdict != "ok"
                if args.json:
                    out.write(json.dumps(_record(path, run, result), ensure_ascii=False) + "\n")
                else:
                    _print_human(out, path, run, result)
                out.flush()
        except TraceError as exc:
            bad = True
            err.write(f"error: {exc}\n")
        except OSError as exc:
            bad = True
            err.write(f"error: {path}: {exc.strerror or exc}\n")
    return 2 if bad else 1 if flagged else 0
