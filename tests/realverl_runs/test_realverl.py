"""Real verl 0.9.1 trains a tiny model on CPU, started, watched, stopped, resumed and exported by verlctl's
real commands, run as subprocesses against the real Docker engine and the real-verl image
(tests/image/build_realverl.sh). ``start_verl.sh`` and ``run_training.sh`` run exactly as verlctl renders them.

What is a double: the accelerator only (tests/realverl/verl_cpu_device_double.py, loaded through verl's own
plugin hook, and tests/image/nvidia-smi). Real: Ray, TransferQueue, vLLM's CPU build as the rollout server,
verl's gsm8k reward, the FSDP2 actor and reference model on gloo, weight sync, checkpoints and resume,
verl's model_merger and transformers.

Each training start costs 1.5-7 min of CPU, so one test walks the whole life of a run (``launch --canary``:
one real step + checkpoint and a real resume + step, timed, then the full run from scratch; verified start,
progress and metrics, finish, export, diagnose, report); a stop mid-run and the relaunch that resumes are
in the two-runs and DAPO tests. The spec gives Ray
no ``--num-cpus``: start_verl.sh must raise Ray's count to what verl's actors hold (on a 2-core host Ray counts 2
and verl would wait forever without a message). Every real-verl test holds the machine-wide run lock and shares
one xdist group.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from realverl_support import RealVerlEnv, run_lock

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

#: Process names of one real run inside the container (Ray daemons, verl's actors, vLLM's server).
RUN_PROCESSES = ("raylet", "gcs_server", "main_ppo", "start_verl.sh", "run_training.sh", "TaskRunner",
                 "WorkerDict", "vllm", "ray::")


def wait_for(pred, timeout: float, every: float = 2.0, what: str = "condition"):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


#: How often :func:`wait_for_file` asks ``verlctl status`` whether the run is still alive (a status is a CLI
#: process and an exec in the container, ~0.5 CPU-s, taken from the run being waited for).
ALIVE_EVERY_S = 15.0


def wait_for_file(env: RealVerlEnv, pred, timeout: float, what: str) -> bool:  # type: ignore[no-untyped-def]
    """Until ``pred()`` (a read of a file on this host: the train log, verl's checkpoint tracker) holds, checked
    every second; True then. False as soon as ``verlctl status`` says the run is no longer alive (asked every
    ``ALIVE_EVERY_S``), after a last look at ``pred``."""
    deadline = time.monotonic() + timeout
    ask_at = time.monotonic() + ALIVE_EVERY_S
    while time.monotonic() < deadline:
        if pred():
            return True
        if time.monotonic() >= ask_at:
            if not status(env)["alive"]:
                return bool(pred())
            ask_at = time.monotonic() + ALIVE_EVERY_S
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def _watcher_gone(env: RealVerlEnv) -> bool:
    """The newest run's recorded watcher process is no longer running on this host (gone, or a zombie):
    a read of its record and of /proc, no CLI. False while no watcher is recorded."""
    runs = env.state / "runs"
    try:
        run_dir = max(runs.iterdir(), key=lambda p: p.name)
        pid = json.loads((run_dir / "run.json").read_text()).get("watcher_pid")
    except (OSError, ValueError):
        return False
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] == "Z"


def wait_for_end(env: RealVerlEnv, timeout: float, what: str = "the run to end") -> dict[str, Any]:
    """Until ``verlctl status`` says the run ended and its watcher is gone; that status. The watcher ends with the
    run, so its process is looked for on this host each second (no CLI), and ``status`` is asked every 2 s once
    it is gone, every ``ALIVE_EVERY_S`` before (a status costs the run being waited for ~0.5 CPU-s)."""
    deadline = time.monotonic() + timeout
    ask_at = time.monotonic() + ALIVE_EVERY_S
    while time.monotonic() < deadline:
        gone = _watcher_gone(env)
        if time.monotonic() >= ask_at or gone:
            st = status(env)
            if ended(st) and not st["watcher"]["alive"]:
                return st
            ask_at = time.monotonic() + (2.0 if gone else ALIVE_EVERY_S)
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def status(env: RealVerlEnv) -> dict[str, Any]:
    res = env.cli("status", "--json", timeout=180)
    assert res.code == 0, res.out + res.err
    return dict(json.loads(res.out))


def ended(st: dict[str, Any]) -> bool:
    return bool(st["state"] in ("finished", "stopped") or str(st["state"]).startswith("failed"))


def saved_steps(ckpt: Path) -> list[int]:
    return sorted(int(p.name.rsplit("_", 1)[1]) for p in ckpt.glob("global_step_*"))


def run_processes(env: RealVerlEnv) -> list[str]:
    lines = env.ps().splitlines()[1:]
    return [ln for ln in lines if any(name in ln for name in RUN_PROCESSES) and "# bystander" not in ln]


def launch(env: RealVerlEnv, *extra: str, timeout: float = 1500) -> str:
    res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--watch", "--verify-timeout", "1200",
                  *extra, timeout=timeout)
    assert res.code == 0, res.out[-6000:] + res.err[-3000:]
    return res.out


def test_real_verl_launch_progress_finish_export_diagnose_report(
        realverl_env: RealVerlEnv, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The life of one run: canary, verified start, progress and metrics, finish, export, diagnose, report. (Its
    stop and relaunch are the other real-verl tests' subjects: a stop of one of two runs, tests/realverl_runs/
    test_realverl_two_runs.py; a relaunch that resumes, test_realverl_dapo.py and test_realverl070_dapo.py.)"""
    env = realverl_env
    steps = 5
    env.spec["train"]["steps"] = steps
    # No --num-cpus: start_verl.sh must give Ray what verl's actors hold (this host has 2 cores).
    env.spec["cluster"]["ray_start_args"] = [a for a in env.spec["cluster"]["ray_start_args"]
                                             if not a.startswith("--num-cpus")]
    ckpt = env.ckpt
    with run_lock():
        # ---- 1. launch --canary: one real step + checkpoint, a real resume + step with the weight sync,
        # timed, in a directory of its own that is removed; then the full run from scratch, verified, and
        # the watcher and status show real progress and metrics.
        t0 = time.monotonic()
        out = launch(env, "--canary", "--canary-timeout", "1500", timeout=5400)
        assert "reuse container" in out and "training is running" in out, out[-4000:]
        said = " ".join(out.split())
        assert "canary passed: step" in said and "checkpoint save" in said and "resume + step" in said, out[-4000:]
        (canary,) = [e for e in events(env) if e["event"] == "canary"]
        assert canary["passed"] is True, canary
        assert [p["steps"] for p in canary["phases"]] == [[1], [2]], canary["phases"]
        assert [p["tracker"] for p in canary["phases"]] == ["1", "2"], canary["phases"]
        started = [e for e in events(env) if e["event"] == "started"]
        assert [e["reason"] for e in started] == ["canary: step + checkpoint", "canary: resume + weight sync",
                                                  "launch"], started
        assert started[-1]["resumed_from"] is None, started[-1]  # the full run does not resume the canary's
        script = (max((env.state / "runs").iterdir(), key=lambda p: p.name) / "run_training.sh").read_text()
        assert f"trainer.total_training_steps={steps}" in script, script  # the full run's own command
        assert f"trainer.default_local_dir={ckpt}" in script, script  # not the canary's directory
        for key in ("step_s", "checkpoint_save_s", "weight_sync_s", "step_and_checkpoint_wall_s",
                    "resume_and_step_wall_s"):
            assert isinstance(canary["timings"][key], float) and canary["timings"][key] > 0, (key, canary)
        assert [p["resumed_step"] for p in canary["phases"]] == [None, 1], canary["phases"]
        assert not (ckpt / ".verlctl-canary").exists()
        starts = "\n".join(p.read_text(errors="replace") for p in Path(env.spec["paths"]["logs"]).glob("verlctl-*.log"))
        assert "verl's actors hold 6 here: starting Ray with --num-cpus=6" in starts, starts[-3000:]
        st = wait_for(lambda: (lambda s: s if s.get("last_step") or not s.get("alive") else None)(status(env)),
                      900, 5, "a real step in status")
        assert st["alive"] is True and st["state"] == "running", st
        assert st["watcher"]["alive"] is True, st["watcher"]
        metrics = st["last_step"]["metrics"]
        # verl's real metric names, from its real trainer (a stand-in would not print timing_s/update_weights)
        for key in ("critic/score/mean", "actor/pg_loss", "timing_s/gen", "timing_s/update_actor",
                    "timing_s/update_weights", "response_length/mean", "training/rollout_probs_diff_max"):
            assert key in metrics, (key, sorted(metrics))
        assert st["progress"]["total"] == steps, st["progress"]
        first_step_s = time.monotonic() - t0

        # ---- 2. the finish: every step saved, verl's checkpoint layout, nothing of the run left running.
        run_log = Path(st["run_log"])
        wait_for_file(env, lambda: re.search(r"training finished|start_verl.sh exits with status",
                                             run_log.read_text(errors="replace")), 1500, "the run to end")
        st = wait_for_end(env, 300, "status to say the run ended")
        assert st["state"] == "finished", json.dumps(st, indent=1)[-4000:]
        wait_for(lambda: not run_processes(env), 120, 2, "the run's processes to go")
        log = env.train_log.read_text(errors="replace")
        # the full run started from scratch (not from the canary's checkpoint), and verl's DataLoader
        # traceback at the teardown of a finished run does not make it an alert or a failure
        assert "Training from scratch" in log, log[:3000]
        kinds = [e["event"] for e in events(env, st["run_id"])]
        assert "alert" not in kinds, kinds
        assert saved_steps(ckpt) == list(range(1, steps + 1))
        assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == str(steps)
        actor = ckpt / f"global_step_{steps}" / "actor"
        for name in ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt",
                     "extra_state_world_size_1_rank_0.pt", "fsdp_config.json", "huggingface"):
            assert (actor / name).exists(), sorted(p.name for p in actor.iterdir())
        assert (ckpt / f"global_step_{steps}" / "data.pt").exists()
        assert sorted({int(n) for n in re.findall(r"step:(\d+) - ", log)}) == list(range(1, steps + 1)), log[-3000:]
        total_s = time.monotonic() - t0
        # Training health: verl's gsm8k reward scores the random model 0 everywhere, so every advantage is
        # 0 (critic/advantages/max = min = 0): "no learning signal", from the watcher (an event; the run
        # went on and finished) and from status, which judge real verl's own step lines.
        assert "no_learning_signal" in [w["rule"] for w in st["health"]], st["health"]
        assert "no_learning_signal" in [e.get("rule") for e in events(env, st["run_id"])
                                        if e["event"] == "health"]

    # ---- 4. export-hf: verl's real model_merger on the real checkpoint; transformers loads and generates.
    hf = tmp_path / "hf"
    res = env.cli("export-hf", st["run_id"], "--out", str(hf), "--json", timeout=1800)
    assert res.code == 0, res.out + res.err
    exported = json.loads(res.out)
    assert exported["step"] == steps, exported
    gen = env.container.exec_run(["python3", "-c", (
        "import sys, torch, transformers as t; p = sys.argv[1]; "
        "tok = t.AutoTokenizer.from_pretrained(p); m = t.AutoModelForCausalLM.from_pretrained(p); "
        "ids = tok('Tom has 3 apples', return_tensors='pt').input_ids; "
        "out = m.generate(ids, max_new_tokens=5, do_sample=False); "
        "print('GENERATED', out.shape[1] - ids.shape[1], type(m).__name__)"), str(hf)],
        environment={"HF_HUB_OFFLINE": "1"})
    text = gen.output.decode(errors="replace")
    assert gen.exit_code == 0, text[-3000:]
    m = re.search(r"GENERATED (\d+) (\w+)", text)
    assert m and int(m.group(1)) >= 1 and m.group(2) == "Qwen2ForCausalLM", text[-2000:]

    # ---- 5. diagnose and report on the real run's log.
    res = env.cli("diagnose", str(env.train_log), "--json", timeout=300)
    diag = json.loads(res.out)
    assert res.code == 0, json.dumps(diag.get("findings"), indent=1)  # a healthy run: no known failure
    assert [s["step"] for s in diag["steps"]][-1] == steps
    assert "critic/score/mean" in diag["steps"][-1]["metrics"]
    page = tmp_path / "report.html"
    res = env.cli("report", st["run_id"], "--out", str(page), timeout=300)
    assert res.code == 0, res.out + res.err
    html = page.read_text()
    # the score chart (charts.py titles verl's critic/score/mean "Score (mean)") up to the last real step
    assert "Score (mean)" in html and "<svg" in html and f"step {steps} of {steps}" in html, html[-3000:]
    assert 'data-rule="no_learning_signal"' in html  # the report's training-health table
    for chart in ("pg_loss", "grad_norm", "kl", "entropy", "advantages", "clip_ratio"):  # verl logs them
        assert f'data-chart="{chart}"' in html, chart
    print(f"\nreal verl: first step seen after {first_step_s:.0f} s, whole life {total_s:.0f} s")


def events(env: RealVerlEnv, run_id: str | None = None) -> list[dict[str, Any]]:
    """The events of run ``run_id`` (default: the only run, or the newest one by its id's time stamp)."""
    run_dir = env.state / "runs" / run_id if run_id else max((env.state / "runs").iterdir(), key=lambda p: p.name)
    p = run_dir / "events.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
