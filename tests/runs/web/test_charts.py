"""Server-rendered SVG: numbers in, escaped text out."""

from datetime import date

from runs.services.summary import Strip
from runs.web import charts


def test_bar_labels_are_escaped():
    svg = charts.bars([("<script>x</script>", 3), ("ok", 1)], unit=" loop")
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert "3 loops" in svg and "1 loop<" in svg


def test_stall_chart_draws_the_series_and_fired_ticks():
    svg = charts.stall_chart([[0, 0.0], [5, 0.5], [9, 0.8]], steps=10, fired=[5])
    assert "<polyline" in svg and "chart__fired" in svg


def test_empty_inputs_draw_nothing():
    assert charts.stall_chart([], steps=0) == ""
    assert charts.repeat_strip(Strip()) == ""
    assert charts.bars([]) == ""


def test_repeat_strip_draws_one_rect_per_stretch_and_fired_mark():
    svg = charts.repeat_strip(Strip((0, 4, 4), (1,)))
    assert svg.count("<rect") == 3  # cells 0 and 4 as two stretches, one fired mark


def test_daily_columns_have_a_title_per_day():
    svg = charts.daily_columns([(date(2026, 1, 1), 4, 1), (date(2026, 1, 2), 2, 0)])
    assert "2026-01-01: 4 runs, 1 flagged" in svg


def test_a_long_bar_label_is_cut_with_an_ellipsis_inside_the_chart():
    """The label column holds LABEL_CHARS characters of the label font: 'Same error, different
    tries' lost its first letters to the chart's left edge when it did not (issue 27)."""
    import re

    svg = charts.bars([("Same error, different tries", 26), ("Same call, nothing new", 1)])
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" class="chart__label"[^>]*>([^<]*)<', svg)
    assert [text for _, text in labels] == ["Same error, different t…", "Same call, nothing new"]
    for x, text in labels:  # right-aligned at x: its left end stays inside the chart
        assert float(x) - len(text) * charts.LABEL_CHAR_PX >= 0, text
