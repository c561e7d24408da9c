"""Files the way tools write them: evidence past the head, records another tool wrapped, and
text encodings (a UTF-8 or UTF-16 byte-order mark, CRLF line ends, encodings not read).

Fixtures are generated here from the hand-written importer fixtures in tests/data/importers
(written from shared/traces/README.md §3.14, §3.15, §3.17, shapes of §3.28)."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path

import pytest

from loopboard.cli import scan
from runs.importers import TraceError, detect_format, iter_runs
from runs.importers.detect import HEAD_BYTES

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
TAU2 = DATA / "tau2_results.json"
COPILOT = DATA / "copilot_cli_events.jsonl"
AGENTS = DATA / "openai_agents_trace.jsonl"


def outline(runs) -> list:
    """What a run's import shows: its id, format and each step's kind, tool, args and status."""
    return [
        (run.id, run.format, [(s.kind, s.tool, s.args, s.status, s.result) for s in run.steps])
        for run in runs
    ]


# --- evidence past the head


def late_tau2() -> bytes:
    """A tau2 Results file whose `simulations` start past 600 KB of `info` and `tasks`."""
    results = json.loads(TAU2.read_bytes())
    policy = "Agents must verify the customer's identity before any change. " * 5000
    tasks = [
        {"id": f"task-{n}", "description": {"purpose": "x" * 2000}, "user_scenario": {}}
        for n in range(150)
    ]
    doc = {
        "timestamp": results["timestamp"],
        "info": {**results["info"], "environment_info": {"policy": policy}},
        "tasks": tasks,
        "simulations": results["simulations"],
    }
    data = json.dumps(doc, indent=2).encode()
    assert data.index(b'"simulations"') > 600_000
    return data


def test_a_tau2_file_whose_simulations_come_late_is_detected_and_imported(tmp_path):
    data = late_tau2()
    with pytest.raises(TraceError, match="unknown trace format"):
        detect_format(data[:HEAD_BYTES])  # the head alone shows no simulation
    runs = list(iter_runs(data, source="late.json"))
    assert outline(runs) == outline(iter_runs(TAU2, source="late.json"))
    assert [run.format for run in runs] == ["tau2", "tau2"]
    path = tmp_path / "late.json"
    path.write_bytes(data)
    assert outline(iter_runs(path, source="late.json")) == outline(runs)  # a path
    stream = io.BytesIO(b"ignored" + data)
    stream.seek(len(b"ignored"))
    assert outline(iter_runs(stream, source="late.json")) == outline(runs)  # a seekable stream


def chat_with_a_long_first_message() -> dict:
    long = "Here is the whole log you asked about:\n" + "line of log output\n" * 3800
    return {
        "messages": [
            {"role": "user", "content": long},
            *[
                message
                for n in range(3)
                for message in (
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{n}",
                                "type": "function",
                                "function": {"name": "read_file", "arguments": '{"path": "a"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": f"call_{n}", "content": "Error: not found"},
                )
            ],
        ]
    }


def test_a_chat_export_whose_first_message_is_over_64_kib_is_detected_and_imported():
    doc = chat_with_a_long_first_message()
    data = json.dumps(doc).encode()
    assert len(json.dumps(doc["messages"][0])) > 70_000
    (run,) = iter_runs(data, source="chat.json")
    assert run.format == "chat"
    calls = [s for s in run.steps if s.kind == "tool_call"]
    assert [(c.tool, c.args, c.status) for c in calls] == [
        ("read_file", {"path": "a"}, "error")
    ] * 3


def test_a_big_document_the_head_already_decides_is_read_once():
    """A claim on the head above a general shape is kept: no second pass (a stream that
    cannot seek is read as it comes)."""

    class OneWay(io.RawIOBase):
        def __init__(self, data: bytes) -> None:
            self.inner = io.BytesIO(data)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            data = self.inner.read(len(buffer))
            buffer[: len(data)] = data
            return len(data)

    doc = chat_with_a_long_first_message()
    doc["messages"].insert(0, {"role": "system", "content": "be brief"})
    doc["messages"].insert(1, {"role": "tool", "tool_call_id": "x", "content": "ok"})
    (run,) = iter_runs(io.BufferedReader(OneWay(json.dumps(doc).encode())), source="c.json")
    assert run.format == "chat"


# --- envelopes


def test_copilot_events_wrapped_under_raw_line_by_line_are_unwrapped():
    lines = [json.loads(line) for line in COPILOT.read_text().splitlines() if line.strip()]
    wrapped = "".join(
        json.dumps({"role": "", "content": "", "timestamp": event.get("timestamp"), "raw": event})
        + "\n"
        for event in lines
    ).encode()
    (run,) = iter_runs(wrapped, source="wrapped.jsonl")
    assert run.format == "copilot-cli"
    assert outline([run]) == outline(iter_runs(COPILOT, source="wrapped.jsonl"))


@pytest.mark.parametrize("key", ["raw", "event", "data", "payload", "record"])
def test_every_record_key_unwraps_jsonl_and_json_arrays(key):
    lines = [json.loads(line) for line in COPILOT.read_text().splitlines() if line.strip()]
    expected = outline(iter_runs(COPILOT, source="w"))
    jsonl = "".join(json.dumps({"ts": 1, key: event}) + "\n" for event in lines).encode()
    assert outline(iter_runs(jsonl, source="w")) == expected
    array = json.dumps([{"ts": 1, key: event} for event in lines], indent=1).encode()
    assert outline(iter_runs(array, source="w")) == expected


@pytest.mark.parametrize("key", ["traces", "runs", "items"])
def test_agents_sdk_records_in_a_document_list_are_unwrapped(key):
    records = [json.loads(line) for line in AGENTS.read_text().splitlines() if line.strip()]
    doc = {key: records, "timestamp": "2025-07-01T12:00:00Z", "count": len(records)}
    runs = list(iter_runs(json.dumps(doc).encode(), source="export.json"))
    assert outline(runs) == outline(iter_runs(AGENTS, source="export.json"))
    assert [run.format for run in runs] == ["openai-agents", "openai-agents"]


def test_a_big_wrapped_document_streams_its_records():
    """Records under `traces` past the head: detected from the outline, read as a stream."""
    records = [json.loads(line) for line in AGENTS.read_text().splitlines() if line.strip()]
    doc = {"timestamp": "2025", "note": "n" * 100_000, "traces": records, "count": 10}
    runs = list(iter_runs(json.dumps(doc).encode(), source="big.json"))
    assert outline(runs) == outline(iter_runs(AGENTS, source="big.json"))


def test_a_payload_document_under_data_is_unwrapped():
    doc = json.loads(TAU2.read_bytes())
    wrapped = json.dumps({"data": doc, "exported_at": "2026-01-01"}).encode()
    assert outline(iter_runs(wrapped, source="t.json")) == outline(iter_runs(TAU2, source="t.json"))


def test_formats_with_these_keys_of_their_own_are_not_unwrapped():
    """The Agents SDK batch `{"data": [...]}` and Managed Agents' `{"data": [...]}` are their
    own formats: detection takes them as they are."""
    records = [json.loads(line) for line in AGENTS.read_text().splitlines() if line.strip()]
    assert detect_format(json.dumps({"data": records}).encode()) == "openai-agents"
    managed = DATA / "managed_agents_events.json"
    assert [run.format for run in iter_runs(managed)] == ["managed-agents"] * len(
        list(iter_runs(managed))
    )


def test_an_envelope_of_nothing_known_is_still_unknown():
    data = b"".join(json.dumps({"raw": {"x": n}}).encode() + b"\n" for n in range(5))
    with pytest.raises(TraceError, match="unknown trace format"):
        list(iter_runs(data, source="w.jsonl"))


# --- encodings

JSONL = COPILOT.read_bytes()
DOCUMENT = TAU2.read_bytes()


def crlf(data: bytes) -> bytes:
    return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


ENCODINGS = {
    "utf-8 with a BOM": lambda data: codecs.BOM_UTF8 + data,
    "utf-16 le with a BOM": lambda data: codecs.BOM_UTF16_LE + data.decode().encode("utf-16-le"),
    "utf-16 be with a BOM": lambda data: codecs.BOM_UTF16_BE + data.decode().encode("utf-16-be"),
    "crlf": crlf,
    "utf-16 le, crlf": lambda data: codecs.BOM_UTF16_LE + crlf(data).decode().encode("utf-16-le"),
}


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
@pytest.mark.parametrize("plain", [JSONL, DOCUMENT], ids=["jsonl", "json"])
def test_encodings_read_like_plain_utf8(plain, encode, tmp_path):
    data = encode(plain)
    assert data != plain
    expected = outline(iter_runs(plain, source="f"))
    got = list(iter_runs(data, source="f"))
    assert outline(got) == expected
    assert not any(run.skipped for run in got)  # the first line is not lost to the BOM
    path = tmp_path / "f"
    path.write_bytes(data)
    assert outline(iter_runs(path, source="f")) == expected


@pytest.mark.parametrize("encode", ENCODINGS.values(), ids=ENCODINGS.keys())
def test_scan_reads_every_encoding(encode, tmp_path, capsys):
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode(JSONL))
    status = scan.main([str(path), "--json"])
    out, err = capsys.readouterr()
    assert status in (0, 1), err
    (record,) = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert record["format"] == "copilot-cli" and "line" not in err  # no line skipped
    assert scan.main(["--explain-format", str(path)]) == 0
    assert "-> copilot-cli" in capsys.readouterr().out


def test_encodings_that_are_not_read_say_what_they_are():
    text = JSONL.decode()
    with pytest.raises(TraceError, match="UTF-16 LE without a byte-order mark"):
        list(iter_runs(text.encode("utf-16-le"), source="f"))
    with pytest.raises(TraceError, match="UTF-16 BE without a byte-order mark"):
        list(iter_runs(text.encode("utf-16-be"), source="f"))
    with pytest.raises(TraceError, match="UTF-32"):
        list(iter_runs(text.encode("utf-32"), source="f"))
    latin = "Ergebnis: Größe überschritten, bitte prüfen\n".encode("latin-1") * 3
    with pytest.raises(TraceError, match=r"not UTF-8: byte 0xf6 at offset 12"):
        list(iter_runs(latin, source="f"))
    broken = codecs.BOM_UTF16_LE + text[:200].encode("utf-16-le") + b"\x00\xdc" + b"{\x00"
    with pytest.raises(TraceError, match=r"invalid UTF-16-LE text at byte 40[0-9]"):
        list(iter_runs(broken, source="f"))
