"""Registry: formats are detected from content (never the file name), forcing works, unknown
input fails listing what was tried, and the sniffers of this batch claim no one else's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runs.importers import IMPORTERS, iter_runs
from runs.importers.errors import TraceError

SHARED = Path(__file__).resolve().parents[1] / "data" / "traces"  # real samples, see its README
DATA = Path(__file__).resolve().parents[1] / "data" / "importers"
MINE = {"chat", "responses", "anthropic", "otlp", "tree"}

SAMPLES = {
    "chat": json.dumps(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
        ]
    ).encode(),
    "responses": json.dumps(
        [{"type": "function_call", "call_id": "1", "name": "f", "arguments": "{}"}]
    ).encode(),
    "anthropic": json.dumps(
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "1", "name": "f", "input": {}}],
                }
            ]
        }
    ).encode(),
    "tree": json.dumps({"type": "think", "thought": "x", "children": []}).encode(),
    "native": b'{"type": "tool_call", "tool": "f", "args": {}}\n',
}


@pytest.mark.parametrize("format", sorted(SAMPLES))
def test_format_comes_from_content_not_the_file_name(tmp_path, format):
    path = tmp_path / "misleading.otlp.jsonl"
    path.write_bytes(SAMPLES[format])
    (run,) = iter_runs(path)
    assert run.format == format


def test_a_forced_format_is_used():
    (run,) = iter_runs(SAMPLES["chat"], source="x", format="chat")
    assert run.format == "chat"
    with pytest.raises(TraceError):
        list(iter_runs(SAMPLES["chat"], source="x", format="otlp"))


def test_unknown_format_lists_what_was_tried():
    with pytest.raises(TraceError) as info:
        list(iter_runs(b"just some text\n", source="notes.txt"))
    assert "unknown trace format" in str(info.value)
    assert all(name in str(info.value) for name in IMPORTERS)
    with pytest.raises(TraceError, match="known:"):
        list(iter_runs(SAMPLES["chat"], source="x", format="nope"))


def test_my_formats_are_registered_before_native():
    names = list(IMPORTERS)
    assert set(names) >= MINE
    assert names.index("responses") < names.index("native")
    assert names.index("anthropic") < names.index("chat")


@pytest.mark.parametrize(
    "path", sorted(p for p in SHARED.rglob("*") if p.is_file() and p.suffix != ".md")
)
def test_other_teams_samples_are_not_claimed_by_these_sniffers(path):
    head = path.read_bytes()[:65536]
    for name in MINE:
        assert not IMPORTERS[name].sniff(head), f"{name} claims {path.name}"


OURS = ("otlp_", "chat_", "tree_", "responses_", "anthropic_")


@pytest.mark.parametrize("path", sorted(p for p in DATA.iterdir() if not p.name.startswith(OURS)))
def test_fixtures_of_other_formats_are_not_claimed(path):
    head = path.read_bytes()[:65536]
    for name in MINE:
        assert not IMPORTERS[name].sniff(head), f"{name} claims {path.name}"
