import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection import DEFAULT_VOLATILE, call_signature, digest, normalize, progress_signature
from detection.keys import value_digest

ROOT = Path(__file__).resolve().parents[2]


def test_key_order_does_not_matter_at_any_depth():
    a = {"b": 1, "a": {"y": [1, {"q": 2, "p": 3}], "x": 2}}
    b = {"a": {"x": 2, "y": [1, {"p": 3, "q": 2}]}, "b": 1}
    assert call_signature("t", a) == call_signature("t", b)
    assert list(normalize(a)) == ["a", "b"]


def test_list_order_does_matter():
    assert call_signature("t", {"a": [1, 2]}) != call_signature("t", {"a": [2, 1]})


@pytest.mark.parametrize("key", sorted(DEFAULT_VOLATILE))
def test_volatile_fields_are_dropped_at_every_depth(key):
    plain = {"q": "x", "inner": {"n": 1}}
    noisy = {"q": "x", key: "123", "inner": {"n": 1, key: "456"}}
    assert call_signature("t", plain) == call_signature("t", noisy)


def test_extra_volatile_fields_are_dropped_only_when_asked():
    a, b = {"q": "x", "cursor": "c1"}, {"q": "x", "cursor": "c2"}
    assert call_signature("t", a) != call_signature("t", b)
    assert call_signature("t", a, volatile=["cursor"]) == call_signature("t", b, ["cursor"])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ("  [1, 2]\n", [1, 2]),
        ("42", None),  # a bare scalar stays text
        ('"x"', None),
        ("{not json}", None),
        ("[" * 2000 + "]" * 2000, None),  # nested past the parser: text
        ("", None),
    ],
)
def test_json_in_text_is_the_one_rule_for_json_inside_a_string(text, value):
    from detection.keys import json_in_text
    from runs.importers.content import parse_json_text

    assert json_in_text(text) == value
    assert parse_json_text(text) == (text if value is None else value)


def test_a_message_about_a_call_drops_its_ids_at_its_own_level():
    from detection.keys import dropped_keys

    message = {"tool_call_id": "call_1", "id": "m", "run_id": "r", "content": {"id": 7}}
    assert {"id", "run_id", "tool_call_id"} <= dropped_keys(message, DEFAULT_VOLATILE)
    assert dropped_keys({"id": 1, "run_id": 2}, DEFAULT_VOLATILE) == DEFAULT_VOLATILE
    assert normalize(message) == {"content": {"id": 7}}


def test_json_string_arguments_are_parsed_before_hashing():
    assert call_signature("t", '{"b": 1, "a": 2}') == call_signature("t", {"a": 2, "b": 1})
    assert normalize({"args": '[1, {"b": 2, "a": 1}]'}) == {"args": [1, {"a": 1, "b": 2}]}


def test_paths_and_whitespace_are_canonical():
    assert normalize("./a//b/") == "a/b"
    assert normalize({"p": "src/./x/../y.py"}) == {"p": "src/y.py"}
    assert normalize("  grep   -r\n foo  ") == "grep -r foo"
    assert normalize("https://x.org//a") == "https://x.org//a"


def test_tool_name_is_part_of_the_call():
    assert call_signature("a", {"x": 1}) != call_signature("b", {"x": 1})


def test_progress_signature_separates_results_and_status():
    call = call_signature("t", {"x": 1})
    same = progress_signature(call, {"r": 1, "ts": 5})
    assert same == progress_signature(call, {"ts": 9, "r": 1})
    assert same != progress_signature(call, {"r": 2})
    assert same != progress_signature(call, {"r": 1}, "error")


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1},
        {"p": "./x//y"},
        {"s": " a  b "},
        {"j": '{"z": 1}'},
        ["a/b", {"ts": 1}],
        "x",
        None,
        {"n": 1.5, "b": True},
        {"k": 'quote " inside'},
        {"u": "ünï"},
        {"type": "tool", "data": {"content": "x", "tool_call_id": "c1", "id": None}},
        '{"tool_use_id": "t", "id": "m1", "content": [{"id": 5}]}',
    ],
)
def test_fast_digest_equals_digest_of_normalized(value):
    assert value_digest(value) == digest(normalize(value))


