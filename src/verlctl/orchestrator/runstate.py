"""What state a recorded run is in, and why, in words (`list`'s STATE column, `status`'s first line), and what
recovery did ("recovered: attempt 2 added offload after out of memory at step 3").

The verdict comes first from the run's own record (events.jsonl, status.json), then from the end of its log
when the log is a host file this machine can read (``paths.logs`` is mounted at the same path, so a removed
container keeps it), and only last from a probe of the process group (which needs the target). The states:
running / finished / failed / stopped / never started / unknown.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from verlctl.runtime.records import RunRecord

STATES = ("running", "finished", "failed", "stopped", "never started", "unknown")

#: Words for a failure category in a recovery line (the rest are said by their category name).
CATEGORY_WORDS = {
    "device_oom": "out of memory",
    "host_oom": "host out of memory",
    "stalled": "a stall",
}

_EXIT_RE = re.compile(r"start_verl\.sh exits with status (\d+)")
_STEP_RE = re.compile(r"(?:^|\s)step:(\d+)\b")


@dataclass
class RunState:
    state: str  # one of STATES
    why: str
    decided_by: str  # events | log | process | none

    def as_dict(self) -> dict[str, str]:
        return {"state": self.state, "why": self.why, "decided_by": self.decided_by}


def host_log_path(record: RunRecord) -> str | None:
    """The run's log as a path on this machine, when it is one: a local run (no remote head) whose log lies
    outside the container's work directory (under ``paths.logs``, a host directory mounted at the same path),
    or any host-runtime run. None otherwise (the log is only inside the target)."""
    if record.head_address is not None or record.runtime not in ("docker", "host") or not record.run_log:
        return None
    if record.runtime == "docker":
        workdir = record.workdir.rstrip("/") + "/"
        if record.run_log.startswith(workdir) or not record.run_log.startswith("/"):
            return None
    return record.run_log


def read_host_log(record: RunRecord, offset: int = 0, max_bytes: int = 4 * 1024 * 1024) -> str | None:
    """The run's host log from ``offset`` (its last ``max_bytes`` when longer); None when it cannot be read
    here. Opened without following a symlink planted at its name."""
    path = host_log_path(record)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        import stat

        if not stat.S_ISREG(st.st_mode):
            return None
        start = max(offset, st.st_size - max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        chunks = []
        left = st.st_size - start
        while left > 0:
            b = os.read(fd, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = b"".join(chunks).decode(errors="replace")
    if start > offset:
        text = text.split("\n", 1)[-1]
    return text


def current_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events since the current attempt started (all of them when none started)."""
    last = max((i for i, e in enumerate(events) if e.get("event") == "started"), default=-1)
    return events[last + 1:] if last >= 0 else events


def log_verdict(text: str) -> tuple[str, str] | None:
    """What start_verl.sh's own last words in ``text`` (the current attempt's log) say: finished, or exited
    with a status; None when they say neither."""
    exits = list(_EXIT_RE.finditer(text))
    finished_at = text.rfind("] training finished")
    if exits and exits[-1].start() > finished_at:
        status = exits[-1].group(1)
        return "failed", f"start_verl.sh exited with status {status}"
    if finished_at >= 0:
        return "finished", "its log says training finished"
    return None


def _ago(t: Any, now: float) -> str:
    try:
        s = max(0.0, now - float(t))
    except (TypeError, ValueError):
        return ""
    if s < 120:
        return f"{s:.0f}s ago"
    if s < 7200:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} days ago"


