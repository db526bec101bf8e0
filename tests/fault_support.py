"""Set-up helpers shared by the bad-input, adversarial, ownership and fault tests (tests/spec/test_bad_input.py,
tests/runtime/, tests/orchestrator/test_faults_*.py): one place for the base spec,
the one-line-error check, hand-written run records, real test processes and the launch-and-watch steps.
Nothing here is a double: the processes are real, and so are the CLI runs and the watcher."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from conftest import clean_env, run_cli

# ---------------------------------------------------------------- bad input: a base spec, one error line

BASE_PATHS = {"model": "/m/Qwen3-8B", "train_files": "/d/t.parquet", "val_files": "/d/v.parquet"}


def write_base(tmp_path: Path, text: str = "", **extra: object) -> Path:
    """A spec file `base.yaml` with the three paths set, plus the top-level keys of ``extra`` and then ``text``
    verbatim (raw YAML that safe_dump could not write: anchors, aliases, a huge number)."""
    data: dict[str, Any] = {"paths": dict(BASE_PATHS), **extra}
    p = tmp_path / "base.yaml"
    p.write_text(yaml.safe_dump(data) + text, encoding="utf-8")
    return p


def one_line_error(res) -> str:  # type: ignore[no-untyped-def]
    """The single stderr line of a failed command (asserts exit != 0, one line, no traceback)."""
    assert res.code != 0, (res.out, res.err)
    assert "Traceback" not in res.out + res.err, res.err
    lines = [ln for ln in res.err.splitlines() if ln.strip()]
    assert len(lines) == 1, res.err
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


# ---------------------------------------------------------------- ownership: records and real processes


def leader_start(pid: int) -> int:
    """The start time (clock ticks since boot, /proc/PID/stat field 22) of a live process."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    return int(raw[raw.rfind(")") + 2:].split()[19])


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return st[st.rfind(")") + 2] != "Z"


def wait_for(cond: Callable[[], object], timeout: float = 20.0, every: float = 0.05) -> bool:
    """Poll ``cond`` until it is true or ``timeout`` s pass; its last value, as a bool."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return bool(cond())


def record_doc(state: Path, run: str, pgid: int, created_at: float | None = None,
               **attempt: object) -> dict[str, Any]:
    """A host run record as `launch` writes it, with one attempt whose fields ``attempt`` adds to."""
    return {
        "run_id": run, "created_at": time.time() if created_at is None else created_at, "runtime": "host",
        "workdir": str(state), "scripts_dir": str(state / "scripts"), "run_log": str(state / "run.log"),
        "train_log": "", "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0", "pgid": pgid,
        "attempts": [{"number": 1, "pgid": pgid, "started_at": time.time(), **attempt}],
    }


def write_record(state: Path, run: str, pgid: int, created_at: float | None = None, **attempt: object) -> Path:
    """Write ``record_doc`` as STATE/runs/RUN/run.json; the run's directory."""
    d = state / "runs" / run
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(record_doc(state, run, pgid, created_at, **attempt)), encoding="utf-8")
    return d


def state_cli(state: Path, *args: str):  # type: ignore[no-untyped-def]
    """`verlctl ARGS` with the state dir STATE and a wide terminal."""
    return run_cli(*args, env=clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS="250"))


def started_procs() -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """The body of a `procs` fixture (`yield from started_procs()`): start real processes, each in a session of
    its own; every one is SIGKILLed (its group) at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], env: dict[str, str] | None = None, user: int | None = None,
              clear_env: bool = False) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(argv, start_new_session=True,
                             env=(env or {}) if clear_env else {**os.environ, **(env or {})},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=user)
        started.append(p)
        return p

    yield start
    for p in started:
        with contextlib.suppress(OSError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


# ---------------------------------------------------------------- faults: launch, watch, read the events
# (a LaunchEnv of tests/launch_support.py: the real engine, the stand-in trainer)


def run_dir(env: Any) -> Path:
    """The one run directory of a LaunchEnv's state dir."""
    return next((env.state / "runs").iterdir())


def events(env: Any) -> list[dict[str, Any]]:
    """The run's events.jsonl, parsed (empty before the first event)."""
    p = run_dir(env) / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def poll_value(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``pred`` every 0.2 s until it returns something true, and return that; fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def wait_event(env: Any, kind: str, timeout: float = 240) -> dict[str, Any]:
    """The first event of ``kind``, polled for up to ``timeout`` s; fails with the events seen."""
    def find() -> dict[str, Any] | None:
        return next((e for e in events(env) if e["event"] == kind), None)

    try:
        return poll_value(find, timeout, kind)  # type: ignore[no-any-return]
    except AssertionError:
        raise AssertionError(f"no {kind!r} event within {timeout} s; got {[e['event'] for e in events(env)]}") from None


def launch_and_watch(env: Any) -> subprocess.Popen[str]:
    """`launch --yes` (must succeed), then a `watch` process, returned once it has said watch_started."""
    res = env.cli("launch", "-c", str(env.spec_file), "--yes")
    assert res.code == 0, res.out + res.err
    watch = subprocess.Popen([sys.executable, "-m", "verlctl", "watch"], env=env.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    wait_event(env, "watch_started", 60)
    return watch


def finish_watch(watch: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    """The watcher's exit code and output; fails (and kills it) if it has not ended within ``timeout`` s."""
    try:
        out = watch.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        watch.kill()
        out = watch.communicate()[0]
        raise AssertionError(f"the watcher did not end: {out}") from None
    return watch.returncode, out
