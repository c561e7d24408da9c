"""`loopboard scan [--format F] [--policy FILE] [--json] PATH...`: find loops, no database.

Reads every trace format through runs.importers (no Django), analyses each run with the
detection engine and prints, per run, its verdict, stall score and findings.
Exit status: 0 every run ok, 1 some run warn/stop, 2 bad input (still reports the good files).

`--labels FILE` (JSON lines from `loopboard labels export`) scores the findings against
people's labels of the same runs, matched by run id (the label's `external_id`), and prints
precision and recall (with --json, as a last line `{"labels": FILE, "score": {...}}`).

`--explain-format` analyses nothing: it prints, per file, every format's score on the file's
first records and why, best first, and the format detection takes (exit 2 if none).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import TextIO

import detection
from runs.importers import (
    CLAIMANTS,
    HEURISTIC,
    IMPORTERS,
    TraceError,
    explain_format,
    iter_runs,
    open_trace,
)
from runs.importers.detect import sample_of
from runs.services.scoring import Judged, Score, score

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


def _since(finding: detection.Finding) -> str:
    """Return where the loop started and stopped, when that is not where it fired."""
    started = f", started at {finding.started_at}" if finding.started_at != finding.fired_at else ""
    stopped = (
        f", stop at {finding.stop_at}" if finding.stop_at not in (None, finding.fired_at) else ""
    )
    return started + stopped


def _print_human(out: TextIO, source: str, run: detection.Run, result: detection.Analysis) -> None:
    label = run.id if os.path.basename(source) == run.id else f"{source} :: {run.id}"
    out.write(
        f"{result.verdict.upper():5} {label}  stall {result.stall_score:.2f}  "
        f"({result.steps} steps, {result.tool_calls} tool calls)\n"
    )
    read_by = run.metadata.get("read_by")
    if isinstance(read_by, dict) and read_by.get("heuristic"):
        out.write(f"  {read_by.get('summary', 'read heuristically')}\n")
    if result.unknown_args or result.unknown_results:
        out.write(
            f"  unknown values: {result.unknown_args} of {result.tool_calls} calls have no "
            f"arguments, {result.unknown_results} no result in the trace (never taken for the "
            "same call or result)\n"
        )
    for finding in result.findings:
        out.write(
            f"  [{finding.severity}] {finding.detector} {finding.tool or ''} "
            f"{finding.count}>={finding.threshold} ({finding.rule}) at step {finding.fired_at}"
            f"{_since(finding)}; "
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
            out.write(f"      waste (the loop's own steps after it warned): {waste.steps}{extra}\n")


def _record(source: str, run: detection.Run, result: detection.Analysis) -> dict:
    return {
        "source": source,
        "run_id": run.id,
        "format": run.format,
        "steps": result.steps,
        "tool_calls": result.tool_calls,
        "stall_score": result.stall_score,
        "verdict": result.verdict,
        "read_by": run.metadata.get("read_by"),
        "waste": result.waste.to_dict(),
        "unknown_args": result.unknown_args,
        "unknown_results": result.unknown_results,
        "findings": [
            {
                **{key: getattr(finding, key) for key in FINDING_KEYS},
                "seqs": list(finding.seqs),
                "started_at": finding.started_at,
                "fired_at": finding.fired_at,
                "stop_at": finding.stop_at,
                "rule": finding.rule,
                "message": finding.message,
                "waste": finding.waste.to_dict(),
            }
            for finding in result.findings
        ],
    }


def read_labels(path: str) -> list[Judged]:
    """Read exported labels (JSON lines); raise ValueError naming the line that is wrong."""
    judged = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                judged.append(Judged.from_export(json.loads(line)))
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                raise ValueError(f"line {number}: not an exported label ({exc})") from exc
    return judged


def _score_line(path: str, result: Score, used: int, total: int) -> str:
    shown = {"precision": result.precision, "recall": result.recall}
    figures = ", ".join(f"{k} {'-' if v is None else f'{v:.2f}'}" for k, v in shown.items())
    return (
        f"labels {path}: {figures} (tp {result.tp}, fp {result.fp}, fn {result.fn}, "
        f"tn {result.tn}; {used} of {total} labels are on the scanned runs)\n"
    )


def _explain(paths: list[str], out: TextIO, err: TextIO, *, as_json: bool) -> int:
    """Print each file's format scores, best first; return 2 if a file fits no format."""
    unknown = False
    for path in _files(paths):
        try:
            stream, head = open_trace(path, source=path)
            stream.close()
        except (TraceError, OSError) as exc:
            unknown = True
            err.write(f"error: {exc}\n")
            continue
        sample = sample_of(head)
        verdict = explain_format(head)
        chosen = verdict.best[0] if verdict.best else None
        unknown |= chosen is None
        heuristic = {name: CLAIMANTS[name](sample) for name in HEURISTIC if name in CLAIMANTS}
        if as_json:
            claims = [
                {"format": name, "score": round(claim.score, 3), "reason": claim.reason}
                for name, claim in verdict.claims
            ]
            offered = [
                {"format": name, "score": round(claim.score, 3), "reason": claim.reason}
                for name, claim in heuristic.items()
            ]
            record = {"source": path, "layout": sample.layout, "format": chosen}
            record |= {"claims": claims, "by_name_only": offered}
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            continue
        out.write(f"{path}: {sample.layout}, {len(sample.records)} records read from the start\n")
        out.write("  " + verdict.explain().replace("\n", "\n  ") + "\n")
        for name, claim in heuristic.items():
            out.write(f"  ({name}, only by --format {name}: {claim.score:.2f} {claim.reason})\n")
        out.write(f"  -> {chosen or 'no format fits'}\n")
    return 2 if unknown else 0