def _first_line(text: Any, limit: int = 160) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def decide(record: RunRecord, events: list[dict[str, Any]], live: dict[str, Any] | None = None,
           log_text: str | None = None, alive: bool | None = None, watcher: bool = False,
           now: float | None = None, progress: dict[str, Any] | None = None) -> RunState:
    """The run's state from what is known. ``log_text``: the current attempt's part of the log (None: not
    read); ``alive``: the verified process check (None: not probed); ``watcher``: its watcher is alive."""
    now = time.time() if now is None else now
    if progress and progress.get("step") is not None and not (live and live.get("step") is not None):
        live = {**(live or {}), "step": progress.get("step"), "total": progress.get("total"),
                "attempt": len(record.attempts)}
    kinds = [e.get("event") for e in events]
    started = "started" in kinds or bool(record.attempts) or bool(record.slurm_jobs)
    cur = current_events(events)
    by_kind: dict[str, dict[str, Any]] = {}
    for e in cur:
        by_kind[str(e.get("event"))] = e
    if not started:
        failed = by_kind.get("launch_failed")
        if failed is not None:
            return RunState("never started", f"the launch failed: {_first_line(failed.get('error'))}", "events")
        if record.stopped:
            return RunState("never started", "stopped before any attempt started", "events")
        launched = by_kind.get("launch")
        when = f" (launched {_ago(launched.get('time'), now)})" if launched else ""
        return RunState("never started", f"no attempt was recorded{when}: the launch may still be preparing, "
                        "or it was interrupted", "events")
    given = by_kind.get("gave_up")
    if alive is True and given is not None:
        # The watcher gave up on this attempt, which still runs (a stall): one verdict with `list`, and why
        # its devices are still held.
        text = _first_line(given.get("reason"))
        text = "the watcher gave up: " + text[len("gave up: "):] if text.startswith("gave up: ") else text
        return RunState("failed", f"{text}; its processes still run and hold the devices: "
                        f"`verlctl stop {record.run_id}`", "events")
    if alive is True:
        return RunState("running", _running_why(record, live, now), "process")
    # The watcher's and the launch's own last words on the current attempt.
    for kind in ("launch_failed", "gave_up", "resume_failed"):
        failure = by_kind.get(kind)
        if failure is not None:
            text = _first_line(failure.get("error") if kind == "launch_failed" else failure.get("reason"))
            if kind == "gave_up" and text.startswith("gave up: "):
                text = "the watcher gave up: " + text[len("gave up: "):]
            return RunState("failed", text or kind.replace("_", " "), "events")
    if "finished" in by_kind:
        return RunState("finished", _finished_why(record, live), "events")
    verdict = log_verdict(log_text) if log_text is not None else None
    if verdict is not None and verdict[0] == "finished":
        nothing = resume_failure(record, log_text or "", progress)
        if nothing is not None:  # no watcher judged it: the same judgement as the watcher's
            return RunState("failed", nothing, "log")
        return RunState("finished", _finished_why(record, live), "log")
    stopped_ev = by_kind.get("stopped")
    signalled = stopped_ev is None or bool(stopped_ev.get("signalled", True))
    # A stop that signalled nothing (the run had ended) keeps the log's verdict (N9).
    if ("stopped" in by_kind or record.stopped) and (signalled or verdict is None):
        e = by_kind.get("stopped") or by_kind.get("launch_interrupted") or {}
        if e.get("event") == "launch_interrupted":  # the interrupted launch's clean-up stopped it, not `stop`
            reason = f"when its launch was interrupted ({e.get('signal') or 'a signal'})"
        else:
            reason = e.get("reason") or "with `verlctl stop`"
        return RunState("stopped", f"stopped {reason} {_ago(e.get('time'), now)}".strip(), "events")
    if verdict is not None:
        return RunState(verdict[0], verdict[1], "log")
    if alive is False:
        return RunState("failed", "its process group has ended and the log says neither that training "
                        "finished nor how it exited", "process")
    if watcher and live:
        phase = str(live.get("phase") or "")
        if phase in ("starting", "training"):
            return RunState("running", _running_why(record, live, now) + " (from its watcher)", "events")
    return RunState("unknown", "no final event recorded and the process was not checked: "
                    f"`verlctl status {record.run_id}` checks it", "none")


_TOTAL_RE = re.compile(r"Total training steps: (\d+)")
_BAR_RE = re.compile(r"Training Progress:.*?\|\s*(\d+)/(\d+)")


