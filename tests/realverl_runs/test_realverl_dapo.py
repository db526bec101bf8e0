"""DAPO on real verl 0.9.1 (its core trainer, as verlctl renders ``algorithm: dapo``), through ``verlctl launch``,
then a Ray actor killed mid-run (vLLM's rollout server, then the FSDP training worker), on CPU.

What is a double: the accelerator only (tests/realverl/verl_cpu_device_double.py, tests/image/nvidia-smi).
Real: verl's DAPO (the ``dapo`` reward manager with its overlong buffer, ``algorithm.filter_groups``,
clip-higher), Ray, vLLM's CPU build, the FSDP2 actor, checkpoints and resume, ``kill -9`` of the actor's process.
The reward is the image's digit share (src/verlctl/demo/reward.py): verl's gsm8k reward scores the random
model 0 everywhere, every group would be filtered and DAPO would never make a step.

One DAPO run, two launches (each training start costs minutes of CPU, so the kills ride on the DAPO run):
1. ``train.steps: 12`` (never reached): steps 1 and 2 (or more) with a checkpoint each; verl's own config dump
   shows DAPO's settings; the overlong penalty makes scores negative (the digit share and gsm8k's score are never
   below 0). The accelerator double holds the end of step 3's rollout
   (``VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP``, after step 2's checkpoint, weight sync and metrics line);
   there vLLM's server (``ray::vLLMHttpServer``) is killed and the hold released, so verl's next call to the server
   is the servers' sleep: ``status`` names the actor by its class, the run ends ``failed``, ``stop`` leaves no
   process of the run in the container.
2. relaunched: verl resumes from global_step_2 and saves the next; then the training worker (``ray::WorkerDict``)
   is killed: named, ``failed``, nothing left after ``stop``; every checkpoint up to it is intact.
"""

from __future__ import annotations

import ast
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from realverl_support import RealVerlEnv, peak_memory_sampler, run_lock
from test_realverl import ended, launch, run_processes, saved_steps, status, wait_for, wait_for_file

from docker_support import ps_in

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

#: The digit-share reward the image carries (tests/image/build_realverl.sh copies src/verlctl/demo/reward.py).
REWARD = ["reward.custom_reward_function.path=/opt/verlctl-realverl/digit_reward.py",
          "reward.custom_reward_function.name=compute_score"]
#: Ray's prefix on a line an actor printed (``(TaskRunner pid=12) ``), and terminal colour codes (Ray colours it).
_RAY_PREFIX = re.compile(r"^\([\w.]+ pid=\d+(?:, ip=[^)]*)?\) ?", re.M)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def config_dump_value(log: str, key: str) -> Any:
    """The value of ``key`` in the first config dump verl printed (``pprint`` of the resolved config, in
    TaskRunner.run), parsed: the text after ``'key': `` up to its balanced end.

    Ray's log monitor forwards an actor's output in chunks and cuts a long line where a chunk ends, anywhere,
    even inside a quoted string (``'path': '~/models/FsfairX-L`` / ``(TaskRunner pid=540) LaMA3-RM-v0.1',``).
    With Ray's prefixes taken off, the dump's newlines are only layout (pprint breaks between items, and splits
    a long string into adjacent literals), so they are dropped before the value is read: a cut line reads as
    it was printed."""
    text = _RAY_PREFIX.sub("", _ANSI.sub("", log))
    start = text.find(f"'{key}': ")
    assert start >= 0, f"{key} not in verl's config dump"
    i = start + len(key) + 4
    rest = text[i:].replace("\n", "")
    if rest[0] != "{":
        return ast.literal_eval(re.match(r"[^,}]+", rest).group(0))  # type: ignore[union-attr]
    depth = 0
    for j, ch in enumerate(rest):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth == 0:
            return ast.literal_eval(rest[: j + 1])
    raise AssertionError(f"unbalanced config dump after {key}")


