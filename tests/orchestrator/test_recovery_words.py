"""Recovery in words that match what happened: the OOM give-up's advice and reason, the words for an attempt
that failed again, the failing step, and the hint after the ladder was climbed."""

from __future__ import annotations

import itertools
import json
import re
import time
from pathlib import Path

import pytest

from verlctl.monitor.recovery import History, decide, oom_advice, rollout_oom_advice
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS

_MOVE = re.compile(r"^(lower|shorten|raise) (\S+) from (\S+) to (\S+)")


def _moves(advice: list[str]) -> list[tuple[str, str, float, float]]:
    out = []
    for line in advice:
        m = _MOVE.match(line)
        assert m is not None, line
        out.append((m.group(1), m.group(2), float(m.group(3)), float(m.group(4))))
    return out


@pytest.mark.parametrize("length", [16, 32, 255, 256, 300, 384, 512, 1024, 8192])
def test_oom_advice_never_moves_a_value_the_wrong_way_or_to_the_value_it_has(length: int) -> None:
    for util, micro, n in itertools.product([0.3, 0.35, 0.36, 0.6, 0.9], [1, 2, 3], [1, 4, 5, 8]):
        spec = RunSpec.model_validate({"train": {
            "max_response_length": length, "rollout_memory_utilization": util,
            "micro_batch_size_per_device": micro, "responses_per_prompt": n}})
        for advice in (oom_advice(spec), rollout_oom_advice(spec)):
            for verb, key, old, new in _moves(advice):
                assert (new < old) if verb in ("lower", "shorten") else (new > old), (verb, key, old, new)
    spec = RunSpec.model_validate({"train": {"max_response_length": length}})
    shorten = [a for a in oom_advice(spec) if "max_response_length" in a]
    # RV4-1: 32 -> 256 lengthened it; 256 -> 256 changed nothing
    assert bool(shorten) == (length > 256), shorten
    if length == 1024:
        assert shorten == ["shorten train.max_response_length from 1024 to 512"]


def test_the_give_up_reason_names_each_rung_and_why_it_was_not_climbed(tmp_path: Path) -> None:
    # RV4-2a: offload added by the ladder, recompute skipped by the estimate (FSDP checkpoints activations
    # already): "every memory feature is already on (or disabled)" was false
    from test_memory_fit import model_dir

    flags = {"algorithm": "dapo", "strategy": "fsdp", "device": "npu", "cluster.device_memory_gib": 64.0,
             "cluster.host_memory_gib": 2048.0, "paths.model": model_dir(tmp_path, "Qwen3-14B"),
             "train.tensor_parallel": 2, "train.pipeline_parallel": 1}
    spec = load_spec(None, flags={**BASE_PATHS, **flags}, environ={}).spec
    on = {"remove_padding": True, "dynamic_batch": True, "gradient_checkpointing": True, "offload": True}
    d = decide("device_oom", spec, on, History(oom_retries=1, added=["offload"]))
    assert not d.restart
    assert "already on (or disabled)" not in d.reason, d.reason
    assert "offload is on (added by the ladder)" in d.reason, d.reason
    assert "recompute was skipped: the memory estimate says it cannot help" in d.reason, d.reason
    # a rung the user disabled is said as such
    spec2 = load_spec(None, flags={**BASE_PATHS, **flags, "features.disable": ["recompute"]}, environ={}).spec
    d2 = decide("device_oom", spec2, on, History(oom_retries=1, added=["offload"]))
    assert "recompute is disabled (features.disable)" in d2.reason, d2.reason


# ---- status, list and report after the ladder gave up (real records, real host logs) ----------------------

from test_run_state import cli, group, started, write_run  # noqa: E402,F401 - the same record helpers

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
EXIT1 = "[verlctl 08:20:00] start_verl.sh exits with status 1\n"
ADVICE = ["shorten train.max_response_length from 8192 to 4096",
          "lower train.rollout_memory_utilization from 0.6 to 0.5"]


