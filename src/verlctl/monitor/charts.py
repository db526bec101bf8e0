"""Charts over a run's steps: score, response length, throughput and step time, and the metrics the training
health rules read (:mod:`verlctl.monitor.health`): entropy, KL, gradient norm, pg_loss, learning rate,
advantages, validation score, responses cut at the maximum length and DAPO's filter_groups evictions.

The series come from the per-step metric lines verl prints (``step:N - key:value - ...``, parsed by
:mod:`verlctl.monitor.events`). Two renderings of the same series: :func:`svg_chart` (an inline SVG for the HTML
run report, no script, no network) and :func:`text_chart` (a terminal chart for ``verlctl status --plot``).
Both are pure functions; a series is bounded (:data:`MAX_POINTS`, evenly thinned), so a long run cannot make
a page or a terminal grow without bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from html import escape

#: At most this many points per series (a longer series is thinned evenly, keeping the first and last).
MAX_POINTS = 2000

Point = tuple[int, float]


@dataclass(frozen=True)
class ChartSpec:
    name: str
    title: str
    keys: tuple[str, ...]  # verl metric names, first present wins
    unit: str = ""
    prefix: str = ""  # else: the first key (in name order) with this prefix, one holding "mean@" preferred
    always: bool = True  # drawn ("no data") even when the log has none of its metric

    def pick(self, metrics: Mapping[str, object]) -> object:
        """This chart's value in one step's metrics (None when absent)."""
        for key in self.keys:
            if key in metrics:
                return metrics[key]
        if self.prefix:
            keys = sorted(k for k in metrics if k.startswith(self.prefix))
            best = next((k for k in keys if "mean@" in k), keys[0] if keys else None)
            return metrics[best] if best is not None else None
        return None


#: verl's metric names: ``critic/score/mean`` and ``response_length/mean`` (``trainer/ppo/metric_utils.py``
#: ``compute_data_metrics``), ``perf/throughput`` and ``timing_s/step`` (``compute_throughout_metrics`` /
#: ``compute_timing_metrics``); ``timing/step`` in older logs.
CHARTS: tuple[ChartSpec, ...] = (
    ChartSpec("score", "Score (mean)", ("critic/score/mean",)),
    ChartSpec("response_length", "Response length (mean)", ("response_length/mean",), "tokens"),
    ChartSpec("throughput", "Throughput", ("perf/throughput",), "tokens/s/device"),
    ChartSpec("step_time", "Step time", ("timing_s/step", "timing/step"), "s"),
    # the training-health metrics (monitor/health.py cites where verl logs each)
    ChartSpec("entropy", "Entropy (actor/entropy)", ("actor/entropy",), always=False),
    ChartSpec("kl", "KL (actor/kl_loss, else actor/ppo_kl)", ("actor/kl_loss", "actor/ppo_kl"), always=False),
    ChartSpec("grad_norm", "Gradient norm (actor/grad_norm)", ("actor/grad_norm",), always=False),
    ChartSpec("pg_loss", "Policy loss (actor/pg_loss)", ("actor/pg_loss",), always=False),
    ChartSpec("lr", "Learning rate (actor/lr)", ("actor/lr",), always=False),
    ChartSpec("advantages", "Advantages (max)", ("critic/advantages/max",), always=False),
    # verl's validation metrics: val-core/<data source>/<variable>/<metric> (trainer/ppo/ray_trainer.py, "val-core")
    ChartSpec("val_score", "Validation score", (), prefix="val-core/", always=False),
    ChartSpec("clip_ratio", "Responses at max_response_length (share)", ("response_length/clip_ratio",), always=False),
    ChartSpec("filter_groups", "DAPO filter_groups evictions", ("training/filter_groups/evicted_samples",),
              "samples", always=False),
)


def shown(series_by_chart: Mapping[str, list[Point]]) -> list[ChartSpec]:
    """The charts to draw: the four of every run, and each health metric's chart where verl logged it."""
    return [c for c in CHARTS if c.always or series_by_chart.get(c.name)]


def series(steps: Iterable[tuple[int, Mapping[str, float]]]) -> dict[str, list[Point]]:
    """Per chart, ``(step, value)`` in step order; a step printed twice (a restart) keeps its last value."""
    by_chart: dict[str, dict[int, float]] = {c.name: {} for c in CHARTS}
    for step, metrics in steps:
        for c in CHARTS:
            v = c.pick(metrics)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                by_chart[c.name][int(step)] = float(v)
    return {name: thin(sorted(points.items())) for name, points in by_chart.items()}


def thin(points: list[Point], limit: int = MAX_POINTS) -> list[Point]:
    """At most ``limit`` points, evenly spaced over the series, first and last kept."""
    if len(points) <= limit:
        return points
    if limit < 2:
        return points[-limit:] if limit > 0 else []
    step = (len(points) - 1) / (limit - 1)
    return [points[round(i * step)] for i in range(limit)]


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e5 or a < 1e-3:
        return f"{v:.2e}"
    if a >= 100:
        return f"{v:.0f}"
    return f"{v:.3g}"


