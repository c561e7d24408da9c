"""What every spooled format's long-run test asks: the same file read with its run held whole
and read through a spool of a small window gives the same run, step for step and finding
for finding."""

from __future__ import annotations

import detection
from detection.model import Run
from runs.importers import iter_runs
from runs.importers.kit import spool
from runs.importers.kit.spool import StepSpool

#: What a run says besides its steps: a spooled read must say the same.
FIELDS = ("id", "name", "metadata", "warnings", "skipped")


def held_and_spooled(
    data: bytes, monkeypatch, *, source: str, format: str, window: int = 32
) -> tuple[Run, Run]:
    """Return the file's one run read held whole and read through a spool of ``window``
    steps, after asserting that they are the same run and analyze alike."""
    monkeypatch.setattr(spool, "WINDOW", 100_000)
    (whole,) = iter_runs(data, source=source, format=format)
    monkeypatch.setattr(spool, "WINDOW", window)
    (spooled,) = iter_runs(data, source=source, format=format)
    assert isinstance(whole.steps, list)
    assert isinstance(spooled.steps, StepSpool)
    assert list(spooled.steps) == whole.steps
    assert [getattr(spooled, f) for f in FIELDS] == [getattr(whole, f) for f in FIELDS]
    assert detection.analyze(spooled).to_dict() == detection.analyze(whole).to_dict()
    return whole, spooled
