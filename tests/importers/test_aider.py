"""Aider chat histories: the afi-core sample and small histories written from the notes."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from runs.importers import TraceError, detect_format, explain_format, iter_runs

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "traces" / "aider"
SAMPLE = SAMPLE / "afi-core.aider.chat.history.md"


def calls(run):
    return [step for step in run.steps if step.kind == "tool_call"]


def test_the_afi_core_history():
    runs = list(iter_runs(SAMPLE))
    # the shared README: 9 sessions (`grep -c '^# aider chat started'`)
    assert len(runs) == 9
    found = [step for run in runs for step in calls(run)]
    tools = Counter(step.tool for step in found)
    # 28 `<<<<<<< SEARCH` lines, one of them quoted in aider's reflection: 27 edit blocks;
    # 10 `> Running <cmd>` lines: 10 shell calls
    assert tools == {"edit": 27, "shell": 10}
    # the one "SEARCH/REPLACE block failed to match" (session 6)
    (failed,) = [step for step in found if step.status == "error"]
    assert failed.args["path"] == "cli_hooks/validator_invoker.ts"
    assert "SearchReplaceNoExactMatch" in failed.result
    # "The other 2 SEARCH/REPLACE blocks were applied successfully"
    session6 = calls(runs[5])
    assert [s.result for s in session6 if s.args.get("path") == "tests/poi_validator.test.ts"] == [
        "applied",
        "applied",
    ]
    # its retry is a new edit of the same file, applied
    retry = next(s for s in session6 if s.args.get("search", "").startswith("// Invokes"))
    assert retry.status == "ok" and retry.result.startswith("Applied edit to")
    assert runs[1].metadata["commits"] == ["dde0244"]
    assert runs[0].metadata["model"] == "gpt-4o" and runs[0].metadata["edit_format"] == "diff"


def test_tokens_and_cost():
    first = next(iter(iter_runs(SAMPLE)))
    reply = next(s for s in first.steps if s.kind == "assistant")
    # "> Tokens: 3.2k sent, 21 received. Cost: $0.0082 message, $0.0082 session."
    assert (reply.tokens_in, reply.tokens_out, reply.cost) == (3200, 21, 0.0082)
    assert first.steps[0].started_at is not None  # the session header's time
    assert first.steps[-1].text == "interrupted (^C)"


HISTORY = """
# aider chat started at 2025-01-02 10:00:00

> Aider v0.86.0
> Main model: claude-3-7-sonnet with diff edit format

#### fix the loop
#### in app.py

app.py
```python
<<<<<<< SEARCH
for i in range(n + 1):
=======
for i in range(n):
>>>>>>> REPLACE
```

> Tokens: 1.5k sent, 40 received. Cost: $0.01 message, $0.01 session.
> The LLM did not conform to the edit format.
> # 1 SEARCH/REPLACE block failed to match!

## SearchReplaceNoExactMatch: This SEARCH block failed to exactly match lines in app.py
Just reply with fixed versions of the block above that failed to match.

> Only 3 reflections allowed, stopping.

#### /run pytest

```bash
pytest -q
```

> pytest -q
> Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]: n
"""


def test_reflection_limit_and_declined_command(tmp_path):
    path = tmp_path / ".aider.chat.history.md"
    path.write_text(HISTORY)
    assert detect_format(path.read_bytes()) == "aider"
    (run,) = iter_runs(path)
    edit, shell = calls(run)
    assert edit.status == "error" and edit.args["path"] == "app.py"
    assert shell.args == {"command": "pytest -q"} and shell.result == "declined by the user"
    user = next(s for s in run.steps if s.kind == "user")
    assert user.text == "fix the loop\nin app.py"  # consecutive #### lines: one message
    assert any(s.kind == "system" and s.text.startswith("[user action] /run") for s in run.steps)
    assert any(s.kind == "system" and "Only 3 reflections" in s.text for s in run.steps)


def test_invalid_utf8_line_is_skipped_and_counted(tmp_path):
    path = tmp_path / "h.md"
    path.write_bytes(HISTORY.encode().replace(b"fix the loop", b"fix the \xff loop"))
    (run,) = iter_runs(path, format="aider")
    assert run.skipped == 1 and "invalid UTF-8" in run.warnings[0]


def test_empty_file():
    with pytest.raises(TraceError, match="empty"):
        list(iter_runs(b"\n\n", format="aider"))


def test_detection():
    best, claim = explain_format(SAMPLE.read_bytes()[:65536]).claims[0]
    assert best == "aider" and "aider chat started" in claim.reason
    claim = dict(explain_format(b"# Notes\n\nsome text\n").claims)["aider"]
    assert claim.score == 0