def tick_labels(values: list[float]) -> list[str]:
    """Labels for axis ticks: as :func:`_fmt` writes them, with more digits when two would read the same
    (0.5 / 0.505 / 0.51, not 0.5 / 0.5; 1 / 1.0001, not 1 / 1)."""
    labels = [_fmt(v) for v in values]
    digits = 3
    while len(set(labels)) < len(set(values)) and digits < 15:
        digits += 1
        labels = [_fmt(v) if v == 0 or abs(v) >= 1e5 or abs(v) < 1e-3 else f"{v:.{digits}g}" for v in values]
    if len(set(labels)) < len(set(values)):  # large or tiny values: the exponent form, more digits
        labels = [f"{v:.{digits}e}" for v in values]
    return labels


#: Width of one character of the restart labels (11 px system-ui), to fit them inside the chart.
_LABEL_CHAR_PX = 6.2


def fit_label(label: str, room_px: float) -> str:
    """``label`` cut (with …) to what ``room_px`` pixels hold; whole when it fits."""
    most = max(4, int(room_px / _LABEL_CHAR_PX))
    return label if len(label) <= most else label[: most - 1].rstrip() + "…"


def _bounds(values: list[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    if hi == lo:
        pad = abs(hi) * 0.05 or 1.0
        return lo - pad, hi + pad
    return lo, hi


#: A restart on a chart: the step the attempt started from, and what to say ("attempt 2: device_oom").
Marker = tuple[int, str]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n - 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def step_ticks(x0: int, x1: int, n: int = 6) -> list[int]:
    """Whole step numbers for the x axis, first and last included."""
    if x1 <= x0:
        return [x0]
    ticks = sorted({round(t) for t in nice_ticks(x0, x1, n) if x0 <= t <= x1} | {x0, x1})
    # drop a tick crowding the last one
    span = x1 - x0
    return [t for t in ticks if t in (x0, x1) or (x1 - t) > span / (2 * n)]


def smoothed(points: list[Point], window: int) -> list[Point]:
    """The trailing moving average over ``window`` points (the raw series when window < 2)."""
    if window < 2:
        return points
    out: list[Point] = []
    total = 0.0
    for i, (x, y) in enumerate(points):
        total += y
        if i >= window:
            total -= points[i - window][1]
        out.append((x, total / min(i + 1, window)))
    return out


def svg_chart(spec: ChartSpec, points: list[Point], width: int = 560, height: int = 200,
              markers: Iterable[Marker] = (), smooth: int = 0) -> str:
    """One line chart as an inline ``<svg>``: axes with round ticks and grid lines, a polyline (and its
    moving average when ``smooth`` > 1), a dot per point when few, and a dashed marker at each restart with
    the attempt and its reason on the x axis."""
    title = escape(spec.title + (f" ({spec.unit})" if spec.unit else ""))
    markers = list(markers)
    height += 16 * min(len(markers), 3)  # room for the restart labels under the axis
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(spec.name)}" '
        f'data-points="{len(points)}" data-markers="{len(markers)}" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{title}">'
    )
    parts = [head, f'<text x="8" y="16" class="t">{title}</text>']
    if not points:
        parts.append(f'<text x="{width // 2}" y="{height // 2}" text-anchor="middle" class="e">no data</text></svg>')
        return "".join(parts)
    left, right, top = 56, 12, 28
    bottom = 28 + 16 * min(len(markers), 3)
    pw, ph = width - left - right, height - top - bottom
    xs = [p[0] for p in points]
    ys = [p[1] for p in points]
    x0, x1 = (xs[0], xs[-1]) if xs[-1] > xs[0] else (xs[0] - 1, xs[0] + 1)
    y0, y1 = _bounds(ys)

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    parts.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="f"/>')
    yticks = [t for t in nice_ticks(y0, y1) if y0 <= t <= y1]
    for t, text in zip(yticks, tick_labels(yticks)):
        parts.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(t):.1f}" y2="{py(t):.1f}" class="g"/>'
                     f'<text x="{left - 4}" y="{py(t) + 4:.1f}" text-anchor="end" class="a tick" '
                     f'data-axis="y">{escape(text)}</text>')
    axis_y = top + ph
    for t in step_ticks(int(x0), int(x1)):
        parts.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{axis_y}" y2="{axis_y + 4}" class="k"/>'
                     f'<text x="{px(t):.1f}" y="{axis_y + 16}" text-anchor="middle" class="a tick" '
                     f'data-axis="x">{t}</text>')
    parts.append(f'<text x="{left + pw}" y="{top - 6}" text-anchor="end" class="a">step</text>')
    for i, (step, label) in enumerate(markers):
        x = px(min(max(step, x0), x1))
        row = axis_y + 32 + 16 * min(i, 2)
        anchor = "end" if x > left + pw / 2 else "start"
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top}" y2="{axis_y}" class="m" data-step="{step}"/>'
                     f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{axis_y + 20}" y2="{row - 11}" class="m"/>'
                     f'<text x="{x + (-3 if anchor == "end" else 3):.1f}" y="{row}" text-anchor="{anchor}" '
                     f'class="mk"><title>{escape(label)}</title>'
                     f'{escape(fit_label(label, (x - 3) if anchor == "end" else (width - x - 3)))}</text>')
    coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
    parts.append(f'<polyline points="{coords}" class="l"/>')
    if smooth > 1 and len(points) > 2:
        avg = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in smoothed(points, smooth))
        parts.append(f'<polyline points="{avg}" class="s" data-smooth="{smooth}"/>')
    if len(points) <= 60:
        parts.extend(
            f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" class="d"><title>step {x}: {escape(_fmt(y))}</title></circle>'
            for x, y in points
        )
    parts.append("</svg>")
    return "".join(parts)