def resume_failure(record: RunRecord, log_text: str, progress: dict[str, Any] | None = None) -> str | None:
    """Why the current attempt, which its log says finished, is a failure: it resumed from a checkpoint and
    trained no step past it (:func:`verlctl.monitor.health.resume_trained_nothing`, the watcher's judgement).
    ``log_text``: the attempt's part of the log; ``progress``: what its progress bar says, when parsed."""
    from verlctl.monitor.health import resume_trained_nothing

    if not record.attempts or not record.attempts[-1].resumed_from:
        return None
    steps = [int(m.group(1)) for m in _STEP_RE.finditer(log_text)]
    bars = [(int(m.group(1)), int(m.group(2))) for m in _BAR_RE.finditer(log_text)]
    totals = [int(m.group(1)) for m in _TOTAL_RE.finditer(log_text)] + [t for _, t in bars]
    seen = steps + [b for b, _ in bars]
    if progress and isinstance(progress.get("step"), int):
        seen.append(progress["step"])
        if isinstance(progress.get("total"), int):
            totals.append(progress["total"])
    attempt = record.attempts[-1]
    return resume_trained_nothing(attempt.resumed_from, max(seen) if seen else None,
                                  totals[-1] if totals else None, attempt.number, saved_at=lambda: _saved_at(record))


def _saved_at(record: RunRecord) -> str | None:
    """The checkpoint verl's tracker names now, read on this host (the checkpoint directory is mounted at the
    same path; elsewhere nothing is read and nothing changes), for the run's resume mode."""
    from verlctl.orchestrator.resume import resume_point

    spec = None
    with contextlib.suppress(Exception):  # a damaged or older record: verlctl's resume mode (auto)
        spec = record.load_spec().spec
    return resume_point(record.checkpoints, spec)


def _running_why(record: RunRecord, live: dict[str, Any] | None, now: float) -> str:
    n = len(record.attempts) or len(record.slurm_jobs)
    parts = [f"attempt {n}"] if n else []
    if live and live.get("attempt") == n and live.get("step") is not None:
        total = live.get("total")
        parts.append(f"step {live['step']}{'/' + str(total) if total else ''}")
        if live.get("updated_at"):
            parts.append(f"seen {_ago(live['updated_at'], now)}")
    elif n:
        parts.append("starting (no step seen yet)" if not live or live.get("attempt") != n or
                     live.get("phase") == "starting" else str(live.get("phase")))
    return ", ".join(parts)


def _finished_why(record: RunRecord, live: dict[str, Any] | None) -> str:
    n = len(record.attempts) or len(record.slurm_jobs)
    parts = []
    if live and live.get("step") is not None:
        total = live.get("total")
        parts.append(f"step {live['step']}{'/' + str(total) if total else ''}")
    parts.append(f"{n} attempt{'s' if n != 1 else ''}")
    return ", ".join(parts)


def _restarts(events: list[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any], dict[str, Any] | None, str]]:
    """(the attempt it started, the recovery event, the alert before it of the same attempt, the failure in
    words) per automatic restart, in order."""
    attempt = 1
    last_alert: dict[str, Any] | None = None
    for e in events:
        kind = e.get("event")
        if kind == "started":
            with contextlib.suppress(TypeError, ValueError):
                attempt = int(e.get("attempt") or attempt)
            last_alert = None
        elif kind == "alert":
            last_alert = e
        elif kind == "recovery":
            category = str(e.get("category") or "")
            what = CATEGORY_WORDS.get(category, category.replace("_", " ") or "a failure")
            yield attempt + 1, e, last_alert, what


def failing_step(alert: dict[str, Any] | None) -> int | None:
    """The step that failed: the one after the last step the alert saw finish (its ``step``: verl prints a
    step's line, and its progress bar counts it, once the step is done, checkpoint and validation included);
    1 when none had finished. None without an alert."""
    if alert is None:
        return None
    step = alert.get("step")
    return step + 1 if isinstance(step, int) else 1


@dataclass
class Restart:
    """One automatic restart and what became of the attempt it started."""

    attempt: int
    words: str  # "attempt 2 added offload after out of memory in step 3, resuming from global_step_2"
    outcome: str  # recovered (finished, or saved a checkpoint past the step that failed) / failed again / running
    failed_step: int | None = None

    @property
    def recovered(self) -> bool:
        return self.outcome == "recovered"

    def line(self) -> str:
        """``recovered: …`` only for an attempt that got past its failure; ``restarted: …`` otherwise."""
        if self.recovered:
            return f"recovered: {self.words}"
        return f"restarted: {self.words}" + ("; it failed again" if self.outcome == "failed again"
                                             else " (not past the failure yet)")

    def as_dict(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "outcome": self.outcome, "words": self.words, "line": self.line()}


