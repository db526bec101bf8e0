"""verl 0.9.1's ``separate_async`` trainer (trainer.v1, split devices) with 1 trainer + 1 rollout "device", on
real verl on CPU through ``verlctl launch`` (issue #20: "one-step-off (or verl 0.9.1's separate_async) with 1
trainer + 1 rollout device").

A disaggregated trainer syncs weights to its standalone rollout through a checkpoint engine; verlctl renders
``actor_rollout_ref.rollout.checkpoint_engine.backend=nccl`` (verl's ``naive`` is colocated only and refused by
separate_async, trainer_separate_async.py:68). verl 0.9.1 has no engine that runs without a device: nccl needs
cupy and CUDA (nccl_checkpoint_engine.py:23 ``import cupy``, :169-173 ``cp.zeros``, ``device="cuda"``), hccl torch_npu, nixl /
mooncake / kimi their RDMA libraries. The accelerator TEST DOUBLE (tests/realverl/verl_cpu_device_double.py)
changes the collective backend: it registers verl's ``nccl`` engine on a stateless torch gloo group over CPU
tensors, the same engine name, as verl's HCCL engine registers ``nccl`` on Ascend. Everything else is real.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

realverl_support = pytest.importorskip("realverl_support")  # the real-verl image's fixtures

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]


def test_separate_async_one_trainer_one_rollout_device_trains_with_real_weight_syncs(realverl_env: Any) -> None:
    from test_realverl import launch, saved_steps, wait_for_end

    env = realverl_env
    steps = 2
    env.spec["mode"] = "separate_async"
    env.spec["cluster"]["devices"] = [0, 1]
    env.spec["train"].update(steps=steps, trainer_devices=1, rollout_devices=1)
    with realverl_support.run_lock():
        out = launch(env)
        assert "training is running" in out, out[-4000:]
        # two devices: the fabric test ran first in the run's container, over gloo (the double's collectives)
        assert "fabric test: all-reduce and point-to-point over gloo" in out, out[-4000:]
        assert "over 2 ranks (gloo)" in " ".join(out.split()), out[-4000:]
        st = wait_for_end(env, 2400)
    assert st["state"] == "finished", json.dumps(st, indent=1)[-3000:]
    log = env.train_log.read_text(errors="replace")
    # verl's separate_async trainer ran (its V1 trainer), steps 1..N with its weight-sync timing
    steps_seen = sorted({int(x) for x in re.findall(r"step:(\d+) ", log)})
    assert steps_seen == list(range(1, steps + 1)), (steps_seen, log[-3000:])
    step_lines = [ln for ln in log.splitlines() if re.search(r"step:\d+ ", ln)]
    assert all("timing_s/update_weights" in ln for ln in step_lines), step_lines[-1][:2000]
    # real weight syncs through the engine verlctl's command names: actor rank 0 sent, the rollout received,
    # at the start (verl's on_init_end) and after every step
    sent = re.findall(r"gloo weight sync (\d+) sent \(global step (\d+), world 2\)", log)
    received = re.findall(r"gloo weight sync (\d+) received (\d+) tensors \(global step (\d+), rank 1\)", log)
    assert len(sent) >= steps + 1 and len(received) >= steps + 1, (sent, received)
    assert {int(s) for _, s in sent} >= set(range(0, steps + 1)), sent
    assert all(int(n) > 0 for _, n, _ in received), received
    assert saved_steps(env.ckpt) == list(range(1, steps + 1))
