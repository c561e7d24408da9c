"""The demo's times, as a new user reads them on Issues ('Last seen') and the runs list: the
made-up samples ran on one day, and none at a midnight of 1 January, which reads as a
placeholder date (the OTLP sample's generator started its clock at 2026-01-01 00:00:00)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from runs.importers import iter_runs

DEMO = Path(__file__).resolve().parents[2] / "runs" / "demo"


def starts() -> dict[str, datetime]:
    """The start of each demo run that carries times, by its name."""
    found = {}
    for path in sorted(DEMO.iterdir()):
        if not path.is_file() or path.suffix in (".md", ".py"):
            continue
        for run in iter_runs(path.read_bytes(), source=path.name):
            times = [step.started_at for step in run.steps if step.started_at]
            if times:
                found[run.name] = datetime.fromtimestamp(min(times), UTC)
    return found


def test_no_demo_run_starts_at_a_new_years_midnight():
    runs = starts()
    assert len(runs) >= 9
    placeholders = {name: t for name, t in runs.items() if (t.month, t.day, t.hour) == (1, 1, 0)}
    assert placeholders == {}


def test_the_otlp_sample_ran_on_the_day_of_the_other_made_up_samples():
    runs = starts()
    otlp = [t for name, t in runs.items() if name.startswith("loopbench-agent")]
    assert len(otlp) == 3
    assert {t.date() for t in otlp} == {runs["research-agent-stuck.jsonl"].date()}