def main(argv: list[str] | None = None) -> int:
    """Scan trace files; return 0 (all ok), 1 (a run flagged) or 2 (bad input)."""
    parser = argparse.ArgumentParser(prog="loopboard scan", description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files or directories")
    parser.add_argument("--format", choices=sorted(IMPORTERS), help="force a trace format")
    parser.add_argument("--policy", metavar="FILE", help="policy TOML (thresholds, tools)")
    parser.add_argument("--json", action="store_true", help="one JSON object per run per line")
    parser.add_argument(
        "--labels",
        metavar="FILE",
        help="exported labels (JSON lines) to score the findings against: precision, recall",
    )
    parser.add_argument(
        "--explain-format",
        action="store_true",
        help="print every format's score on each file and why; analyse nothing",
    )
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.explain_format:
        return _explain(args.paths, out, err, as_json=args.json)
    policy = None
    if args.policy:
        try:
            policy = detection.Policy.load(args.policy)
        except (OSError, ValueError) as exc:
            err.write(f"{args.policy}: {exc}\n")
            return 2
    labels: list[Judged] | None = None
    if args.labels:
        try:
            labels = read_labels(args.labels)
        except (OSError, ValueError) as exc:
            err.write(f"{args.labels}: {exc}\n")
            return 2
    scanned: set[str] = set()
    found: list[tuple[str, detection.Finding]] = []
    bad = flagged = False
    for path in _files(args.paths):
        shown: set[str] = set()  # importers may repeat a file's warnings on each run
        try:
            for run in iter_runs(path, source=path, format=args.format):
                for warning in run.warnings:
                    if warning not in shown:
                        shown.add(warning)
                        err.write(f"warning: skipped {warning}\n")
                result = detection.analyze(run, policy, ledger=False)  # no ledger is shown
                flagged |= result.verdict != "ok"
                if labels is not None:
                    key = run.id[:255]  # as much as a stored run's external_id keeps
                    scanned.add(key)
                    found.extend((key, finding) for finding in result.findings)
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
    if labels is not None:  # only the labels of the runs scanned: the others were not looked at
        mine = [label for label in labels if label.run in scanned]
        scored = score(found, mine)
        if args.json:
            record = {"labels": args.labels, "score": scored.to_dict()}
            out.write(json.dumps(record | {"ignored": len(labels) - len(mine)}) + "\n")
        else:
            out.write(_score_line(args.labels, scored, len(mine), len(labels)))
    return 2 if bad else 1 if flagged else 0