def _outcome(events: list[dict[str, Any]], attempt: int, failed_step: int | None) -> str:
    """What became of ``attempt`` (from its own events: after its ``started``, before the next one)."""
    mine = False
    outcome = "running"
    for e in events:
        kind = e.get("event")
        if kind == "started":
            if mine:
                break
            mine = e.get("attempt") == attempt
            continue
        if not mine:
            continue
        if kind in ("alert", "failure", "recovery", "gave_up", "resume_failed"):
            return "failed again"
        past = kind == "checkpoint_saved" and failed_step is not None and isinstance(e.get("step"), int) \
            and e["step"] >= failed_step  # a checkpoint of the step that failed: it got past it
        if kind == "finished" or past:
            outcome = "recovered"
    return outcome


def restarts(events: list[dict[str, Any]]) -> list[Restart]:
    """Each automatic restart, in order, with what became of the attempt it started (status, report, --json)."""
    out: list[Restart] = []
    for attempt, e, last_alert, what in _restarts(events):
        category = str(e.get("category") or "")
        alert = last_alert if last_alert and last_alert.get("category") == category else None
        step = failing_step(alert)
        at = f" in step {step}" if step is not None else ""
        added = e.get("add_feature")
        did = f"added {added}" if added else "restarted"
        resumed = e.get("resumed_from")
        tail = f", resuming from {str(resumed).rstrip('/').rsplit('/', 1)[-1]}" if resumed else ""
        out.append(Restart(attempt, f"attempt {attempt} {did} after {what}{at}{tail}",
                           _outcome(events, attempt, step), step))
    return out


def recoveries(events: list[dict[str, Any]]) -> list[str]:
    """One line per automatic restart, in order: "attempt 2 added offload after out of memory in step 3"."""
    return [r.words for r in restarts(events)]


def gave_up(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The watcher's give-up of the current attempt (None when it did not give up)."""
    return next((e for e in reversed(current_events(events)) if e.get("event") == "gave_up"), None)


def launch_failure(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A launch that failed before training, as a finding (``Finding.to_dict``'s keys) from its event: what
    ``report`` and ``bundle`` diagnose when the log has no error (the launch stopped before verl wrote one)."""
    failed = next((e for e in reversed(events) if e.get("event") == "launch_failed"), None)
    if failed is None or any(e.get("event") == "started" for e in events[events.index(failed):]):
        return None
    error = str(failed.get("error") or "the launch failed")
    return {"category": "launch_failed", "line": 0, "excerpt": _first_line(error, 300),
            "message": f"the launch failed before training: {error}",
            "hint": str(failed.get("hint") or "fix what the message names, then launch again"), "count": 1}


def ladder_tried(events: list[dict[str, Any]]) -> list[str]:
    """The memory features the OOM ladder added, in order."""
    return [str(e["add_feature"]) for e in events if e.get("event") == "recovery" and e.get("add_feature")]


def hint_after_recovery(category: str | None, hint: str | None, events: list[dict[str, Any]],
                        watching: bool = False) -> str | None:
    """What to do about a finding of the run, after what recovery did: a device OOM's hint drops the rungs the
    ladder already tried and, after a give-up, is the watcher's advice; while a watcher climbs the ladder it
    says so (nothing to do yet). Other findings keep their hint."""
    if category != "device_oom":
        return hint
    from verlctl.monitor.catalogue import oom_hint

    given = gave_up(events)
    advice = (given.get("advice") or []) if given is not None else []
    return oom_hint(ladder_tried(events), watching=watching and given is None, advice=advice)


def restart_markers(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    """(step, "attempt 2: offload added after out of memory") per automatic restart, for the charts: the step
    the next attempt resumed from (its checkpoint), else the step the failure was seen at, else 0."""
    out: list[tuple[int, str]] = []
    for attempt, e, last_alert, what in _restarts(events):
        m = re.search(r"global_step_(\d+)", str(e.get("resumed_from") or ""))
        step = int(m.group(1)) if m else (last_alert or {}).get("step")
        added = e.get("add_feature")
        did = f"{added} added" if added else "restarted"
        out.append((step if isinstance(step, int) else 0, f"attempt {attempt}: {did} after {what}"))
    return out
