"""The product fixes that real verl revealed, and `launch --canary`, on real verl 0.9.1 on CPU
(reference/realverl.md; the image, the user's spec and the run lock come from tests/realverl_support.py).

What is a double: the accelerator only (tests/realverl/verl_cpu_device_double.py, tests/image/nvidia-smi).
Real: verl, Ray, TransferQueue, vLLM's CPU build, the FSDP2 actor, weight sync, checkpoints, resume.

* flash_attn on an image without flash-attn: `check`, `launch --dry-run` and `launch` refuse it alike, before
  anything starts, with the fix (before: ImportError at model init after minutes; then only `launch` looked);
* the spec gives Ray no --num-cpus: start_verl.sh raises Ray's count to what verl's actors hold (before: on
  this 2-core host, Ray counted 2 and verl waited forever without a message);
* `launch --canary`: one real step + checkpoint, a real resume + step with the weight sync, timed; then the full
  run starts clean, the watcher follows it to the end, and the DataLoader traceback of the teardown does not
  make the finished run a failure.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

realverl_support = pytest.importorskip("realverl_support")  # the real-verl image's fixtures (tests/realverl_support.py)

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]


def _events(env: Any) -> list[dict[str, Any]]:
    (path,) = list(env.state.rglob("events.jsonl"))
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_flash_attn_without_the_package_is_one_verdict_before_launch_with_the_fix(realverl_env: Any) -> None:
    """RV4-3: `check` and `launch --dry-run` passed what `launch` refused 16 s later. Now the three look into the
    user's running container the same way and refuse alike, before anything starts."""
    env = realverl_env
    env.spec["features"] = {}  # the default: flash_attn on
    spec = str(env.spec_file)
    t0 = time.monotonic()
    check = env.cli("check", "-c", spec, "--json", timeout=600)
    check_s = time.monotonic() - t0
    dry = env.cli("launch", "-c", spec, "--dry-run", "--json", timeout=600)
    t0 = time.monotonic()
    res = env.cli("launch", "-c", spec, "--yes", "--json", "--verify-timeout", "600", timeout=900)
    took = time.monotonic() - t0
    assert [r.code for r in (check, dry, res)] == [2, 2, 2], [r.out[-3000:] + r.err[-2000:] for r in (check, dry, res)]

    def errors(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
        return sorted((f["code"], f["field"], f["message"]) for f in doc["findings"] if f["severity"] == "error")

    docs = [json.loads(r.out) for r in (check, dry, res)]
    assert errors(docs[0]) == errors(docs[1]) == errors(docs[2]), [errors(d) for d in docs]
    (missing,) = [f for f in docs[0]["findings"] if f["code"] == "target_package_missing"]
    assert missing["field"] == "features"
    assert missing["message"].startswith("`+actor_rollout_ref.model.override_config.attn_implementation="
                                         "flash_attention_2` needs the Python package flash-attn"), missing
    assert f"(looked up in container {env.name})" in missing["message"]
    assert "`--disable flash_attn`" in missing["hint"] and "Traceback" not in res.err
    assert not list(env.state.rglob("events.jsonl"))  # refused before anything was started or recorded
    assert took < 300 and check_s < 300, (check_s, took)
    print(f"flash-attn verdict: check {check_s:.1f} s, launch refused in {took:.1f} s")


def test_canary_on_real_verl_then_the_full_run_finishes_despite_the_teardown_traceback(realverl_env: Any) -> None:
    env = realverl_env
    env.spec["train"]["steps"] = 3
    # vLLM's CPU worker in eager mode: no torch-inductor C++ build in the image (a CPU-run setting, realverl.md)
    env.spec["extra_overrides"].append("actor_rollout_ref.rollout.enforce_eager=True")
    # No --num-cpus: start_verl.sh must give Ray what verl's actors hold (this host has 2 cores).
    env.spec["cluster"]["ray_start_args"] = [a for a in env.spec["cluster"]["ray_start_args"]
                                             if not a.startswith("--num-cpus")]
    with realverl_support.run_lock():
        res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--canary", "--canary-timeout", "1500",
                      "--verify-timeout", "1200", timeout=5400)
        assert res.code == 0, res.out[-6000:] + res.err[-3000:]
        out = " ".join(res.out.split())
        assert "canary passed: step" in out, out[-3000:]
        events = _events(env)
        (canary,) = [e for e in events if e["event"] == "canary"]
        assert canary["passed"] is True, canary
        t = canary["timings"]
        for key in ("step_s", "checkpoint_save_s", "weight_sync_s", "step_and_checkpoint_wall_s",
                    "resume_and_step_wall_s"):
            assert isinstance(t[key], float) and t[key] > 0, (key, t)
        assert [p["resumed_step"] for p in canary["phases"]] == [None, 1]
        log = "\n".join(p.read_text(errors="replace") for p in Path(env.spec["paths"]["logs"]).glob("verlctl-*.log"))
        assert "verl's actors hold 6 here: starting Ray with --num-cpus=6" in log, log[-3000:]
        assert not (env.ckpt / ".verlctl-canary").exists()
        # the full run: from scratch in paths.checkpoints, watched to its end
        res = env.cli("watch", timeout=1800)
        assert res.code == 0, res.out[-4000:] + res.err[-2000:]
        st = json.loads(env.cli("status", "--json", timeout=180).out)
        assert st["state"].startswith("finished"), st
    assert sorted(p.name for p in env.ckpt.glob("global_step_*")) == ["global_step_1", "global_step_2",
                                                                        "global_step_3"]
    train_log = env.train_log.read_text(errors="replace")
    assert "Training from scratch" in train_log or "Resuming from" not in train_log
    events = _events(env)
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "finished" and "alert" not in kinds, [e for e in events if e["event"] in ("alert", "finished")]
