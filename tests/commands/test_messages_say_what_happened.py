"""Small wordings that said something untrue or broke the one-line rule: a run stopped by its interrupted
launch's clean-up (not by `verlctl stop`), a path with a newline in an error, a --scan-root that is not there,
a SwanLab run without a workspace (SwanLab's default, not "None")."""

from __future__ import annotations

import time
from pathlib import Path

from conftest import clean_env, run_cli, run_cli_many
from fault_support import one_line_error, write_base


def test_a_run_stopped_by_its_interrupted_launch_does_not_say_verlctl_stop() -> None:
    from verlctl.orchestrator.runstate import decide
    from verlctl.runtime.records import Attempt, RunRecord

    now = time.time()
    record = RunRecord(run_id="20261206-120000-int-ab12", created_at=now - 60, runtime="host", workdir="/w",
                       scripts_dir="/w/s", run_log="/w/l.log", train_log="", checkpoints="/c", experiment="int",
                       verl_version="0.7.0", stopped=True, attempts=[Attempt(number=1, pgid=4242, started_at=now - 50)])
    events = [{"time": now - 50, "event": "started", "attempt": 1},
              {"time": now - 40, "event": "launch_interrupted", "signal": "SIGHUP", "pgid": 4242}]
    st = decide(record, events, None, None, alive=False, now=now)
    assert st.state == "stopped" and "interrupted (SIGHUP)" in st.why and "verlctl stop" not in st.why, st
    stopped = decide(record, [*events[:1], {"time": now - 10, "event": "stopped"}], None, None, alive=False, now=now)
    assert "with `verlctl stop`" in stopped.why, stopped  # a real stop still says so


def test_an_error_naming_a_path_with_a_newline_stays_one_line(tmp_path: Path) -> None:
    res = run_cli("diagnose", str(tmp_path / "a\nb"), env=clean_env())
    line = one_line_error(res)
    assert "a\\nb" in line, line


def test_a_scan_root_given_by_hand_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    cases = [["detect", "models", "--scan-root", str(tmp_path / "nope")],
             ["detect", "models", "--scan-root", ""],
             ["detect", "datasets", "--scan-root", str(tmp_path / "f")]]
    for argv, res in zip(cases, run_cli_many(cases), strict=True):
        line = one_line_error(res)
        assert line.startswith("error: --scan-root"), (argv, line)
    ok = run_cli_many([["detect", "models", "--scan-root", str(tmp_path), "--json"]])[0]
    assert ok.code == 0, ok.err


def test_a_swanlab_run_without_a_workspace_says_swanlabs_default(tmp_path: Path) -> None:
    base = write_base(tmp_path, logging={"swanlab": {"enabled": True, "host": "http://192.0.2.1:8000",
                                                      "mode": "offline"}})
    res = run_cli("plan", "-c", str(base), env=clean_env(COLUMNS="200"))
    assert res.code == 0, res.err
    assert "workspace None" not in res.out and "workspace your own (SwanLab's default)" in res.out, res.out