#: Eighth blocks, lowest first, for :func:`text_chart`.
_BLOCKS = " ▁▂▃▄▅▆▇█"


def text_chart(spec: ChartSpec, points: list[Point], width: int = 60, height: int = 6,
               markers: Iterable[Marker] = ()) -> str:
    """A column chart in block characters: ``height`` rows, at most ``width`` columns (each the mean of the
    steps it covers), with max / middle / min on the y axis, step ticks on the x axis, and a ``^`` under the
    column of each restart, named below."""
    title = spec.title + (f" ({spec.unit})" if spec.unit else "")
    if not points:
        return f"{title}: no data"
    width = max(1, width)
    n = len(points)
    cols = min(width, n)
    buckets: list[float] = []
    for i in range(cols):
        chunk = points[i * n // cols : (i + 1) * n // cols]
        buckets.append(sum(v for _, v in chunk) / len(chunk))
    lo, hi = _bounds(buckets) if len(set(buckets)) > 1 else (min(buckets) - 1, max(buckets))
    levels = height * 8
    heights = [max(1, round((v - lo) / (hi - lo) * levels)) for v in buckets]
    mid_row = height // 2 if height >= 3 else -1
    hi_text, lo_text, mid = tick_labels([hi, lo, lo + (hi - lo) * (mid_row + 0.5) / height])
    label_w = max(len(hi_text), len(lo_text), len(mid) if mid_row >= 0 else 0)
    rows = []
    for r in range(height - 1, -1, -1):
        line = "".join(_BLOCKS[min(8, max(0, h - r * 8))] for h in heights)
        label = hi_text if r == height - 1 else lo_text if r == 0 else mid if r == mid_row else ""
        rows.append(f"{label:>{label_w}} │{line}")
    last = points[-1]
    first_step, last_step = points[0][0], last[0]

    def col(step: int) -> int:
        i = next((k for k, (s, _) in enumerate(points) if s >= step), n - 1)
        return min(cols - 1, i * cols // n)

    axis = [" "] * cols
    for t in step_ticks(first_step, last_step, max(2, min(6, cols // 10))):
        axis[col(t)] = "┬"
    tick_line = f"{'':>{label_w}} └" + "".join(axis)
    labels = [" "] * (cols + 12)
    for t in step_ticks(first_step, last_step, max(2, min(6, cols // 10))):
        text, c = str(t), col(t)
        start = max(0, min(c, cols + 12 - len(text)))
        if all(ch == " " for ch in labels[max(0, start - 1): start + len(text) + 1]):
            labels[start: start + len(text)] = text
    out = [title, *rows, tick_line, f"{'':>{label_w}}  " + "".join(labels).rstrip()]
    markers = [(s, lbl) for s, lbl in markers]
    if markers:
        marks = [" "] * cols
        for s, _ in markers:
            marks[col(s)] = "^"
        out.append(f"{'':>{label_w}}  " + "".join(marks).rstrip())
        out.extend(f"{'':>{label_w}}  ^ step {s}: {lbl}" for s, lbl in markers)
    out.append(f"{'':>{label_w}}  step {first_step} … {last_step}  (last {_fmt(last[1])})")
    return "\n".join(out)


class SeriesSink:
    """A step sink (:class:`verlctl.monitor.diagnose.StepSink`) that keeps only the charted metrics of each
    step, so that a whole log can be charted in memory bounded by its number of steps."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self._keys = {k for c in CHARTS for k in c.keys}
        self._prefixes = tuple(c.prefix for c in CHARTS if c.prefix)

    def fast(self, step: int, body: bytes) -> None:
        from verlctl.monitor.events import split_metrics

        self._keep(step, split_metrics(body.decode(errors="replace")).metrics)

    def event(self, event: object) -> None:
        self._keep(event.step, event.metrics)  # type: ignore[attr-defined]

    def flush(self) -> None:
        pass

    def _keep(self, step: int, metrics: Mapping[str, object]) -> None:
        kept = {k: v for k, v in metrics.items()
                if (k in self._keys or k.startswith(self._prefixes)) and isinstance(v, (int, float))}
        if kept:
            self.steps[step] = {**self.steps.get(step, {}), **kept}

    def series(self) -> dict[str, list[Point]]:
        return series(sorted(self.steps.items()))
