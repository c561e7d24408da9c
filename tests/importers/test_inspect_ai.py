"""Inspect AI eval logs: the `.json` and `.eval` samples, and a `.json` log from the notes."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest

from runs.importers import TraceError, detect_format, explain_format, iter_runs
from runs.importers.reading import Limits

DATA = Path(__file__).resolve().parents[1] / "data"
SAMPLES = DATA / "traces" / "inspect-ai"
BROWSER = SAMPLES / "2025-05-12T20-27-36-04-00_browser.json"
EVAL_ZIP = SAMPLES / "log_message_deduplication.eval"
ERRORS = DATA / "importers" / "inspect_ai_errors.json"  # written from the notes §3.18


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_the_browser_log():
    (run,) = iter_runs(BROWSER)  # 1 sample
    found = calls(run)
    # the shared README: 4 tool events (web_browser_go, then web_browser_click 3×)
    assert [s.tool for s in found] == ["web_browser_go"] + ["web_browser_click"] * 3
    assert [s.args for s in found] == [
        {"url": "https://www.aisi.gov.uk/"},
        {"element_id": 151},
        {"element_id": 884},
        {"element_id": 903},
    ]
    assert all(s.status == "ok" for s in found)
    assert found[0].batch_id == "Ygng6oBbbLpQSY59fm83pB"  # the model message that asked
    # 5 model events: 4 ask for a call (tokens go to the call), the last answers in text
    # that is an attachment, resolved; usage 5915 + cache read 3840 in, 207 out
    answer = run.steps[-1]
    assert answer.kind == "assistant" and answer.text.startswith("The AI Security Institute")
    assert (answer.tokens_in, answer.tokens_out) == (5915 + 3840, 207)
    assert run.steps[0].kind == "user" and "aisi.gov.uk" in run.steps[0].text
    assert run.id == "ZB2vu5GNujYaBdPSReCeop/1/epoch-1"
    assert run.metadata["model"] == "openai/gpt-4o-mini" and run.metadata["log_version"] == 2


def test_the_eval_zip_v3():
    (run,) = iter_runs(EVAL_ZIP)
    found = calls(run)
    # the shared README: `bash {"cmd": "ls"}` 5× with the identical result, then "done"
    assert [(s.tool, s.args) for s in found] == [("bash", {"cmd": "ls"})] * 5
    assert len({s.result for s in found}) == 1 and all(s.status == "ok" for s in found)
    assert run.steps[-1].text == "done"
    # the first user message came from sample_init; the v3 pool rebuilds model inputs
    assert run.steps[0].kind == "user" and run.steps[0].text == "Guess the number"
    assert run.metadata["log_version"] == 3


def test_errors_fixture():
    first, second = iter_runs(ERRORS)
    found = calls(first)
    assert [(s.tool, s.status) for s in found] == [
        ("bash", "error"),  # a traceback in the result text
        ("bash", "error"),  # error.type timeout
        ("pyhton", "invalid"),  # error.type parsing: the call could not be made
        ("web_search", "ok"),  # inside the "researcher" agent span
    ]
    opener = next(s for s in first.steps if s.text == "agent researcher")
    assert found[3].parent_id == opener.id
    assert found[3].result == "Division by zero happens when the divisor is 0."  # attachment
    assert first.steps[1].text == "Fix the bug in app.py"  # attachment in the init state
    assert any(s.text == "limit message: Message limit 10 exceeded" for s in first.steps)
    assert first.metadata["scores"] == {"includes": "I"}
    # the sample without events is read from its messages
    assert [(s.tool, s.status) for s in calls(second)] == [("bash", "error"), ("bash", "ok")]
    assert second.steps[-1].text == "sample error: RuntimeError: sandbox gone"


def zipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_bomb_stops_at_the_limit():
    sample = json.dumps({"id": 1, "epoch": 1, "events": [], "messages": [], "pad": "0" * 200_000})
    data = zipped({"header.json": b'{"version": 2, "eval": {"task": "t", "model": "m"}}',
                   "samples/1_epoch_1.json": sample.encode()})  # fmt: skip
    assert len(data) < 10_000
    with pytest.raises(TraceError, match="inflate past the limit"):
        list(iter_runs(data, limits=Limits(max_bytes=100_000)))


def test_a_truncated_zip_fails_clearly():
    data = EVAL_ZIP.read_bytes()
    with pytest.raises(TraceError, match="zip"):
        list(iter_runs(data[: len(data) // 2], format="inspect-ai"))


def test_a_bad_sample_member_is_reported_not_fatal():
    data = zipped({"header.json": b'{"version": 2, "eval": {"task": "t", "model": "m"}}',
                   "samples/1_epoch_1.json": b'{"id": 1, "events": [',
                   "samples/2_epoch_1.json": b'{"id": 2, "epoch": 1, "messages": []}'})  # fmt: skip
    broken, good = iter_runs(data)
    assert broken.skipped == 1 and "truncated" in broken.warnings[0]
    assert good.id.endswith("/2/epoch-1")


def test_detection():
    assert detect_format(EVAL_ZIP.read_bytes()[:65536]) == "inspect-ai"
    best, claim = explain_format(EVAL_ZIP.read_bytes()[:65536]).claims[0]
    assert "_journal/start.json" in claim.reason
    assert detect_format(BROWSER.read_bytes()[:65536]) == "inspect-ai"


def test_an_eval_zip_member_that_inflates_far_past_the_cap_is_refused_in_bounded_memory():
    """A sample member of 256 MiB (whitespace inside valid JSON: it deflates about 1000:1)
    against a cap of 32 MiB: refused at the cap, without holding the member (the reader
    used to read up to the cap into memory, 2 GB by default)."""
    import tracemalloc

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("header.json", b'{"version": 2, "eval": {"task": "t", "model": "m"}}')
        with archive.open("samples/1_epoch_1.json", "w") as member:
            member.write(b'{"id": 1, "epoch": 1, "events": [], "messages": []')
            for _ in range(256):
                member.write(b" " * (1 << 20))
            member.write(b"}")
    data = buffer.getvalue()
    assert len(data) < 1 << 20  # a bomb of modest real size
    tracemalloc.start()
    try:
        with pytest.raises(TraceError, match="inflate past the limit of 33554432 bytes"):
            list(iter_runs(data, limits=Limits(max_bytes=32 << 20)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"peak {peak / 1e6:.1f} MB while inflating"
