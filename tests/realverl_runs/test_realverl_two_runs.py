"""Two real-verl 0.9.1 runs of one user on one host at once (two containers, devices 0 and 1, one verlctl state
directory), through ``verlctl launch``: both train; ``verlctl stop`` of one stops that run only (a process of
its container that is not the run's stays); the other keeps running, its checkpoints untouched, and trains its next step (then it is stopped too: a real finish and
a resume are the single-run tests' subject, tests/realverl_runs/test_realverl.py).

What is a double: the accelerator only (tests/realverl/verl_cpu_device_double.py, and the image's
tests/image/nvidia-smi showing a real capture of a 4-GPU host, so that device 1 exists). Real: two Ray heads,
two verl trainers with their vLLM servers, verlctl's watcher of each, ``stop``'s process selection.

Each run peaks at about 7.3 GiB here: the test needs about 15 GiB of available memory and skips, saying so,
on a machine that has less when it starts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from realverl_support import RealVerlEnv, make_realverl_env, peak_memory_sampler, run_lock
from test_realverl import launch, run_processes, saved_steps, status, wait_for

from docker_support import REPO_ROOT

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

#: A real `nvidia-smi` capture of a 4-GPU host (the image's default table shows one GPU).
FOUR_GPUS = REPO_ROOT / "tests" / "fixtures" / "nvidia-smi" / "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt"
#: Available memory the two runs need (two peaks of ~7.3 GiB, measured, plus the host's own).
NEEDED_GIB = 17.0


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
        for name, device in (("a", 0), ("b", 1)):
            (tmp_path / name).mkdir()
            env = make_realverl_env(tmp_path / name, docker_engine, realverl_image, nvidia_smi_table=FOUR_GPUS)
            env.spec["cluster"]["devices"] = [device]
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


def test_two_real_runs_at_once_stop_of_one_leaves_the_other_training(two_envs: tuple[RealVerlEnv, RealVerlEnv]) -> None:
    a, b = two_envs
    # A step of the tiny model takes ~3.5 s on a quiet machine: both are stopped long before their ends.
    a.spec["train"]["steps"] = 1000
    b.spec["train"]["steps"] = 1000
    with run_lock():
        have = mem_available_gib()
        if have < NEEDED_GIB:
            pytest.skip(f"two real-verl runs at once need about {NEEDED_GIB:.0f} GiB of available memory; "
                        f"this machine has {have:.1f} GiB now")
        with peak_memory_sampler(a.container) as peak_a, peak_memory_sampler(b.container) as peak_b:
            t0 = time.monotonic()
            launch(a)
            run_a = status(a)["run_id"]
            launch(b)
            run_b = status(b)["run_id"]
            assert run_a != run_b
            listed = a.cli("list", "--json", timeout=180)
            assert listed.code == 0 and run_a in listed.out and run_b in listed.out, listed.out + listed.err
            # both train: a real step each
            for env, run_id in ((a, run_a), (b, run_b)):
                st = wait_for(lambda e=env, r=run_id: (lambda s: s if s.get("last_step") or not s["alive"] else None)(
                    status_of(e, r)), 1200, 5, f"a step of {run_id}")
                assert st["last_step"] and st["last_step"]["step"] >= 1, st
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
            # B's Ray head is the same processes as before the stop (same pids), and B goes on training
            b_now = run_processes(b)
            for name in ("raylet", "gcs_server", "start_verl.sh"):
                before = [ln for ln in b_processes if name in ln]
                assert before and all(ln in b_now for ln in before), (name, b_processes, b_now)
            step_at_stop = int(st_b["last_step"]["step"])
            b_after = ckpt_files(b)
            assert {k: v for k, v in b_after.items() if k in b_before} == b_before, "B's checkpoints changed"

            # B trains its next step after A's stop, then it is stopped too
            st_b = wait_for(lambda: (lambda s: s if not s["alive"] or int(s["last_step"]["step"]) > step_at_stop
                                     else None)(status_of(b, run_b)), 600, 5, "B's next step")
            assert st_b["alive"] and int(st_b["last_step"]["step"]) > step_at_stop, st_b
            res = b.cli("stop", run_b, "--json", timeout=300)
            assert res.code == 0, res.out + res.err
            wait_for(lambda: run_processes(b) == [] or None, 120, 2, "B's processes to go")
            total_s = time.monotonic() - t0
    saved = saved_steps(b.ckpt)
    assert saved == list(range(1, len(saved) + 1)) and saved[-1] >= step_at_stop, (saved, step_at_stop)
    assert all(k in ckpt_files(b) for k in b_before)
    assert status_of(b, run_b)["state"] == "stopped"
    assert status_of(a, run_a)["state"] == "stopped"
    print(f"\ntwo runs: both stepping after {both_s:.0f} s, B stepped on and was stopped after {total_s:.0f} s; "
          f"container peaks A {peak_a.gib:.2f} GiB, B {peak_b.gib:.2f} GiB (high-water {peak_a.high_water_gib:.2f} / "
          f"{peak_b.high_water_gib:.2f}); available at start {have:.1f} GiB")