def _gave_up_run(state: Path, tmp_path: Path) -> str:
    """OOM in step 2 on every attempt: offload added, recompute added, then the ladder gave up (U35)."""
    run_id = "20261201-090000-oomgaveup-a1a1"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    parts = ["step:1 - critic/score/mean:0.1\n" + OOM + EXIT1, OOM + EXIT1, OOM + EXIT1]
    log.write_text("".join(parts), encoding="utf-8")
    offsets = [0, len(parts[0].encode()), len((parts[0] + parts[1]).encode())]

    def alert(n: int) -> dict:
        return {"event": "alert", "category": "device_oom", "message": "CUDA out of memory", "attempt": n,
                "step": 1, "hint": "enable the `offload` feature, then `recompute` (the watcher's OOM ladder does "
                "this: `verlctl launch --watch`, `verlctl watch`); or lower ..."}

    write_run(state, run_id, log, attempts=3, offsets=offsets, events=[
        started(1), alert(1),
        {"event": "recovery", "category": "device_oom", "add_feature": "offload",
         "resumed_from": "/ckpt/global_step_1"},
        started(2), alert(2),
        {"event": "recovery", "category": "device_oom", "add_feature": "recompute",
         "resumed_from": "/ckpt/global_step_1"},
        started(3), alert(3),
        {"event": "gave_up", "category": "device_oom",
         "reason": "gave up: out of memory after 2 recovery attempt(s): giving up", "advice": ADVICE}])
    return run_id


