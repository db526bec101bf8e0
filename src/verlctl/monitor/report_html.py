"""One self-contained HTML page for a run: its spec, timeline, restarts, diagnosis and charts.

No script and no network: the charts are inline SVG (:mod:`verlctl.monitor.charts`), the style is inline, and
every value from the run (spec text, log excerpts, event fields) is HTML-escaped. The page is built from plain
data (:class:`ReportData`), so this module knows nothing of records, containers or Docker.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from verlctl.monitor.charts import Point, shown, svg_chart

#: At most this many timeline rows (the newest are kept) and characters of spec text.
MAX_EVENTS = 500
MAX_SPEC_CHARS = 200_000

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px auto;max-width:1200px;color:#1d2330;
background:#fff;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde;padding-bottom:4px}
.meta{color:#556}.grid{display:flex;flex-wrap:wrap;gap:16px}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eef;padding:4px 8px;text-align:left;
vertical-align:top}th{background:#f5f6fa}pre{background:#f5f6fa;padding:10px;overflow:auto;max-height:480px;
font-size:12px}.bad{color:#b3261e;font-weight:600}.ok{color:#1b7f3b;font-weight:600}.warn{color:#9a6700;font-weight:600}
svg.chart{background:#fff;border:1px solid #dde;border-radius:6px}
svg .t{font:600 13px system-ui,sans-serif;fill:#1d2330}svg .a{font:11px system-ui,sans-serif;fill:#556}
svg .e{font:12px system-ui,sans-serif;fill:#889}svg .f{fill:#fafbfe;stroke:#dde}
svg .l{fill:none;stroke:#2f6fde;stroke-width:2}svg .d{fill:#2f6fde}
svg .g{stroke:#e6e8f0;stroke-width:1}svg .k{stroke:#889;stroke-width:1}
svg .m{stroke:#d9480f;stroke-width:2;stroke-dasharray:5 3}svg .mk{font:11px system-ui,sans-serif;fill:#d9480f}
svg .s{fill:none;stroke:#0b8a5c;stroke-width:2.5}
"""


@dataclass
class ReportData:
    run_id: str
    experiment: str
    state: str  # running / finished / failed / stopped / never started / unknown
    spec_yaml: str
    events: Sequence[Mapping[str, Any]] = field(default_factory=list)
    attempts: Sequence[Mapping[str, Any]] = field(default_factory=list)
    series: dict[str, list[Point]] = field(default_factory=dict)
    findings: Sequence[Mapping[str, Any]] = field(default_factory=list)  # root cause first
    progress: Mapping[str, Any] | None = None
    facts: dict[str, str] = field(default_factory=dict)  # container, image, verl version, log path, ...
    generated_at: float | None = None
    markers: Sequence[tuple[int, str]] = field(default_factory=list)  # (step, "attempt 2: ...") per restart
    smooth: int = 0  # moving-average window drawn over each series (0: none)
    log_read: bool = True  # False: the log was not read (the diagnosis cannot say "no error")
    recovered: Sequence[str] = field(default_factory=list)  # "attempt 2 added offload after out of memory ..."
    #: each automatic restart: {"line": "recovered: …" / "restarted: …; it failed again", "outcome": …}; when
    #: given, it is shown instead of ``recovered``
    restarts: Sequence[Mapping[str, Any]] | None = None
    gave_up: Mapping[str, Any] | None = None  # the watcher's give-up of the current attempt (reason, advice)
    #: training-health warnings (monitor/health.py: rule, title, message, step, citation, hint)
    health: Sequence[Mapping[str, Any]] = field(default_factory=list)