def pids(env: RealVerlEnv, proctitle: str) -> list[int]:
    """Processes in the container whose command line starts with ``proctitle`` (Ray names an actor's process
    ``ray::<Class>`` and ``ray::<Class>.<method>`` while it runs one)."""
    out = ps_in(env.container, "pid,args")
    found = []
    for ln in out.splitlines()[1:]:
        pid, _, args = ln.strip().partition(" ")
        if args.strip() == proctitle or args.strip().startswith((proctitle + " ", proctitle + ".")):
            found.append(int(pid))
    return found


def kill_and_follow(env: RealVerlEnv, proctitle: str, actor: str, release: Path | None = None) -> dict[str, Any]:
    """``kill -9`` the actor's process (then create ``release``, the double's hold's end, if given); the seconds
    until ``status`` names ``actor``, and the status once the run ended."""
    (pid, *_) = wait_for(lambda: pids(env, proctitle), 120, 1, f"a {proctitle} process")
    res = env.container.exec_run(["kill", "-9", str(pid)])
    t_kill = time.monotonic()
    assert res.exit_code == 0, res.output
    if release is not None:
        wait_for(lambda: pid not in pids(env, proctitle), 60, 1, f"{proctitle} {pid} to be gone")
        release.touch()
    st = wait_for(lambda: (lambda s: s if actor in json.dumps(s.get("last_error") or {}) else None)(status(env)),
                  180, 1, f"status to name the killed actor {actor}")  # seconds quiet; minutes on a loaded host
    named_s = time.monotonic() - t_kill
    assert st["last_error"]["category"] == "ray_actor_died", st["last_error"]
    st = wait_for(lambda: (lambda s: s if ended(s) else None)(status(env)), 300, 3, "the run to end")
    assert str(st["state"]).startswith("failed"), json.dumps(st, indent=1)[-3000:]
    return {"named_s": named_s, "ended_s": time.monotonic() - t_kill, "status": st}


def stop_leaves_nothing(env: RealVerlEnv) -> None:
    res = env.cli("stop", "--json", timeout=300)
    assert res.code == 0, res.out + res.err
    left = wait_for(lambda: run_processes(env) == [] or None, 120, 2, "the run's processes to go")
    assert left is True
    st = status(env)
    assert st["alive"] is False and str(st["state"]).startswith("failed"), st  # the verdict is kept
    assert st["watcher"]["alive"] is False, st["watcher"]


def tracked_step(env: RealVerlEnv) -> int:
    """The step verl's checkpoint tracker names (what a resume starts from); 0 before the first save."""
    p = env.ckpt / "latest_checkpointed_iteration.txt"
    return int(p.read_text().strip() or 0) if p.exists() else 0


def step_done(env: RealVerlEnv, step: int) -> bool:
    """verl's tracker names ``step`` (or later) and verl printed that step's metrics line (after its weight sync)."""
    return tracked_step(env) >= step and re.search(rf"(?:^|[\s)])step:{step} - ",
                                                    env.train_log.read_text(errors="replace")) is not None