def test_after_a_give_up_status_says_restarted_and_leads_with_the_advice(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = _gave_up_run(state, tmp_path)
    doc = json.loads(cli(state, "status", run_id, "--json").out)
    assert doc["state"] == "failed" and doc["recovered"] == [], doc
    assert [r["outcome"] for r in doc["restarts"]] == ["failed again", "failed again"], doc["restarts"]
    # RV4-2c: the last finished step was 1; the OOM was in step 2
    assert doc["restarts"][0]["words"] == ("attempt 2 added offload after out of memory in step 2, "
                                           "resuming from global_step_1"), doc["restarts"]
    # RV4-2b / U35: the hint is the advice, not the rungs already tried
    hint = doc["last_error"]["hint"]
    assert hint.startswith(ADVICE[0]) and "enable" not in hint, hint
    out = cli(state, "status", run_id).out
    assert "recovered:" not in out and "restarted: attempt 2 added offload" in out and "it failed again" in out
    assert "enable the `offload`" not in out, out
    assert out.index("advice: " + ADVICE[0]) < out.index("last error"), out  # the advice leads


def test_after_a_give_up_the_report_leads_with_the_advice_and_calls_no_attempt_recovered(tmp_path: Path) -> None:
    state = tmp_path / "state"
    run_id = _gave_up_run(state, tmp_path)
    page = tmp_path / "r.html"
    res = cli(state, "report", run_id, "-o", str(page))
    assert res.code == 0, res.err
    html = page.read_text()
    diagnosis = html[html.index("<h2>Diagnosis</h2>"):html.index("<h2>Attempts and restarts</h2>")]
    assert '<li class="ok">' not in diagnosis and "recovered:" not in diagnosis, diagnosis
    assert "restarted: attempt 3 added recompute" in diagnosis and "it failed again" in diagnosis, diagnosis
    assert diagnosis.index("advice: " + ADVICE[0]) < diagnosis.index('id="findings"'), diagnosis
    assert "enable the `offload`" not in diagnosis and "then `recompute`" not in diagnosis, diagnosis


def test_a_restart_that_got_past_its_failure_is_recovered() -> None:
    from verlctl.orchestrator.runstate import restarts

    base = [started(1), {"event": "alert", "category": "device_oom", "step": 4},
            {"event": "recovery", "category": "device_oom", "add_feature": "offload"}, started(2)]
    (r,) = restarts(base)
    assert (r.outcome, r.failed_step) == ("running", 5) and r.line().startswith("restarted: "), r
    (r,) = restarts([*base, {"event": "checkpoint_saved", "step": 4}])  # not past step 5 yet
    assert r.outcome == "running", r
    (r,) = restarts([*base, {"event": "checkpoint_saved", "step": 5}])
    assert r.outcome == "recovered" and r.line().startswith("recovered: "), r
    (r,) = restarts([*base, {"event": "finished"}])
    assert r.outcome == "recovered", r
    (r,) = restarts([*base, {"event": "alert", "category": "device_oom", "step": 4}])
    assert r.outcome == "failed again" and r.line().endswith("; it failed again"), r


def test_the_oom_hint_never_advises_a_rung_already_tried() -> None:
    from verlctl.monitor.catalogue import oom_hint

    assert "`offload` feature, then `recompute`" in oom_hint()
    assert "offload" not in oom_hint(["offload"]).partition("(the OOM ladder")[0], oom_hint(["offload"])
    assert "enable `recompute`" in oom_hint(["offload"])
    both = oom_hint(["offload", "recompute"])
    assert "enable" not in both and both.startswith("lower "), both
    watching = oom_hint([], watching=True)  # U29: the watcher is doing it
    assert watching.startswith("nothing to do yet: the watcher's OOM ladder restarts the run"), watching
    assert oom_hint(["offload"], advice=["lower x from 2 to 1"]) == (
        "lower x from 2 to 1 (the OOM ladder already tried offload)")


def test_status_and_list_agree_on_a_stalled_run_the_watcher_gave_up_on(tmp_path: Path, group) -> None:  # type: ignore[no-untyped-def] # noqa: F811
    # RV4-6: the watcher gave up on a stall and the run's processes still run: not "running" in status while
    # list says failed; status names the command that frees the devices
    state = tmp_path / "state"
    marker = "20261201-091000-stall-b2b2.1.cafe"
    pid, ticks = group(marker)
    run_id = "20261201-091000-stall-b2b2"
    d = write_run(state, run_id, events=[started(1), {"event": "stalled", "reason": "no progress for 242s"},
                                         {"event": "gave_up", "category": "stalled",
                                          "reason": "gave up: stalled: no automatic restart (recovery.restart_on)"}],
                  status={"attempt": 1, "phase": "training", "step": 0, "updated_at": time.time()})
    doc = json.loads((d / "run.json").read_text())
    doc["pgid"] = pid
    doc["attempts"][0].update(pgid=pid, marker=marker, leader_start=ticks)
    (d / "run.json").write_text(json.dumps(doc))
    status = json.loads(cli(state, "status", run_id, "--json").out)
    listed = {r["run_id"]: r for r in json.loads(cli(state, "list", "--json").out)}[run_id]
    assert status["alive"] is True, status
    assert status["state"] == listed["state"] == "failed", (status["state"], listed["state"])
    assert f"`verlctl stop {run_id}`" in status["state_why"], status["state_why"]


# ---- a foreground watch ends with a line saying why (U29) -------------------------------------------------

from test_recovery_host import HostRuns, _progress, host_runs  # noqa: E402,F401 - the fixture and its helper


def test_a_foreground_watch_of_a_finished_run_ends_with_a_line_saying_so(host_runs: HostRuns) -> None:  # noqa: F811
    record = host_runs.start(["Total training steps: 3"] + [_progress(i, 3) for i in range(4)], pause=0.05)
    res = host_runs.watch(record)
    assert res.code == 0, res.out + res.err
    last = res.out.strip().splitlines()[-1]
    assert last == "verlctl watch: the run finished at step 3 of 3 (attempt 1); the watch ends", res.out


def test_a_foreground_watch_of_a_run_stopped_elsewhere_ends_with_a_line_saying_so(host_runs: HostRuns) -> None:  # noqa: F811
    import subprocess
    import sys

    from conftest import ROOT

    record = host_runs.start(["Total training steps: 400"] + [_progress(i, 400) for i in range(400)], pause=0.2)
    watch = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", record.run_id], env=host_runs.env(),
                             cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(e["event"] == "watch_started" for e in host_runs.events(record)):
            assert time.monotonic() < deadline and watch.poll() is None, host_runs.events(record)
            time.sleep(0.2)
        stop = cli(host_runs.state, "stop", record.run_id)
        assert stop.code == 0, stop.out + stop.err
        out, err = watch.communicate(timeout=120)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    last = out.strip().splitlines()[-1]
    # either the watcher saw the stop mark first, or stop ended it with SIGTERM: a line says which
    assert last in ("verlctl watch: the run was stopped with `verlctl stop`; the watch ends",
                    "verlctl watch: ended by SIGTERM (`verlctl stop` ends the watcher so)"), out + err


# ---- a launch without a watcher says once that nothing recovers it (U30) ----------------------------------

QUICK_TRAINER = """
print("Total training steps: 1", flush=True)
print("step:1 - actor/pg_loss:0.1 - training/global_step:1", flush=True)
"""


def test_a_launch_without_a_watcher_says_once_that_oom_recovery_is_off(tmp_path: Path) -> None:
    from host_launch_support import host_launch

    from conftest import run_cli

    env, sets = host_launch(tmp_path, QUICK_TRAINER)
    res = run_cli("launch", "--yes", *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")], env=env,
                  timeout=300)
    assert res.code == 0, res.out + res.err
    run_id = re.search(r"training is running: run (\S+)", res.out)
    assert run_id, res.out
    out = " ".join(res.out.split())
    assert out.count("no watcher: out-of-memory recovery") == 1, res.out
    assert f"`verlctl watch {run_id.group(1)}`" in out, res.out
