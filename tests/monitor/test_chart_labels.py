"""The report's charts say distinct numbers on their axes and keep restart labels inside the chart (U28)."""

from __future__ import annotations

import re

import pytest

from verlctl.monitor.charts import CHARTS, nice_ticks, svg_chart, text_chart, tick_labels


@pytest.mark.parametrize(("lo", "hi"), [(0.50, 0.51), (1.50, 1.51), (1.0, 1.0003), (1.0, 1.0000004),
                                        (120000.0, 120004.0), (0.0, 1.0), (-3.0, 7.0), (2e-6, 3e-6)])
def test_no_two_axis_ticks_read_the_same(lo: float, hi: float) -> None:
    ticks = nice_ticks(lo, hi)
    labels = tick_labels(ticks)
    assert len(set(labels)) == len(set(ticks)), (ticks, labels)
    for t, text in zip(ticks, labels):
        assert float(text) == pytest.approx(t, rel=1e-3, abs=1e-12), (t, text)


def test_the_svg_chart_y_axis_has_distinct_labels_for_a_flat_step_time() -> None:
    spec = next(c for c in CHARTS if c.name == "step_time")
    points = [(s, 1.0 + 0.0001 * (s % 4)) for s in range(1, 21)]  # 1.000-1.0003 s: was labelled "1 1 1 1"
    svg = svg_chart(spec, points)
    ys = re.findall(r'data-axis="y">([^<]+)<', svg)
    assert len(ys) >= 3 and len(set(ys)) == len(ys), ys
    text = text_chart(spec, points)
    rows = [ln.split("│")[0].strip() for ln in text.splitlines() if "│" in ln]
    shown = [r for r in rows if r]
    assert len(set(shown)) == len(shown), text


def test_a_restart_label_near_the_edge_stays_inside_the_chart() -> None:
    spec = next(c for c in CHARTS if c.name == "score")
    label = "attempt 2: offload added after out of memory in step 12"
    width = 560
    for step in (2, 11, 20, 39):  # both halves, both edges
        svg = svg_chart(spec, [(s, s / 40) for s in range(1, 41)], width=width, markers=[(step, label)])
        m = re.search(r'<text x="([\d.]+)" y="\d+" text-anchor="(start|end)" class="mk"><title>([^<]+)</title>'
                      r'([^<]+)</text>', svg)
        assert m is not None, svg
        x, anchor, full, shown = float(m.group(1)), m.group(2), m.group(3), m.group(4)
        assert full == label  # the whole label on hover
        room = x if anchor == "end" else width - x
        assert len(shown) * 6.2 <= room + 0.5, (step, anchor, x, shown)
        assert shown == label or shown.endswith("…"), shown
