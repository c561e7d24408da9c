"""Runs list filters: parsing, free text query, keyset cursors."""

from django.http import QueryDict

from runs.services import filters


def test_malformed_filters_are_ignored():
    f = filters.RunFilters.from_query(QueryDict("sort=drop&since=yesterday&verdict=ok"))
    assert f.sort == "new" and f.since is None and f.verdict == "ok"
    assert f.query() == {"verdict": "ok"}


def test_free_text_becomes_a_prefix_query_of_plain_words():
    query = filters.search_query("web_search 'x':* | !y")
    assert query.source_expressions[-1].value == "web:* & search:* & x:* & y:*"
    assert filters.search_query("&|!") is None
