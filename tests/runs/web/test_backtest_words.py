"""Tuning's back-test block as a new user reads it: an issue title's backticked names show as
code, not as raw backticks (issue 27, 'raw backticks on Tuning'), and stay escaped."""

from __future__ import annotations

from django.template.loader import render_to_string


def test_a_new_issue_title_in_the_back_test_shows_its_names_as_code():
    html = render_to_string(
        "runs/backtest.html#issue-title",
        {"issue": {"issue": None, "title": "`read_file` goes <back>"}},
    )
    assert "<code>read_file</code> goes &lt;back&gt;" in html and "`" not in html