def _when(t: Any) -> str:
    try:
        return dt.datetime.fromtimestamp(float(t)).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def _short(v: Any, limit: int = 300) -> str:
    text = v if isinstance(v, str) else json.dumps(v, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


def _ckpt(path: Any) -> str:
    return str(path).rstrip("/").rsplit("/", 1)[-1] if path else ""


#: Event fields that are developer data on a user page (said by no sentence, never listed).
_QUIET_FIELDS = frozenset({"time", "run", "event", "stack", "notify_cmd", "teardown_s", "prepared_early",
                           "actions", "findings", "nodes", "features_added", "expected_checkpoint"})


def event_sentence(ev: Mapping[str, Any]) -> str:
    """One event of the run's timeline as a sentence (not its raw fields)."""
    kind = str(ev.get("event") or "")
    n = ev.get("attempt")
    att = f"attempt {n}" if n is not None else "the attempt"
    g = ev.get

    def step_words() -> str:
        return f" after step {g('step')}" if isinstance(g("step"), int) else ""

    known: dict[str, Any] = {
        "launch_failed": lambda: f"the launch failed: {_short(g('error'))}"
        + (f" (hint: {_short(g('hint'))})" if g("hint") else ""),
        "launch_interrupted": lambda: f"the launch was interrupted ({g('signal')})",
        "verified": lambda: "the training started: its first log line was seen",
        "started": lambda: f"{att} started" + (f" (process group {g('pgid')})" if g("pgid") else "")
        + (f", resuming from {_ckpt(g('resumed_from'))}" if g("resumed_from") else "")
        + (f", with {', '.join(map(str, g('features') or []))}" if g("features") else ""),
        "watcher_spawned": lambda: f"a watcher was started (pid {g('pid')})",
        "watch_started": lambda: "the watcher began following the run",
        "alert": lambda: f"{att}: {g('category')}{step_words()}: {_short(g('message'))}"
        + (f" — what to do: {_short(g('hint'))}" if g("hint") else ""),
        "recovery": lambda: f"the watcher restarted the run: {_short(g('reason'))}"
        + (f", resuming from {_ckpt(g('resumed_from'))}" if g("resumed_from") else ""),
        "gave_up": lambda: f"the watcher {_short(g('reason'))}"
        + ("; advice: " + "; ".join(map(str, g("advice") or [])) if g("advice") else ""),
        "notice": lambda: str(g("message")),
        "stalled": lambda: f"{att} stalled: {_short(g('reason'))}",
        "checkpoint_saved": lambda: f"checkpoint of step {g('step')} saved",
        "resume_check": lambda: f"resumed from {_ckpt(g('expected_checkpoint'))}: "
        + (f"yes, first step {g('first_step_seen')}" if g("resumed") else "no: it started over"),
        "resume_advanced": lambda: f"trained past the checkpoint {_ckpt(g('resumed_from'))} (step {g('step')})",
        "resume_failed": lambda: f"the resume trained nothing: {_short(g('reason'))}",
        "health": lambda: f"training health: {g('title') or g('rule')} at step {g('step')}: {_short(g('message'))}"
        + (" (the run was stopped: recovery.health.stop_on)" if g("stops") else " (a warning: the run went on)"),
        "memory_released": lambda: "device memory was released before the restart",
        "memory_release_timeout": lambda: "device memory was not seen released in time",
        "finished": lambda: f"{att} finished: training is complete",
        "stopped": lambda: "stopped" + (f" ({g('reason')})" if g("reason") else " with `verlctl stop`"),
        "watch_stopped": lambda: f"the watcher ended: {g('detail') or 'the run was stopped'}",
        "watch_terminated": lambda: "the watcher was ended by a signal",
        "watch_interrupted": lambda: "the watcher was interrupted",
        "failure": lambda: f"the run failed: {g('category')}: {_short(g('reason'))}",
        "target_lost": lambda: f"{att}: the run's target stopped answering: {_short(g('error'))}",
        "known_defects": lambda: "known defects of this stack were checked",
    }
    say = known.get(kind)
    if say is not None:
        return str(say())
    rest = [f"{k.replace('_', ' ')} {_short(v, 120)}" for k, v in ev.items()
            if k not in _QUIET_FIELDS and not isinstance(v, (dict, list))]
    return kind.replace("_", " ") + (": " + ", ".join(rest) if rest else "")


def _state_class(state: str) -> str:
    s = state.lower()
    if s.startswith(("failed", "gave up")) or "error" in s:
        return "bad"
    if s in ("never started",):
        return "bad"
    if s in ("running", "finished"):
        return "ok"
    return ""


def render(data: ReportData) -> str:
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>verlctl run {escape(data.run_id)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Run {escape(data.run_id)}</h1>",
        f'<p class="meta">experiment <b>{escape(data.experiment)}</b> · state '
        f'<span id="state" class="{_state_class(data.state)}">{escape(data.state)}</span>'
        + (f" · report written {escape(_when(data.generated_at))}" if data.generated_at else "")
        + "</p>",
    ]
    if data.facts:
        out.append("<table id=\"facts\">")
        out.extend(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in data.facts.items())
        out.append("</table>")

    out.append('<h2>Progress</h2><div class="grid" id="charts">')
    for spec in shown(data.series):
        out.append(svg_chart(spec, data.series.get(spec.name, []), markers=data.markers, smooth=data.smooth))
    out.append("</div>")
    if data.progress:
        done, total = data.progress.get("step"), data.progress.get("total")
        if done is not None:
            out.append(f"<p>step {escape(str(done))}" + (f" of {escape(str(total))}" if total else "") + "</p>")

    out.append("<h2>Training health</h2>")
    if data.health:
        out.append('<table id="health"><tr><th>warning</th><th>step</th><th>what to do</th><th>verl logs it</th></tr>')
        out.extend(
            f'<tr data-rule="{escape(str(w.get("rule")))}"><td class="warn">{escape(str(w.get("title") or w.get("rule")))}: '
            f'{escape(str(w.get("message")))}</td><td>{escape(str(w.get("step")))}</td>'
            f'<td>{escape(str(w.get("hint") or ""))}</td><td><code>{escape(str(w.get("citation") or ""))}</code></td></tr>'
            for w in data.health)
        out.append("</table>")
    elif data.log_read:
        out.append('<p id="health">No training-health warning: verl\'s step metrics show a learning signal and '
                   "none of the bounds of recovery.health was crossed.</p>")
    else:
        out.append('<p id="health">The log was not read: training health cannot be judged.</p>')

    out.append("<h2>Diagnosis</h2>")
    if data.gave_up:  # the watcher's last word leads: why it stopped trying, and what to do now
        out.append(f'<p id="gave-up" class="bad">{escape(str(data.gave_up.get("reason") or "the watcher gave up"))}</p>')
        advice = data.gave_up.get("advice") or []
        if advice:
            out.append('<ul id="advice">' + "".join(f"<li>advice: {escape(str(a))}</li>" for a in advice) + "</ul>")
    restarts = data.restarts if data.restarts is not None else [
        {"line": f"recovered: {r}", "outcome": "recovered"} for r in data.recovered]
    if restarts:
        out.append('<ul id="recovered">' + "".join(
            f'<li class="{"ok" if r.get("outcome") == "recovered" else ""}">{escape(str(r.get("line")))}</li>'
            for r in restarts) + "</ul>")
    if data.findings:
        out.append('<table id="findings"><tr><th>what</th><th>line</th><th>what to do</th><th>excerpt</th></tr>')
        for f in data.findings:
            out.append(
                f'<tr><td class="bad">{escape(str(f.get("message", f.get("category", ""))))}</td>'
                f"<td>{escape(str(f.get('line', '')))}</td><td>{escape(str(f.get('hint', '')))}</td>"
                f"<td><code>{escape(str(f.get('excerpt', ''))[:400])}</code></td></tr>"
            )
        out.append("</table>")
    elif not data.log_read:
        out.append("<p>The log was not read, so nothing can be said about errors in it (see the log entry "
                   "above).</p>")
    else:
        out.append("<p>No error found in the log.</p>")

    out.append("<h2>Attempts and restarts</h2>")
    if data.attempts:
        out.append('<table id="attempts"><tr><th>#</th><th>started</th><th>reason</th><th>features</th><th>resumed from</th></tr>')
        for a in data.attempts:
            out.append(
                f"<tr><td>{escape(str(a.get('number', '')))}</td><td>{escape(_when(a.get('started_at')))}</td>"
                f"<td>{escape(str(a.get('reason', '')))}</td><td>{escape(', '.join(map(str, a.get('features') or [])))}</td>"
                f"<td>{escape(str(a.get('resumed_from') or 'start'))}</td></tr>"
            )
        out.append("</table>")
    else:
        out.append("<p>No attempt recorded.</p>")

    out.append("<h2>Timeline</h2>")
    events = list(data.events)[-MAX_EVENTS:]
    if events:
        out.append('<table id="timeline"><tr><th>time</th><th>event</th><th>details</th></tr>')
        out.extend(
            f"<tr><td>{escape(_when(ev.get('time')))}</td><td>{escape(str(ev.get('event', '')))}</td>"
            f"<td>{escape(event_sentence(ev))}</td></tr>"
            for ev in events
        )
        out.append("</table>")
    else:
        out.append("<p>No event recorded.</p>")

    spec_text = data.spec_yaml
    if len(spec_text) > MAX_SPEC_CHARS:
        spec_text = spec_text[:MAX_SPEC_CHARS] + "\n… (cut)"
    out.append(f'<h2>Run spec (resolved, without secrets)</h2><pre id="spec">{escape(spec_text)}</pre>')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
