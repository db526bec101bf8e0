"""The Launcher's real start/verify path on the host runtime (start_verl.sh is a TEST DOUBLE per test).

* Ray start-up failures are named and a head start that fails so is retried once (issue 24, newcomer N2: 5 of
  11 launches on a loaded host died with Ray's "node timed out during startup", reported as a generic Python
  traceback with a Hydra hint); the double fails its first start(s) the way Ray's start-up timeout does (Ray
  itself cannot be overloaded on purpose here, deterministically).
* The settle rule of verify: a trainer is called started when it is still alive ``settle_s`` after its first
  line, not after start_verl.sh's marker: on a loaded host the trainer's interpreter can take longer than
  ``settle_s`` to print at all, and a crash right after its first line was then verified as a start.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.errors import RuntimeFailure
from verlctl.monitor.summary import diagnose_text

from launch_support import write_run_files

RAY_TIMEOUT = ("Exception: The current node timed out during startup. This could happen because some of the raylet "
               "failed to startup or the GCS has become overloaded.")
HEAD_EXITED = "[verlctl 08:41:21] ERROR: the Ray head exited while starting (see the lines above)"
SETTLE_S = 5.0


def test_the_catalogue_names_ray_start_up_failures_with_the_fix() -> None:
    log = "\n".join(["Traceback (most recent call last):", '  File "ray/_private/node.py", line 411, in __init__',
                     RAY_TIMEOUT, HEAD_EXITED, "[verlctl 08:41:21] start_verl.sh exits with status 1"])
    top = diagnose_text(log).findings[0]
    assert top.category == "ray_start_timeout", top
    assert "RAY_raylet_start_wait_time_s" in top.hint and "cluster.join_timeout_s" in top.hint
    assert "HYDRA" not in top.hint and "loaded host" in top.hint
    joined = ("[verlctl 09:09:10] ERROR: only 4 of 8 NPU devices joined Ray within 120s: check that start_verl.sh "
              "runs on every node and that they reach 192.0.2.2:34353")
    top = diagnose_text(joined).findings[0]
    assert top.category == "ray_devices_missing" and top.message == "only 4 of 8 NPU devices joined Ray within 120s"
    assert "cluster.join_timeout_s" in top.hint and "RAY_raylet_start_wait_time_s" in top.hint
    # a worker whose Ray timed out, then the head's join timeout: the node's start-up failure is the root cause
    both = "\n".join(["(raylet) Failed to connect to GCS. Please check `gcs_server.out` for more details.",
                      RAY_TIMEOUT, joined])
    assert diagnose_text(both).findings[0].category == "ray_start_timeout"


@pytest.fixture
def launcher_on_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from rich.console import Console

    from verlctl.orchestrator.launch import Launcher, LaunchOptions
    from verlctl.plan import make_plan
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import RunRecord, new_run_id
    from verlctl.spec.resolve import load_spec

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    paths = write_run_files(tmp_path)
    spec = {"paths": {"model": paths["paths.model"], "train_files": paths["paths.train_files"],
                      "val_files": paths["paths.val_files"], "checkpoints": str(tmp_path / "ckpt"),
                      "logs": str(tmp_path / "logs")},
            "container": {"runtime": "host"}, "cluster": {"devices": [0, 1, 2, 3]},
            "train": {"steps": 5, "tensor_parallel": 2}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    resolved = load_spec(tmp_path / "spec.yaml", environ={})
    the_plan = make_plan(resolved)
    run_id = new_run_id("raytry")
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    record = RunRecord(run_id=run_id, created_at=0, runtime="host", workdir=str(tmp_path), scripts_dir=str(scripts),
                       run_log=str(tmp_path / "logs" / f"verlctl-{run_id}.log"), train_log="",
                       checkpoints=str(tmp_path / "ckpt"), experiment="raytry", verl_version="0.7.0")
    record.save()
    out = io.StringIO()
    launcher = Launcher(resolved, LaunchOptions(yes=True, verify_timeout=120, settle_s=SETTLE_S),
                        Console(file=out, width=200))
    ex = HostExecutor()
    started: list[Any] = []

    def run(fail_first: int = 0, failure: str = RAY_TIMEOUT + "\n" + HEAD_EXITED,
            script: str | None = None) -> tuple[Any, str]:
        (scripts / "start_verl.sh").write_text(script or f"""#!/bin/bash
# TEST DOUBLE of start_verl.sh: its first {fail_first} start(s) fail as given; then training starts.
d="$(dirname "$0")"
n=$(cat "$d/starts" 2>/dev/null || echo 0); echo $((n + 1)) > "$d/starts"
if [ "$n" -lt {fail_first} ]; then
  cat <<'LOG'
{failure}
LOG
  exit 1