TRICKY_TEXT = st.lists(
    st.sampled_from(list('ab/. :{}[]\t\n\u00a0"\\') + ["ts", "://", "./", "//"]), max_size=8
).map("".join)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False)
    | TRICKY_TEXT,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(
        st.sampled_from(["a", "b", "ts", "nonce", "p q", "/x", "id", "tool_call_id", "run_id"]),
        inner,
        max_size=4,
    ),
    max_leaves=12,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(JSON_VALUES)
def test_fast_digest_equals_digest_of_normalized_for_any_json_value(value):
    # the fast path hashes a value as it is when it is already canonical; it must never
    # disagree with hashing the normalised copy
    assert value_digest(value) == digest(normalize(value))


def test_digests_are_deterministic_across_processes():
    code = "from detection import call_signature; print(call_signature('t', {'b': [1], 'a': 'x'}))"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(runs) == 1
    assert runs.pop().strip() == call_signature("t", {"a": "x", "b": [1]})


def test_detection_imports_without_django_celery_or_runs():
    code = (
        "import sys, detection; print(any(m.split('.')[0] in ('django', 'celery', 'runs')"
        " for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"


def test_fast_digest_equals_digest_of_normalized_for_path_like_strings():
    """The fast path hashes paths as they are unless normpath would change them."""
    import itertools

    pieces = ["/", ".", "a", ":", " ", "{"]
    for size in range(1, 5):
        for combo in itertools.product(pieces, repeat=size):
            text = "".join(combo)
            for value in (text, {"p": text}, [text, {"q": text + "/b"}]):
                assert value_digest(value) == digest(normalize(value)), value


def test_digester_memo_gives_the_same_digests_and_stays_bounded():
    from detection import keys

    keys.clear_memo()
    run = keys.digester(keys.DEFAULT_VOLATILE)
    values = [{"p": "./a//b", "ts": 1}, " a  b ", {"q": [1, 2]}, "x" * 2000, {"t": "y " * 400}]
    first = [run(value) for value in values]
    again = [run(value) for value in values]  # short ones now come from the memo
    assert first == again == [digest(normalize(value)) for value in values]
    for number in range(keys._MEMO_MAX + 10):
        run({"n": number})
    assert 0 < len(run.memo) <= keys._MEMO_MAX


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\u00a0\u3000ab"), max_size=16))
def test_whitespace_collapse_matches_the_regex_it_replaces(text):
    import re

    from detection.keys import _collapse

    text = text.strip()  # it is only given stripped text (see _normalize_str)
    assert _collapse(text) == re.sub(r"[ \t\n\r\f\v]+", " ", text)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
def test_tokens_of_canonical_arguments_need_no_normalising(value):
    # near repeat tokenises arguments the digest found canonical without normalising them
    from detection.detectors.similarity import arg_tokens
    from detection.keys import _canonical

    if _canonical(value, DEFAULT_VOLATILE):
        assert arg_tokens(value, DEFAULT_VOLATILE, True) == arg_tokens(value, DEFAULT_VOLATILE)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(["/", ".", "..", "a", "b.c", " "]), max_size=8).map("".join))
def test_canonical_path_is_normpath(path):
    import posixpath

    from detection.keys import canonical_path

    assert canonical_path(path) == posixpath.normpath(path)


@pytest.mark.parametrize("limit", [5, 20, 80])
def test_short_renders_long_values_like_the_whole_text(limit):
    from detection.detectors.base import short

    for text in ["a " * 500, "x" * 2000, " \n ".join(["w"] * 300) + " end", "word  " * 10]:
        flat = " ".join(text.split())
        expected = flat if len(flat) <= limit else flat[: limit - 1] + "…"
        assert short(text, limit) == expected
