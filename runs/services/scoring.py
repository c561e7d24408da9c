"""Precision and recall of findings against people's labels (pure: no Django).

The back-test scores the current and the draft policy with it, and `loopboard scan --labels`
scores a scan, so it imports only the standard library. The rule:

- A finding *matches* a label when both belong to the same run and have the same detector
  and tool, and their step ranges overlap (first to last seq of the finding's steps against
  the label's; a finding without steps, such as a run's step budget, spans the whole run).
- Only warn and stop findings count; info findings are never a match.
- A real-loop label matched by a finding is a true positive (tp); a real-loop label that no
  finding matches is a false negative (fn, a missed loop).
- A false-alarm label matched by a finding is a false positive (fp); one that no finding
  matches is a true negative (tn, the false alarm is gone).
- Each label counts once, however many findings match it. Findings that match no label do
  not count: nobody said whether they were right.

precision = tp / (tp + fp), recall = tp / (tp + fn); None when the denominator is 0.

Run keys are whatever identifies a run on both sides, compared with ==: the run's id in the
database (`Label.run_id` and `Finding.run_id`), or its external id for a scan of trace files
against exported labels. The caller passes only the labels of the runs it scored: a label of a
run that was not analyzed would count as missed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WHOLE_RUN = (0, 2**63)
COUNTED = ("warn", "stop")
TOOL_CHARS = 200  # what a Finding row keeps of a tool name


@dataclass(frozen=True, slots=True)
class Judged:
    """One label as scoring reads it: which loop of which run, and whether it was real."""

    run: Hashable
    detector: str
    tool: str
    first: int | None  # None: a run-wide finding
    last: int | None
    real: bool

    @property
    def span(self) -> tuple[int, int]:
        if self.first is None:
            return WHOLE_RUN
        return (self.first, self.first if self.last is None else self.last)

    @classmethod
    def of(cls, label: Any) -> Judged:
        """Read a label row (a `runs.models.Label`, keyed by run id) or a Judged."""
        if isinstance(label, Judged):
            return label
        return cls(
            run=label.run_id,
            detector=label.detector,
            tool=label.tool or "",
            first=label.seq_first,
            last=label.seq_last,
            real=label.verdict == "real",
        )

    @classmethod
    def from_export(cls, row: Mapping[str, Any]) -> Judged:
        """Read one exported JSONL label (`labels.export`), keyed by the run's external id."""
        seqs = row.get("seqs") or [None, None]
        return cls(
            run=str(row["external_id"]),
            detector=str(row["detector"]),
            tool=str(row.get("tool") or ""),
            first=seqs[0],
            last=seqs[-1],
            real=row["verdict"] == "real",
        )


@dataclass(frozen=True, slots=True)
class Score:
    """How findings fared against labels (see the module's rule)."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @classmethod
    def of(cls, tp: int, fp: int, fn: int, tn: int = 0) -> Score:
        return cls(tp=tp, fp=fp, fn=fn, tn=tn)

    @property
    def labels(self) -> int:
        return self.tp + self.fp + self.fn + self.tn

    @property
    def precision(self) -> float | None:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "tn": self.tn,
            "labels": self.labels,
            "precision": self.precision,
            "recall": self.recall,
        }


def span_of(seqs: Sequence[int]) -> tuple[int, int]:
    """Return a finding's first and last step (the whole run when it names no step)."""
    return (min(seqs), max(seqs)) if seqs else WHOLE_RUN


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def matches(label: Judged, finding: Any) -> bool:
    """Whether a finding of the label's run is the loop it judges: the same detector and tool,
    overlapping steps. Severity aside (`score` counts warn and stop findings only); `score`
    applies the same rule through an index."""
    tool = (finding.tool or "")[:TOOL_CHARS]
    if (label.detector, label.tool) != (finding.detector, tool):
        return False
    return overlaps(label.span, span_of(finding.seqs))


def score(findings: Iterable[Any], labels: Iterable[Any]) -> Score:
    """Score findings against labels.

    `findings`: `(run_key, finding)` pairs, or finding rows with a `run_id`; a finding is a
    `detection.Finding` or anything with `detector`, `tool`, `severity` and `seqs`.
    `labels`: `Judged` values or label rows (see `Judged.of`).
    """
    spans: dict[tuple[Hashable, str, str], list[tuple[int, int]]] = defaultdict(list)
    for item in findings:
        run, finding = item if type(item) is tuple else (item.run_id, item)
        if finding.severity in COUNTED:
            key = (run, finding.detector, (finding.tool or "")[:TOOL_CHARS])
            seqs = finding.seqs  # span_of, inline: this loop sees every finding of a back-test
            spans[key].append((min(seqs), max(seqs)) if seqs else WHOLE_RUN)
    tp = fp = fn = tn = 0
    for label in map(Judged.of, labels):
        found = any(
            overlaps(span, label.span)
            for span in spans.get((label.run, label.detector, label.tool), ())
        )
        if label.real:
            tp, fn = (tp + 1, fn) if found else (tp, fn + 1)
        else:
            fp, tn = (fp + 1, tn) if found else (fp, tn + 1)
    return Score(tp=tp, fp=fp, fn=fn, tn=tn)
