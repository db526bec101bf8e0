"""Two real-verl 0.9.1 runs of one user on one host at once (two containers, one verlctl state directory), through
``verlctl launch``: A, a GRPO run on device 0; B, verl's ``separate_async`` trainer (trainer.v1, split devices) with
1 trainer + 1 rollout device (1 and 2). Both train; ``verlctl stop`` of A stops that run only (a process of its
container that is not the run's stays); B keeps running, its Ray head and checkpoints untouched, then trains its
next steps and finishes (a real finish of the disaggregated trainer, issue #20: "one-step-off (or verl 0.9.1's
separate_async) with 1 trainer + 1 rollout device").

B is held in the actor update of its step 2 until A's stop has been checked (the double's
``VERLCTL_TEST_DOUBLE_HOLD_AT_STEP`` with ``VERLCTL_TEST_DOUBLE_HOLD_RELEASE``: a device busy with a long
kernel), so the stop always lands while B is mid-run, however fast the machine is.

B's weight syncs: a disaggregated trainer syncs weights to its standalone rollout through a checkpoint engine;
verlctl renders ``actor_rollout_ref.rollout.checkpoint_engine.backend=nccl`` (verl's ``naive`` is colocated only and
refused by separate_async, trainer_separate_async.py:68). verl 0.9.1 has no engine that runs without a device:
nccl needs cupy and CUDA (nccl_checkpoint_engine.py:23 ``import cupy``, :169-173 ``cp.zeros``, ``device="cuda"``),
hccl torch_npu, nixl / mooncake / kimi their RDMA libraries. The accelerator TEST DOUBLE
(tests/realverl/verl_cpu_device_double.py) changes the collective backend: it registers verl's ``nccl`` engine on a
stateless torch gloo group over CPU tensors, the same engine name, as verl's HCCL engine registers ``nccl`` on
Ascend; and the image's tests/image/nvidia-smi shows a real capture of a 4-GPU host, so that devices 1 and 2 exist.
Real: two Ray heads, verl's two trainers with their vLLM servers, the gloo fabric test, verlctl's watcher of each,
``stop``'s process selection.

A's container peaks at about 7.4 GiB here, B's at about 10.1 GiB: the test needs about 19 GiB of available memory
and skips, saying so, on a machine that has less when it starts.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from realverl_support import RealVerlEnv, make_realverl_env, peak_memory_sampler, run_lock
from test_realverl import launch, run_processes, saved_steps, status, wait_for, wait_for_end

from docker_support import REPO_ROOT

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

#: A real `nvidia-smi` capture of a 4-GPU host (the image's default table shows one GPU).
FOUR_GPUS = REPO_ROOT / "tests" / "fixtures" / "nvidia-smi" / "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt"
#: Available memory the two runs need (their peaks, measured: 7.4 GiB for A, 10.1 GiB for separate_async's B, whose
#: trainer and rollout are not colocated; plus the host's own).
NEEDED_GIB = 19.0


def mem_available_gib() -> float:
    for ln in Path("/proc/meminfo").read_text().splitlines():
        if ln.startswith("MemAvailable:"):
            return int(ln.split()[1]) / 2**20
    return 0.0


@pytest.fixture
def two_envs(tmp_path: Path, docker_engine: Any, realverl_image: str) -> Iterator[tuple[RealVerlEnv, RealVerlEnv]]:
    import docker_support
    from launch_support import remove_container

    docker_support._slot.acquire()
    made: list[RealVerlEnv] = []
    try:
        for name, devices in (("a", [0]), ("b", [1, 2])):
            (tmp_path / name).mkdir()
            env = make_realverl_env(tmp_path / name, docker_engine, realverl_image, nvidia_smi_table=FOUR_GPUS)
            env.spec["cluster"]["devices"] = devices
            env.state = tmp_path / "state"  # one user: one verlctl state directory
            made.append(env)
        yield made[0], made[1]
    finally:
        for env in made:
            remove_container(docker_engine, env.name)
        docker_support._slot.release()


def status_of(env: RealVerlEnv, run_id: str) -> dict[str, Any]:
    res = env.cli("status", run_id, "--json", timeout=180)
    assert res.code == 0, res.out + res.err
    return dict(json.loads(res.out))


def ckpt_files(env: RealVerlEnv) -> dict[str, int]:
    """The files of the saved steps (global_step_*/…) with their modification times (B's own saves rewrite
    latest_checkpointed_iteration.txt, so it is left out)."""
    return {str(p.relative_to(env.ckpt)): p.stat().st_mtime_ns for p in env.ckpt.glob("global_step_*/**/*")
            if p.is_file()}


#: B's steps: step 1, then the hold in step 2's update until A's stop is checked, then 2 and 3 and the finish.
B_STEPS = 3
B_HOLD_AT = 2


def test_two_real_runs_at_once_stop_of_one_leaves_the_other_training_to_its_finish(
        two_envs: tuple[RealVerlEnv, RealVerlEnv]) -> None:
    a, b = two_envs
    # A step of the tiny model takes ~3.5 s on a quiet machine: A is stopped long before its end.
    a.spec["train"]["steps"] = 1000
    b.spec["mode"] = "separate_async"
    b.spec["train"].update(steps=B_STEPS, trainer_devices=1, rollout_devices=1)
    release = b.root / "release-b"
    b.spec["env"].update({"VERLCTL_TEST_DOUBLE_HOLD_AT_STEP": str(B_HOLD_AT),
                          "VERLCTL_TEST_DOUBLE_HOLD_RELEASE": str(release)})
    with run_lock():
        have = mem_available_gib()
        if have < NEEDED_GIB:
            pytest.skip(f"two real-verl runs at once need about {NEEDED_GIB:.0f} GiB of available memory; "
                        f"this machine has {have:.1f} GiB now")
        with peak_memory_sampler(a.container) as peak_a, peak_memory_sampler(b.container) as peak_b:
            t0 = time.monotonic()
            launch(a)
            run_a = status(a)["run_id"]
            out_b = launch(b)
            run_b = status(b)["run_id"]
            assert run_a != run_b
            assert "training is running" in out_b, out_b[-4000:]
            # B's two devices: the fabric test ran first in its container, over gloo (the double's collectives)
            assert "fabric test: all-reduce and point-to-point over gloo" in out_b, out_b[-4000:]
            assert "over 2 ranks (gloo)" in " ".join(out_b.split()), out_b[-4000:]
            listed = a.cli("list", "--json", timeout=180)
            assert listed.code == 0 and run_a in listed.out and run_b in listed.out, listed.out + listed.err
            # both train: a real step each (B's step 2 is then held in its update)
            for env, run_id in ((a, run_a), (b, run_b)):
                st = wait_for(lambda e=env, r=run_id: (lambda s: s if s.get("last_step") or not s["alive"] else None)(
                    status_of(e, r)), 1200, 5, f"a step of {run_id}")
                assert st["last_step"] and st["last_step"]["step"] >= 1, st
            wait_for(lambda: f"holding at step {B_HOLD_AT}" in b.train_log.read_text(errors="replace"), 600, 2,
                     f"B held in step {B_HOLD_AT}")
            both_s = time.monotonic() - t0
            st_b = status_of(b, run_b)
            assert st_b["alive"] and st_b["state"] == "running", st_b
            b_before = ckpt_files(b)
            b_processes = run_processes(b)
            # a process of A's container that is not the run's: A's stop leaves it
            a.container.exec_run(["python3", "-c", "import time; time.sleep(3600)  # bystander"], detach=True)
            wait_for(lambda: "# bystander" in a.ps(), 60, what="the bystander process")

            # stop A by its id: A's processes go, B's stay
            res = a.cli("stop", run_a, "--json", timeout=300)
            assert res.code == 0, res.out + res.err
            wait_for(lambda: run_processes(a) == [] or None, 120, 2, "A's processes to go")
            st_a = status_of(a, run_a)
            assert st_a["state"] == "stopped" and st_a["alive"] is False, st_a
            assert "# bystander" in a.ps()
            st_b = status_of(b, run_b)
            assert st_b["alive"] is True and st_b["state"] == "running" and st_b["watcher"]["alive"], st_b
            # B's Ray head is the same processes as before the stop (same pids)
            b_now = run_processes(b)
            for name in ("raylet", "gcs_server", "start_verl.sh"):
                before = [ln for ln in b_processes if name in ln]
                assert before and all(ln in b_now for ln in before), (name, b_processes, b_now)
            assert int(st_b["last_step"]["step"]) == B_HOLD_AT - 1, st_b["last_step"]
            assert ckpt_files(b) == b_before, "B's checkpoints changed"

            # B goes on from its held step, trains to its end and finishes
            release.touch()
            st_b = wait_for_end(b, 1500, "B to finish")
            total_s = time.monotonic() - t0
    assert st_b["run_id"] == run_b and st_b["state"] == "finished", json.dumps(st_b, indent=1)[-3000:]
    assert status_of(a, run_a)["state"] == "stopped"
    assert all(k in ckpt_files(b) for k in b_before)
    log = b.train_log.read_text(errors="replace")
    assert f"released at step {B_HOLD_AT}" in log, log[-3000:]
    # verl's separate_async trainer ran (its V1 trainer), steps 1..N with its weight-sync timing
    steps_seen = sorted({int(x) for x in re.findall(r"step:(\d+) ", log)})
    assert steps_seen == list(range(1, B_STEPS + 1)), (steps_seen, log[-3000:])
    step_lines = [ln for ln in log.splitlines() if re.search(r"step:\d+ ", ln)]
    assert all("timing_s/update_weights" in ln for ln in step_lines), step_lines[-1][:2000]
    # real weight syncs through the engine verlctl's command names: actor rank 0 sent, the rollout received,
    # at the start (verl's on_init_end) and after every step
    sent = re.findall(r"gloo weight sync (\d+) sent \(global step (\d+), world 2\)", log)
    received = re.findall(r"gloo weight sync (\d+) received (\d+) tensors \(global step (\d+), rank 1\)", log)
    assert len(sent) >= B_STEPS + 1 and len(received) >= B_STEPS + 1, (sent, received)
    assert {int(s) for _, s in sent} >= set(range(0, B_STEPS + 1)), sent
    assert all(int(n) > 0 for _, n, _ in received), received
    assert saved_steps(b.ckpt) == list(range(1, B_STEPS + 1))
    print(f"\ntwo runs: both stepping after {both_s:.0f} s, A stopped, B (separate_async) finished after "
          f"{total_s:.0f} s; container peaks A {peak_a.gib:.2f} GiB, B {peak_b.gib:.2f} GiB (high-water "
          f"{peak_a.high_water_gib:.2f} / {peak_b.high_water_gib:.2f}); available at start {have:.1f} GiB")
