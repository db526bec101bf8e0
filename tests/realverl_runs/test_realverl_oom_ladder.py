"""verlctl's OOM recovery on real verl 0.9.1 on CPU, through ``verlctl launch`` and the watcher: the whole ladder,
then the finish, then a resume that trains nothing.

The accelerator TEST DOUBLE (tests/realverl/verl_cpu_device_double.py) raises torch's real
``torch.OutOfMemoryError`` in the actor's optimizer step of global step 2 unless verl's engine runs with gradient
checkpointing (``VERLCTL_TEST_DOUBLE_OOM_AT_STEP=2``, ``VERLCTL_TEST_DOUBLE_OOM_CURE=recompute``: a device on
which offloading alone is not enough), and names the offload and gradient-checkpointing states that verl's
engine received, in the error and in the line it prints when the step is spared.
The spec starts with gradient checkpointing off and dynamic batching off (micro-batches of 2 x 160 tokens), so
verlctl's memory estimate says each rung can lower the update phase's need: neither is skipped.

What must happen: attempt 1 runs out of memory -> the watcher adds ``offload`` and resumes from global_step_1;
attempt 2 (offload really on in verl) runs out -> the watcher adds ``recompute``; attempt 3 (gradient
checkpointing really on in verl) resumes from global_step_1 and finishes; the health verdicts are said once over
the three attempts; nothing of the run is left running in the container and no watcher on the host. Then a
relaunch whose epoch loop is already over resumes, trains nothing and is judged failed, not finished.

(The ladder's give-up when every rung is used is the watcher's own logic on the same OOM traceback: it is
followed to its end with a stand-in trainer in tests/orchestrator/test_watch_docker.py.)
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from realverl_support import RealVerlEnv, peak_memory_sampler, run_lock
from test_realverl import events, launch, run_processes, saved_steps, wait_for, wait_for_end
from verlctl.checks.memory import rung_can_help
from verlctl.spec.model import RunSpec

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

OOM_STATES = re.compile(r"raised by verl_cpu_device_double at step (\d+): VERLCTL_TEST_DOUBLE_OOM_AT_STEP, "
                        r"VERLCTL_TEST_DOUBLE_OOM_CURE=recompute, param_offload=(\w+) optimizer_offload=(\w+) "
                        r"gradient_checkpointing=(\w+)\)")
SPARED = re.compile(r"verl_cpu_device_double: step (\d+) spared by VERLCTL_TEST_DOUBLE_OOM_CURE=recompute "
                    r"\(param_offload=(\w+) optimizer_offload=(\w+) gradient_checkpointing=(\w+)\)")


def test_real_verl_oom_ladder_adds_offload_then_recompute_and_finishes_then_a_resume_that_trains_nothing_fails(
        realverl_env: RealVerlEnv, docker_engine: Any) -> None:
    env = realverl_env
    env.spec["train"]["steps"] = 3
    env.spec["features"] = {"disable": ["flash_attn", "gradient_checkpointing", "dynamic_batch"]}
    env.spec["recovery"] = {"max_oom_retries": 2}
    env.spec["env"].update({"VERLCTL_TEST_DOUBLE_OOM_AT_STEP": "2", "VERLCTL_TEST_DOUBLE_OOM_CURE": "recompute"})
    # The premise, from verlctl's own estimate (the watcher asks it the same way): each rung can help here.
    spec = RunSpec.model_validate(env.spec)
    on = {"dynamic_batch": False, "gradient_checkpointing": False, "remove_padding": True}
    assert rung_can_help(spec, on, "offload") and rung_can_help(spec, {**on, "offload": True}, "recompute")

    with run_lock(), peak_memory_sampler(env.container) as peak:
        t0 = time.monotonic()
        launch(env)
        st = wait_for_end(env, 2400)
        wall_s = time.monotonic() - t0
        left = wait_for(lambda: run_processes(env) == [] or None, 120, 2, "the run's processes to go")
    print(f"\nOOM ladder: {wall_s:.0f} s from launch to the finish, container peak {peak.gib:.2f} GiB "
          f"(high-water {peak.high_water_gib:.2f} GiB)")
    assert left is True

    evs = events(env)
    ooms = [e for e in evs if e["event"] == "alert" and e.get("category") == "device_oom"]
    assert len(ooms) == 2, [e for e in evs if e["event"] == "alert"]
    rec = [e for e in evs if e["event"] == "recovery"]
    assert [e["add_feature"] for e in rec] == ["offload", "recompute"], rec
    assert all(str(e["resumed_from"]).endswith("global_step_1") for e in rec), rec
    notices = [e for e in evs if e["event"] == "notice"]
    assert not any("skipped by the OOM ladder" in json.dumps(e) for e in notices), notices
    assert not [e for e in evs if e["event"] == "gave_up"], evs
    assert st["state"] == "finished", json.dumps(st, indent=1)[-3000:]
    assert len(st["attempts"]) == 3, st["attempts"]
    assert "offload" in st["attempts"][1]["features"], st["attempts"]
    assert {"offload", "recompute"} <= set(st["attempts"][2]["features"]), st["attempts"]
    assert st["watcher"]["alive"] is False and st["alive"] is False, st
    # the gsm8k reward on the random model: no learning signal, said once over the three attempts
    said = [e["rule"] for e in evs if e["event"] == "health"]
    assert "no_learning_signal" in said and len(said) == len(set(said)), said

    # What verl's engine received in each attempt (the double prints it with the error, and when it spares).
    log = env.train_log.read_text(errors="replace")
    assert "torch.OutOfMemoryError" in log
    seen = list(dict.fromkeys(OOM_STATES.findall(log)))
    assert seen == [("2", "False", "False", "False"), ("2", "True", "True", "False")], (seen, log[-3000:])
    assert SPARED.findall(log) == [("2", "True", "True", "True")], log[-3000:]
    assert len(re.findall(r"Resuming from \S+global_step_1, setting global step to 1", log)) == 2, log[-3000:]
    assert saved_steps(env.ckpt) == [1, 2, 3]
    assert (env.ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    # no container of the run besides the user's own, which is still there
    names = [c.name for c in docker_engine.containers.list(all=True) if env.name in c.name]
    assert names == [env.name], names
    env.container.reload()
    assert env.container.status == "running"

    # A resume that trains nothing is a failure, not a finish: relaunched for 5 steps with verl's epoch loop
    # already over (trainer.total_epochs=0 ends it at once, the same exit as a checkpoint at an epoch boundary,
    # verl #7401 / PR #5725), real verl resumes from global_step_3, trains 0 steps and exits 0.
    env.spec["train"]["steps"] = 5
    for knob in ("VERLCTL_TEST_DOUBLE_OOM_AT_STEP", "VERLCTL_TEST_DOUBLE_OOM_CURE"):
        env.spec["env"].pop(knob)
    env.spec["extra_overrides"] = [*env.spec.get("extra_overrides", []), "trainer.total_epochs=0"]
    with run_lock():
        launch(env)
        st = wait_for_end(env, 1500, "the relaunch to end")
    log = env.train_log.read_text(errors="replace")
    assert len(re.findall(r"Resuming from \S+global_step_3, setting global step to 3", log)) == 1, log[-3000:]
    assert "start_verl.sh exits with status" not in log.rsplit("Resuming from", 1)[1]  # verl exited 0
    assert saved_steps(env.ckpt) == [1, 2, 3]  # nothing was trained
    assert st["state"] == "failed", json.dumps(st, indent=1)[-3000:]
    assert "trained 0 steps" in st["state_why"] and "global_step_3" in st["state_why"], st["state_why"]
    assert any(e["event"] == "resume_failed" for e in events(env, st["run_id"]))
