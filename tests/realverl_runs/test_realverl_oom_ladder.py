"""verlctl's OOM ladder climbed to its end on real verl 0.9.1 on CPU, through ``verlctl launch`` and the watcher.

The accelerator TEST DOUBLE (tests/realverl/verl_cpu_device_double.py) raises torch's real
``torch.OutOfMemoryError`` in the actor's optimizer step of global step 2 in EVERY attempt
(``VERLCTL_TEST_DOUBLE_OOM_AT_STEP=2``, ``VERLCTL_TEST_DOUBLE_OOM_CURE=none``: a device too small whatever the
memory features), and names the offload and gradient-checkpointing states that verl's engine received.
The spec starts with gradient checkpointing off and dynamic batching off (micro-batches of 2 x 160 tokens), so
verlctl's memory estimate says each rung can lower the update phase's need: neither is skipped.

What must happen: attempt 1 runs out of memory -> the watcher adds ``offload`` and resumes from global_step_1;
attempt 2 (offload really on in verl) runs out -> the watcher adds ``recompute`` (gradient checkpointing really on
in verl); attempt 3 runs out -> ``recovery.max_oom_retries`` (2) is used up: the watcher gives up with advice
that moves values the way that saves memory; the checkpoints are the ones the run saved; nothing of the run is
left running in the container and no watcher on the host.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest

from realverl_support import RealVerlEnv, peak_memory_sampler, run_lock
from test_realverl import ended, events, launch, run_processes, saved_steps, status, wait_for
from verlctl.checks.memory import rung_can_help
from verlctl.spec.model import RunSpec

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

OOM_STATES = re.compile(r"raised by verl_cpu_device_double at step (\d+): VERLCTL_TEST_DOUBLE_OOM_AT_STEP, "
                        r"VERLCTL_TEST_DOUBLE_OOM_CURE=none, param_offload=(\w+) optimizer_offload=(\w+) "
                        r"gradient_checkpointing=(\w+)\)")


def test_real_verl_oom_ladder_adds_offload_then_recompute_then_gives_up_at_max_oom_retries(
        realverl_env: RealVerlEnv, docker_engine: Any) -> None:
    env = realverl_env
    env.spec["train"]["steps"] = 3
    env.spec["features"] = {"disable": ["flash_attn", "gradient_checkpointing", "dynamic_batch"]}
    env.spec["recovery"] = {"max_oom_retries": 2}
    env.spec["env"].update({"VERLCTL_TEST_DOUBLE_OOM_AT_STEP": "2", "VERLCTL_TEST_DOUBLE_OOM_CURE": "none"})
    # The premise, from verlctl's own estimate (the watcher asks it the same way): each rung can help here.
    spec = RunSpec.model_validate(env.spec)
    on = {"dynamic_batch": False, "gradient_checkpointing": False, "remove_padding": True}
    assert rung_can_help(spec, on, "offload") and rung_can_help(spec, {**on, "offload": True}, "recompute")

    with run_lock(), peak_memory_sampler(env.container) as peak:
        t0 = time.monotonic()
        launch(env)
        st = wait_for(lambda: (lambda s: s if ended(s) and not s["watcher"]["alive"] else None)(status(env)),
                      2400, 5, "the run to end")
        wall_s = time.monotonic() - t0
        left = wait_for(lambda: run_processes(env) == [] or None, 120, 2, "the run's processes to go")
    print(f"\nOOM ladder: {wall_s:.0f} s from launch to the give-up, container peak {peak.gib:.2f} GiB "
          f"(high-water {peak.high_water_gib:.2f} GiB)")
    assert left is True

    evs = events(env)
    ooms = [e for e in evs if e["event"] == "alert" and e.get("category") == "device_oom"]
    assert len(ooms) == 3, [e for e in evs if e["event"] == "alert"]
    rec = [e for e in evs if e["event"] == "recovery"]
    assert [e["add_feature"] for e in rec] == ["offload", "recompute"], rec
    assert all(str(e["resumed_from"]).endswith("global_step_1") for e in rec), rec
    notices = [e for e in evs if e["event"] == "notice"]
    assert not any("skipped by the OOM ladder" in json.dumps(e) for e in notices), notices
    (gave,) = [e for e in evs if e["event"] == "gave_up"]
    assert gave["category"] == "device_oom", gave
    assert "out of memory after 2 recovery attempt(s)" in gave["reason"], gave
    # the advice lowers what it names (never lengthens or repeats a value)
    assert "lower train.micro_batch_size_per_device from 2 to 1" in gave["advice"], gave["advice"]
    for line in gave["advice"]:
        m = re.search(r"(?:lower|shorten) \S+ from (\d+(?:\.\d+)?) to (\d+(?:\.\d+)?)", line)
        assert m is None or float(m.group(2)) < float(m.group(1)), line

    assert str(st["state"]).startswith("failed"), json.dumps(st, indent=1)[-3000:]
    assert len(st["attempts"]) == 3, st["attempts"]
    assert "offload" in st["attempts"][1]["features"], st["attempts"]
    assert {"offload", "recompute"} <= set(st["attempts"][2]["features"]), st["attempts"]
    assert st["watcher"]["alive"] is False and st["alive"] is False, st

    # What verl's engine received in each attempt (the double prints it with the error).
    log = env.train_log.read_text(errors="replace")
    seen = list(dict.fromkeys(OOM_STATES.findall(log)))
    assert seen == [("2", "False", "False", "False"), ("2", "True", "True", "False"), ("2", "True", "True", "True")], \
        (seen, log[-3000:])
    assert len(re.findall(r"Resuming from \S+global_step_1, setting global step to 1", log)) >= 2, log[-3000:]
    assert saved_steps(env.ckpt) == [1]
    assert (env.ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    # no container of the run besides the user's own, which is still there
    names = [c.name for c in docker_engine.containers.list(all=True) if env.name in c.name]
    assert names == [env.name], names
    env.container.reload()
    assert env.container.status == "running"