fi
echo "[verlctl] training starts"
echo "Training Progress:   20%|##        | 1/5 [00:01<00:04,  1.00s/it]"
exec sleep 120
""", encoding="utf-8")
        launcher.start(ex, record, the_plan, reason="launch")
        started.append(record)
        try:
            launcher.verify_retrying_ray(ex, record, record.attempts[-1].ref, the_plan)
        except RuntimeFailure as exc:
            return exc, out.getvalue()
        return None, out.getvalue()

    yield run, record
    for r in started:
        for a in r.attempts:
            ex.stop_group(a.ref, grace_s=5)


def test_a_head_start_that_times_out_is_retried_once_and_the_launch_goes_on(launcher_on_host) -> None:  # type: ignore[no-untyped-def]
    run, record = launcher_on_host
    exc, out = run(fail_first=1)
    assert exc is None, (exc, out)
    assert [a.reason for a in record.attempts] == ["launch", "retry after ray_start_timeout"]
    assert "Ray did not come up (ray_start_timeout" in out and "starting once more" in out, out
    kinds = [e["event"] for e in record.events()]
    assert kinds.count("started") == 2 and "ray_start_retry" in kinds and kinds[-1] == "verified", kinds


def test_a_second_ray_timeout_gives_up_naming_ray_not_a_python_traceback(launcher_on_host) -> None:  # type: ignore[no-untyped-def]
    run, record = launcher_on_host
    exc, out = run(fail_first=5)
    assert isinstance(exc, RuntimeFailure) and "ray_start_timeout" in exc.message, (exc, out)
    assert "python_exception" not in exc.message and "HYDRA" not in (exc.hint or "")
    assert len(record.attempts) == 2  # once more, not more


def test_a_failure_that_is_not_ray_start_up_is_not_retried(launcher_on_host) -> None:  # type: ignore[no-untyped-def]
    run, record = launcher_on_host
    exc, _out = run(fail_first=5, failure="Traceback (most recent call last):\nValueError: bad data file")
    assert isinstance(exc, RuntimeFailure) and len(record.attempts) == 1


def test_a_trainer_that_dies_within_settle_s_of_its_first_line_is_not_verified(
        launcher_on_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The trainer's interpreter prints its first line 6 s after the marker (longer than settle_s, as on a loaded
    host) and dies 3 s later, before any progress: a failed start, named so, not a verified one. The trainer is
    a TEST DOUBLE run as the plan's entry module (``python3 -m recipe.dapo.main_dapo`` here, the process verify
    looks for), from a directory of its own."""
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec

    run, record = launcher_on_host
    module = make_plan(load_spec(tmp_path / "spec.yaml", environ={})).command.entry.module
    pkg = tmp_path / "pkg"
    entry = pkg.joinpath(*module.split("."))
    entry.parent.mkdir(parents=True)
    for d in (pkg / module.split(".")[0], entry.parent):
        (d / "__init__.py").write_text("", encoding="utf-8")
    entry.with_suffix(".py").write_text("import sys, time\nprint('Platform override: cpu', flush=True)\n"
                                        "time.sleep(3)\nsys.exit('ValueError: bad data file')\n")
    script = f"""#!/bin/bash
# TEST DOUBLE of start_verl.sh: the marker, then a trainer that is slow to print and dies before any progress.
echo "[verlctl] training starts"
sleep 6
PYTHONPATH={pkg} exec python3 -m {module}
"""
    from verlctl.orchestrator.launch import LaunchOptions

    assert LaunchOptions().settle_s == 10.0 and SETTLE_S < 6  # the marker-to-first-line gap exceeds settle_s
    exc, out = run(script=script)
    assert isinstance(exc, RuntimeFailure), out
    assert exc.message.startswith("the training process exited during start-up"), exc.message
    kinds = [e["event"] for e in record.events()]
    assert "verified" not in kinds and kinds[-1] == "failure", kinds


def test_a_short_run_that_prints_its_steps_and_ends_before_verify_looks_is_verified_not_a_failed_start(
        launcher_on_host, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """A one-step run prints its step and ends at once: its whole log is judged once its group is gone (issue 40:
    on a busy CI machine verify saw the group gone before its follower had returned the step, and called the
    finished run a start that failed). The group is gone before verify's first look here: start_verl.sh's
    double ends at once and verify is entered after it has. (The race itself, a follower behind a dead group,
    is not made here on purpose: ``Follower.drain``'s tests hold what closes it.)"""
    import time

    run, record = launcher_on_host
    script = """#!/bin/bash
# TEST DOUBLE of start_verl.sh: a run that trains one step and ends.
echo "[verlctl] training starts"
echo "Total training steps: 1"
echo "step:1 - actor/pg_loss:0.1 - training/global_step:1"
echo "[verlctl 05:34:30] training finished"
"""
    from verlctl.orchestrator.launch import Launcher

    entered: list[float] = []
    real_verify = Launcher.verify

    def verify_after_the_end(self, ex, rec, group, module):  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + 30
        while ex.group_alive(group):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        entered.append(time.monotonic())
        return real_verify(self, ex, rec, group, module)

    monkeypatch.setattr(Launcher, "verify", verify_after_the_end)
    exc, out = run(script=script)
    assert entered and exc is None, (exc, out)
    assert "training is running: Total training steps: 1" in out, out
    kinds = [e["event"] for e in record.events()]
    assert kinds[-1] == "verified" and "failure" not in kinds, kinds
