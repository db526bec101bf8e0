"""Watch and recover on the real engine: the OOM ladder with resume, giving up with advice, stall detection.

The stand-in trainer (tests/standin, a test double for a verl training step) prints a real-format NPU
out-of-memory traceback at step K unless the overrides named in VERLCTL_STANDIN_OOM_UNLESS are present.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from launch_support import LaunchEnv

pytestmark = pytest.mark.docker

OFFLOAD = "actor_rollout_ref.actor.megatron.param_offload=True"
RECOMPUTE = "actor_rollout_ref.actor.megatron.override_transformer_config.recompute_granularity=full"
PREFIX = "actor_rollout_ref.rollout.enable_prefix_caching=True"


@pytest.fixture
def wenv(launch_env: LaunchEnv) -> LaunchEnv:
    launch_env.spec["train"]["steps"] = 5
    launch_env.spec["features"] = {"enable": ["prefix_cache"]}  # a user-enabled feature: present in every rung
    return launch_env


def events(env: LaunchEnv) -> list[dict]:
    run_dir = next((env.state / "runs").iterdir())
    p = run_dir / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def wait_event(env: LaunchEnv, kind: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in events(env):
            if ev["event"] == kind:
                return ev
        time.sleep(1)
    raise AssertionError(f"no {kind!r} event; got {[e['event'] for e in events(env)]}")


def attempts_argv(env: LaunchEnv) -> list[list[str]]:
    return [entry["argv"] for entry in env.argv_log]


def test_oom_ladder_adds_offload_then_recompute_each_resuming_from_the_last_checkpoint(
        wenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """The whole ladder with Megatron's keys (the real-verl ladder runs FSDP2): an OOM at step 3 that offload alone
    does not cure. The watcher of ``launch --watch`` adds offload, then recompute, each attempt composed from the
    moment the OOM was seen and resumed from global_step_2; the user's own feature stays on in every rung; the run
    finishes; the 0600 env file (the SwanLab key) stays while a relaunch may read it and is gone once it finished."""
    wenv.spec["env"].update({"VERLCTL_STANDIN_OOM_AT_STEP": "3",
                             "VERLCTL_STANDIN_OOM_UNLESS": f"{OFFLOAD};{RECOMPUTE}"})
    notify_out = wenv.root / "notified.jsonl"
    res = wenv.cli("launch", "-c", str(wenv.spec_file), "--yes", "--watch",
                   "--notify-cmd", f"cat >> {notify_out}; echo >> {notify_out}")
    assert res.code == 0, res.out + res.err
    st = json.loads(wenv.cli("status", "--json").out)
    assert st["watcher"]["alive"] is True
    assert key_file_state(wenv, docker_engine) == "present"

    alert = wait_event(wenv, "alert")
    assert alert["category"] == "device_oom"
    wait_event(wenv, "finished", 600)
    recoveries = [e for e in events(wenv) if e["event"] == "recovery"]
    assert [r["add_feature"] for r in recoveries] == ["offload", "recompute"], recoveries
    for r in recoveries:
        # the next attempt was checked and composed from the moment the OOM was seen, not after the failed one
        assert r["prepared_early"] is True and r["resumed_from"].endswith("global_step_2"), r
    checks = [e for e in events(wenv) if e["event"] == "resume_check"]
    assert checks and all(c["resumed"] is True and c["first_step_seen"] >= 2 for c in checks), checks

    argvs = attempts_argv(wenv)
    assert len(argvs) == 3
    assert OFFLOAD not in argvs[0] and RECOMPUTE not in argvs[0]
    assert OFFLOAD in argvs[1] and RECOMPUTE not in argvs[1]
    assert OFFLOAD in argvs[2] and RECOMPUTE in argvs[2]
    assert all(PREFIX in a for a in argvs)  # the user's feature stays on in every rung
    ckpt = Path(wenv.spec["paths"]["checkpoints"])
    assert sorted(p.name for p in ckpt.glob("global_step_*")) == [f"global_step_{i}" for i in range(1, 6)]
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "5"
    train_log = (wenv.root / "logs" / "dapo_Qwen3-0.6B_megatron.log").read_text()
    assert "Load from checkpoint folder" in train_log and "global_step_2" in train_log
    notified = [json.loads(x) for x in notify_out.read_text().split("\n") if x.strip()]
    assert {"alert", "recovery"} <= {n["event"] for n in notified}
    st = json.loads(wenv.cli("status", "--json").out)
    assert len(st["attempts"]) == 3 and "offload" in st["attempts"][1]["features"], st["attempts"]
    assert {"offload", "recompute"} <= set(st["attempts"][2]["features"]), st["attempts"]
    assert st["state"] == "finished"
    run_dir = next((wenv.state / "runs").iterdir())
    assert "device_oom" in (run_dir / "watcher.log").read_text(errors="replace")  # what the watcher said
    deadline = time.monotonic() + 120  # the watcher removes it as the run ends: nothing reads the key again
    while key_file_state(wenv, docker_engine) != "absent" and time.monotonic() < deadline:
        time.sleep(1)
    assert key_file_state(wenv, docker_engine) == "absent"


def key_file_state(env: LaunchEnv, client) -> str:  # type: ignore[no-untyped-def]
    """"present" or "absent": the run's 0600 env file (it holds the SwanLab key) in the run's container."""
    record = json.loads((next((env.state / "runs").iterdir()) / "run.json").read_text())
    res = client.containers.get(env.name).exec_run(["test", "-e", f"{record['scripts_dir']}/verlctl.env"])
    return "present" if res.exit_code == 0 else "absent"


def test_oom_that_never_goes_away_stops_with_advice(wenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    wenv.spec["env"].update({"VERLCTL_STANDIN_OOM_AT_STEP": "2", "VERLCTL_STANDIN_OOM_ALWAYS": "1"})
    res = wenv.cli("launch", "-c", str(wenv.spec_file), "--yes")
    assert res.code == 0, res.out + res.err
    res = wenv.cli("watch", timeout=600)
    assert res.code == 1
    # given up: no relaunch will read the key, so the watcher removed it (the failed script kept it)
    assert key_file_state(wenv, docker_engine) == "absent"
    assert "could not remove" not in res.out, res.out
    gave_up = wait_event(wenv, "gave_up", 5)
    assert gave_up["category"] == "device_oom"
    assert any("max_response_length" in a for a in gave_up["advice"])
    assert any("tensor_parallel" in a or "pipeline_parallel" in a for a in gave_up["advice"])
    assert len([e for e in events(wenv) if e["event"] == "recovery"]) == 2  # recovery.max_oom_retries
    assert "advice:" in res.out


def test_a_silent_trainer_is_reported_stalled(wenv: LaunchEnv) -> None:
    wenv.spec["env"].update({"VERLCTL_STANDIN_STALL_AT_STEP": "3"})
    wenv.spec["recovery"] = {"stall_min_s": 8, "stall_step_factor": 2.0}
    res = wenv.cli("launch", "-c", str(wenv.spec_file), "--yes")
    assert res.code == 0, res.out + res.err
    started = time.monotonic()
    res = wenv.cli("watch", timeout=300)
    elapsed = time.monotonic() - started
    assert res.code == 1
    stalled = wait_event(wenv, "stalled", 5)
    assert "during training" in stalled["reason"] and "py-spy" in stalled["hint"]
    # a streamed log (tail -F in the container) counts as read when the watcher reads: the stall is called as
    # such, not after a further limit as a log that could not be read to its end
    assert "not read to its end" not in stalled["reason"], stalled
    assert elapsed < 120
    assert "stalled" in res.out


SWANLAB_KEY = "swl-WATCH-KEY-77e1c0d2"


def test_oom_recovery_of_a_swanlab_cloud_run_relaunches_with_the_key_in_the_target(wenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """D5: the record holds no key, so the relaunch must use the one in the target's 0600 env file."""
    import subprocess
    import sys

    import yaml

    wenv.spec["env"].update({"VERLCTL_STANDIN_OOM_AT_STEP": "2", "VERLCTL_STANDIN_OOM_UNLESS": OFFLOAD})
    wenv.spec["logging"] = {"swanlab": {"enabled": True, "mode": "offline",
                                        "log_dir": str(wenv.root / "logs" / "swanlab")}}
    res = wenv.cli("launch", "-c", str(wenv.spec_file), "--yes")
    assert res.code == 0, res.out + res.err
    run_dir = next((wenv.state / "runs").iterdir())
    # What a cloud launch leaves behind (a login needs a server, which cannot be reached from here): the
    # recorded spec says cloud with no key, and the env file in the target holds the key.
    spec_path = run_dir / "spec.resolved.yaml"
    resolved = yaml.safe_load(spec_path.read_text())
    resolved["logging"]["swanlab"].update({"mode": "cloud", "host": "http://127.0.0.1:9", "api_key": None})
    spec_path.write_text(yaml.safe_dump(resolved))
    record = json.loads((run_dir / "run.json").read_text())
    container = docker_engine.containers.get(wenv.name)
    appended = container.exec_run(["bash", "-c", 'printf "SWANLAB_API_KEY=%s\\n" "$K" >> "$1"', "x",
                                   f"{record['scripts_dir']}/verlctl.env"], environment={"K": SWANLAB_KEY})
    assert appended.exit_code == 0, appended.output

    watch = subprocess.Popen([sys.executable, "-m", "verlctl", "watch"], env=wenv.env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        started = wait_event_where(wenv, lambda e: e["event"] == "started" and e.get("attempt") == 2, 420)
    finally:
        wenv.cli("stop")
        out = watch.communicate(timeout=60)[0]
    kinds = [e["event"] for e in events(wenv)]
    assert "gave_up" not in kinds, (kinds, out)
    assert "offload" in started["features"]
    assert "the changed spec has errors" not in out and "cannot relaunch" not in out, out
    assert OFFLOAD in (run_dir / "attempt-2" / "run_training.sh").read_text()  # what the relaunch started
    for p in run_dir.rglob("*"):
        if p.is_file():
            assert SWANLAB_KEY not in p.read_text(errors="replace"), p
    assert SWANLAB_KEY not in out


def wait_event_where(env: LaunchEnv, pred, timeout: float) -> dict:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for ev in events(env):
            if pred(ev):
                return ev
        time.sleep(1)
    raise AssertionError(f"no matching event; got {[e['event'] for e in events(env)]}")
