"""Fixtures the compare page's tests share: a looping run and the same task's fixed run."""

from __future__ import annotations

import pytest

from tests.helpers import call, message
from tests.runs.services.test_compare import stored


def work(n, start=0):
    return [
        call("read_file", {"path": f"src/m{k}.py"}, f"text {k}") for k in range(start, start + n)
    ]


@pytest.fixture
def pair(project, process):
    """A run that loops on web_search, then the same task's run with the loop fixed."""
    loop = [call("web_search", {"query": "same"}, {"results": []}) for _ in range(8)]
    looping = stored(process, project, [message("user", "find it"), *work(3), *loop], "task-7")
    fixed_events = [message("user", "find it"), *work(3), loop[0], call("answer", {"a": 1}, "ok")]
    fixed = stored(process, project, fixed_events, "task-8")
    return looping, fixed