def test_real_verl_dapo_trains_checkpoints_resumes_and_a_killed_rollout_server_and_worker_are_named(
        realverl_env: RealVerlEnv) -> None:
    env = realverl_env
    env.spec["algorithm"] = "dapo"
    env.spec["train"]["steps"] = 12  # never reached: each launch ends with a kill
    env.spec["extra_overrides"] += REWARD
    timings: dict[str, float] = {}
    with run_lock(), peak_memory_sampler(env.container) as peak:
        # ---- 1. DAPO: steps 1 and 2, two checkpoints; then vLLM's rollout server is killed mid-run.
        # Where the kill lands matters. verl 0.9.1's step (PPOTrainerSync) dispatches the prompts to the agent
        # loop, waits for the samples, puts the rollout servers to sleep, updates the actor, saves the checkpoint,
        # then syncs the weights to the servers and prints the step's metrics line. A kill that lands in the
        # weight sync leaves verl silent (Ray's raylet says a worker died, no class named; verl printed nothing
        # more for 180 s: a stall, not a named actor), and a step takes ~3 s, so no wait for a line places a
        # kill: a CI run once killed the server in step 3's sync after step 2's line. The double holds the end
        # of step 3's rollout instead, and the kill lands there: verl's next call to the server is the sleep,
        # where it raises Ray's error that names the actor.
        release = env.root / "release-rollout"
        env.spec["env"].update({"VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP": "3",
                                "VERLCTL_TEST_DOUBLE_HOLD_RELEASE": str(release)})
        t0 = time.monotonic()
        launch(env)
        held = "verl_cpu_device_double: holding after the rollout of step 3"
        assert wait_for_file(env, lambda: held in env.train_log.read_text(errors="replace"), 1500,
                             "the double to hold the end of step 3's rollout"), (
            f"the run ended without the hold: {saved_steps(env.ckpt)}", env.train_log.read_text(errors="replace")[-3000:])
        timings["dapo_2_steps_s"] = time.monotonic() - t0
        assert tracked_step(env) == 2 and saved_steps(env.ckpt) == [1, 2], (saved_steps(env.ckpt), status(env))
        assert step_done(env, 2), env.train_log.read_text(errors="replace")[-3000:]
        killed = kill_and_follow(env, "ray::vLLMHttpServer", "vLLMHttpServer", release)
        timings["rollout_server_named_s"] = killed["named_s"]
        timings["rollout_server_failed_s"] = killed["ended_s"]
        stop_leaves_nothing(env)
        log = env.train_log.read_text(errors="replace")
        # verl's own resolved config: DAPO's dynamic sampling, reward manager, overlong buffer and clip-higher
        fg = config_dump_value(log, "filter_groups")
        assert fg["enable"] is True and fg["metric"] == "acc", fg
        rm = config_dump_value(log, "reward_manager")
        assert rm["name"] == "dapo", rm
        ob = config_dump_value(log, "overlong_buffer_cfg")
        assert ob["enable"] is True and 0 < ob["len"] < env.spec["train"]["max_response_length"], ob
        assert config_dump_value(log, "clip_ratio_high") > config_dump_value(log, "clip_ratio_low"), log[:2000]
        assert config_dump_value(log, "use_kl_loss") is False
        # the overlong penalty reached the scores: only it makes a score negative here
        mins = [float(x) for x in re.findall(r"critic/score/min:(-?[\d.]+)", log)]
        assert mins and min(mins) < 0, (mins, log[-2000:])
        assert "released after the rollout of step 3" in log, log[-3000:]
        resumed_at = tracked_step(env)
        assert resumed_at == 2 and saved_steps(env.ckpt) == [1, 2], (resumed_at, saved_steps(env.ckpt))

        # ---- 2. relaunched: resumes from global_step_2, saves the next; then the FSDP worker is killed.
        nxt = resumed_at + 1
        for knob in ("VERLCTL_TEST_DOUBLE_HOLD_AFTER_ROLLOUT_AT_STEP", "VERLCTL_TEST_DOUBLE_HOLD_RELEASE"):
            env.spec["env"].pop(knob)
        t0 = time.monotonic()
        launch(env)
        wait_for_file(env, lambda: step_done(env, nxt), 1500, f"global_step_{nxt} saved and its weights synced")
        timings["resume_to_step_3_s"] = time.monotonic() - t0
        assert tracked_step(env) >= nxt, (saved_steps(env.ckpt), status(env))
        killed = kill_and_follow(env, "ray::WorkerDict", "WorkerDict")
        timings["worker_named_s"] = killed["named_s"]
        timings["worker_failed_s"] = killed["ended_s"]
        stop_leaves_nothing(env)
    log = env.train_log.read_text(errors="replace")
    assert re.search(rf"Resuming from \S+global_step_{resumed_at}, setting global step to {resumed_at}\b", log), (
        log[-3000:])
    assert saved_steps(env.ckpt)[:nxt] == list(range(1, nxt + 1)), saved_steps(env.ckpt)
    assert tracked_step(env) >= nxt and (env.ckpt / f"global_step_{nxt}" / "actor").is_dir()
    print(f"\nDAPO + killed actors: {json.dumps({k: round(v, 1) for k, v in timings.items()})}, "
          f"container peak {peak.gib:.2f} GiB (high-water {peak.high_water_gib:.2f} GiB)")
