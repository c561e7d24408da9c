"""Detection of Gemini CLI files by evidence: stream-json, the JSONL chat recording, the `.json`.

The case that drove the change: a JSONL chat recording (Gemini CLI 0.40+, notes §3.27) begins
with a metadata line, not an object with `messages`, so the old sniffer of the `.json` form
did not know it and the file was read as something else or not at all.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import detect_format, explain_format, gemini
from runs.importers.detect import sample_of

DATA = Path(__file__).resolve().parents[1] / "data" / "importers"


def jsonl(*records) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in records)


META = {
    "sessionId": "s-1",
    "projectHash": "ab" * 32,
    "startTime": "2026-01-01T00:00:00Z",
    "lastUpdated": "2026-01-01T00:00:00Z",
    "kind": "main",
}
USER = {"id": "u1", "timestamp": "2026-01-01T00:00:01Z", "type": "user", "content": "hi"}
GEMINI = {"id": "g1", "timestamp": "2026-01-01T00:00:02Z", "type": "gemini", "content": "ok"}


def chat_score(data: bytes) -> float:
    return gemini.chat.claim(sample_of(data)).score


def test_jsonl_recording_is_claimed_by_its_metadata_line():
    data = (DATA / "gemini_chat_session.jsonl").read_bytes()
    verdict = explain_format(data)
    name, claim = verdict.claims[0]
    assert name == "gemini-chat" and claim.score == 0.95
    assert "metadata line (sessionId, projectHash, startTime, lastUpdated, kind)" in claim.reason
    assert verdict.claims[1][1].score <= 0.5, verdict.explain()


def test_a_new_session_with_only_its_metadata_line():
    claim = gemini.chat.claim(sample_of(jsonl(META)))
    assert claim.score == 0.9 and "metadata line" in claim.reason
    assert detect_format(jsonl(META)) == "gemini-chat"


def test_records_without_the_metadata_line_still_fit_on_gemini_only_records():
    # 3 records: all chat records, one a `gemini` message, one a $rewindTo
    data = jsonl(USER, GEMINI, {"$rewindTo": "u1"})
    claim = gemini.chat.claim(sample_of(data))
    assert claim.score == pytest.approx(0.85) and "only Gemini writes" in claim.reason
    assert detect_format(data) == "gemini-chat"


def test_user_records_alone_are_only_a_weak_fit():
    # {id, type: user} alone could be anything: 0.3 at most, below a format's real claim
    assert chat_score(jsonl(USER, {**USER, "id": "u2"})) == pytest.approx(0.3)


def test_claude_code_records_are_not_a_chat_recording():
    record = {"type": "user", "uuid": "a", "parentUuid": None, "sessionId": "s", "message": {}}
    assert chat_score(jsonl(record, {**record, "uuid": "b"})) == 0


def test_json_recording_object():
    data = (DATA / "gemini_chat.json").read_bytes()
    claim = gemini.chat.claim(sample_of(data))
    assert claim.score == 0.95 and "sessionId, projectHash and messages" in claim.reason
    # cut inside the first message: still the object's own keys
    assert chat_score(data[:400]) == 0.95
    # no projectHash, but `gemini` messages: a weaker claim
    assert chat_score(json.dumps({"sessionId": "s", "messages": [GEMINI]}).encode()) == 0.8
    no = gemini.chat.claim(sample_of(b'{"sessionId": "s", "messages": "x"}'))
    assert no.score == 0 and "not an array" in no.reason


def test_stream_json_claim_and_its_reason_for_a_no():
    data = (DATA / "gemini_stream.jsonl").read_bytes()
    claim = gemini.stream.claim(sample_of(data))
    assert claim.score == pytest.approx(0.95) and "init with session_id" in claim.reason
    plain = jsonl({"type": "message", "role": "user", "content": "hi", "timestamp": "t"})
    no = gemini.stream.claim(sample_of(plain))
    assert no.score == 0 and "no `init` with session_id" in no.reason
    assert gemini.stream.claim(sample_of(jsonl(META))).reason.startswith("no record")


def test_the_two_gemini_formats_do_not_claim_each_other():
    stream = (DATA / "gemini_stream.jsonl").read_bytes()
    chat = (DATA / "gemini_chat_session.jsonl").read_bytes()
    assert chat_score(stream) == 0
    assert gemini.stream.claim(sample_of(chat)).score == 0
