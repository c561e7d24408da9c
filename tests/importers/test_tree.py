"""Generic tree JSON importer (`tree`), on ThinkNode/ToolNode-style trees built here."""

from __future__ import annotations

import gzip
import json

import pytest

from runs.importers import detect_format, iter_runs
from runs.importers.errors import TraceError
from runs.importers.reading import Limits

TREE = {
    "type": "ThinkNode",
    "id": "root",
    "thought": "plan the fix",
    "children": [
        {
            "type": "ToolNode",
            "name": "search",
            "args": '{"q": "bug"}',
            "result": "3 hits",
            "children": [{"type": "think", "thought": "open the first", "children": []}],
        },
        {
            "type": "ToolNode",
            "id": "root",
            "tool": "edit",
            "input": {"path": "a"},
            "error": "permission denied",
            "children": [],
        },
        {"node_type": "llm", "content": "done", "tokens_in": 5, "children": []},
    ],
}


def parse(data: bytes, source: str = "tree.json", **kwargs):
    return list(iter_runs(data, source=source, **kwargs))


def test_nodes_become_steps_with_parent_ids():
    (run,) = parse(json.dumps(TREE).encode())
    assert run.format == "tree"
    assert [(s.kind, s.id, s.parent_id) for s in run.steps] == [
        ("reasoning", "root", None),
        ("tool_call", "0.0", "root"),
        ("reasoning", "0.0.0", "0.0"),
        ("tool_call", "root#2", "root"),
        ("assistant", "0.2", "root"),
    ]


def test_tool_fields_and_explicit_errors():
    (run,) = parse(json.dumps(TREE).encode())
    search, edit = (s for s in run.steps if s.is_tool_call)
    assert (search.tool, search.args, search.result, search.status) == (
        "search",
        {"q": "bug"},
        "3 hits",
        "ok",
    )
    assert (edit.tool, edit.result, edit.status) == ("edit", "permission denied", "error")


def test_array_of_roots_gives_one_run_each_and_gzip_works():
    runs = parse(gzip.compress(json.dumps([TREE, TREE], indent=1).encode()))
    assert [r.id for r in runs] == ["tree.json#0", "tree.json#1"]
    lines = "\n".join(json.dumps(TREE) for _ in range(3)).encode()
    assert len(parse(lines, source="trees.jsonl")) == 3


def test_a_root_whose_parent_is_not_in_the_file_keeps_that_parent():
    mid = {"type": "tool", "name": "ls", "parent_id": "elsewhere", "children": []}
    (run,) = parse(json.dumps(mid).encode())
    assert run.steps[0].parent_id == "elsewhere"  # missing from the run: a root


def test_deep_trees_are_walked_without_recursion_and_too_deep_files_refused():
    node: dict = {"type": "tool", "name": "leaf", "children": []}
    for _ in range(200):
        node = {"type": "think", "thought": "t", "children": [node]}
    (run,) = parse(json.dumps(node).encode())
    assert len(run.steps) == 201
    with pytest.raises(TraceError, match="nested deeper"):
        parse(json.dumps(node).encode(), limits=Limits(max_depth=16))


def test_other_formats_are_not_claimed_by_tree():
    from runs.importers import tree_json as tree

    assert not tree.sniff(b'{"children": [], "foo": 1}')
    assert detect_format(json.dumps(TREE).encode()) == "tree"


def test_claim_scores_known_node_types_higher_and_says_why_not():
    from runs.importers import tree_json as tree
    from runs.importers.detect import sample_of

    known = tree.claim(sample_of(json.dumps(TREE).encode()))
    plain = tree.claim(sample_of(b'{"name": "a", "children": [{"name": "b", "children": []}]}'))
    assert known.score > plain.score > 0
    assert known.score <= 0.6  # a general shape: below the formats with their own markers
    none = tree.claim(sample_of(b'{"children": [], "foo": 1}'))
    assert none.score == 0 and "children" in none.reason


def test_a_single_root_is_streamed_and_reads_as_the_whole_tree_would():
    """The streamed walk of one root object gives the steps run_from_root gives the same
    tree held whole: ids, parents, order, kinds, fields before or after `children`."""
    import io
    import random

    from runs.importers import tree_json as tree
    from runs.importers.reading import DEFAULT_LIMITS

    rng = random.Random(12)

    def node(depth: int) -> dict:
        fields = {
            "type": rng.choice(["ToolNode", "ThinkNode", "llm", "agent"]),
            "id": rng.choice(["a", "b", f"n{rng.random()}"]),
            "name": "n",
            "args": {"x": rng.randint(0, 3)},
            "started_at": rng.choice([None, rng.randint(1, 9)]),
            "status": rng.choice(["ok", "error"]),
        }
        items = [(k, v) for k, v in fields.items() if v is not None]
        kids = [node(depth + 1) for _ in range(rng.randint(0, 3))] if depth < 4 else []
        items.insert(rng.randint(0, len(items)), ("children", kids + [5] * (rng.random() < 0.1)))
        return dict(items)

    def seen(run) -> list:
        steps = [(s.kind, s.id, s.parent_id, s.tool, s.args, s.status, s.text) for s in run.steps]
        return [*steps, run.id, run.skipped]

    for _ in range(100):
        root = node(0)
        if rng.random() < 0.2:
            root = {"root": root, "note": "wrapped"}
        whole = tree.run_from_root(root, run_id="f", source="s", limits=DEFAULT_LIMITS)
        data = io.BytesIO(json.dumps(root).encode())
        streamed = tree._stream_root(data, run_id="f", source="s", limits=DEFAULT_LIMITS)
        assert seen(streamed) == seen(whole)
