"""Faults of the state dir and the log dir on the real engine (issue 22, A16; the fault matrix of
tests/orchestrator/test_faults_docker.py, same style): a state dir that fills up during `launch` is one error line, and
the launch is undone: the container it created removed, the 0600 env file gone, no torn script copy in the
record. The training is the stand-in trainer (tests/standin, a TEST DOUBLE for verl's training step); Docker,
Ray, the mounts and the record are real."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from docker_support import ps_in
from fault_support import finish_watch, launch_and_watch, wait_event
from launch_support import LaunchEnv, remove_container

pytestmark = pytest.mark.docker


def mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {res.stderr.strip()}")


def test_state_dir_full_during_launch_undoes_the_launch(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    mount_tmpfs(launch_env.state, "12k")  # room for run.json and the first events, not for the record's copies
    try:
        res = launch_env.cli("launch", "-c", str(launch_env.spec_file), "--yes")
        text = res.out + res.err
        assert res.code != 0, text
        assert "Traceback" not in text, text
        errors = [ln for ln in res.err.splitlines() if ln.startswith("error: ")]
        assert len(errors) == 1 and "No space left on device" in errors[0], res.err
        assert "the launch is undone" in errors[0] and "removed container" in res.out, text
        # Nothing of the launch is left running or holding the key.
        left = docker_engine.containers.list(all=True, filters={"name": launch_env.name})
        assert not [c for c in left if c.name == launch_env.name], [c.status for c in left]
        runs = list((launch_env.state / "runs").iterdir()) if (launch_env.state / "runs").exists() else []
        for d in runs:
            for name in ("start_verl.sh", "run_training.sh", "spec.resolved.yaml"):
                p = d / name
                assert not p.exists() or p.stat().st_size > 0, name  # written whole or not at all
            for p in d.iterdir():
                assert not p.name.startswith("."), p  # no temporary file left
            doc = json.loads((d / "run.json").read_text())
            assert doc["run_id"] == d.name
    finally:
        remove_container(docker_engine, launch_env.name)
        subprocess.run(["umount", "-l", str(launch_env.state)], check=False)


LOG_GONE_WITHIN_S = 60.0  # the review's goal (the watcher checks every 15 s; a loaded machine adds a few)


def test_run_log_deleted_under_a_live_run_is_reported(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    import time

    launch_env.spec["train"]["steps"] = 600  # runs until stopped
    logs = Path(launch_env.spec["paths"]["logs"])
    watch = launch_and_watch(launch_env)
    try:
        log = next(logs.glob("verlctl-*.log"))
        t_fault = time.time()
        log.unlink()
        gone = wait_event(launch_env, "log_gone", LOG_GONE_WITHIN_S + 30)
        latency = gone["time"] - t_fault
        print(f"run log deleted -> log_gone event: {latency:.1f} s")
        assert latency <= LOG_GONE_WITHIN_S, latency
        assert "is gone (deleted or moved)" in gone["message"], gone
        res = launch_env.cli("logs", "-n", "3")
        assert res.code == 0 and "is gone (deleted or moved)" in res.err, res.err  # the trainer's own log
        assert launch_env.cli("stop").code == 0
        _code, out = finish_watch(watch, 180)
        assert "Traceback" not in out and "is gone" in out, out
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        remove_container(docker_engine, launch_env.name)


def test_log_disk_full_is_named(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    launch_env.spec["train"]["steps"] = 600
    logs = Path(launch_env.spec["paths"]["logs"])
    # room enough for the launch's own check of paths.logs (one run's log), then filled once training runs
    mount_tmpfs(logs, "400m")
    subprocess.run(["chmod", "0777", str(logs)], check=True)
    try:
        watch = launch_and_watch(launch_env)
        subprocess.run(["dd", "if=/dev/zero", f"of={logs / 'filler'}", "bs=1M"], check=False, capture_output=True)
        try:
            gave_up = wait_event(launch_env, "gave_up", 400)
        finally:
            code, out = finish_watch(watch, 180)
        assert gave_up["category"] == "disk_full", gave_up
        # (a log directory too small for the run from the start is refused before launch: log_space, in
        # tests/checks/test_checkpoint_disk.py; here it fills up mid-run)
        assert "df -h" in out, (gave_up, out)
        assert code == 1 and "Traceback" not in out, out
        st = json.loads(launch_env.cli("status", "--json").out)
        assert st["gave_up"]["category"] == "disk_full", st
    finally:
        remove_container(docker_engine, launch_env.name)
        subprocess.run(["umount", "-l", str(logs)], check=False)


FOLLOWERS = ('for p in /proc/[0-9]*; do tr "\\0" "\\n" < "$p/environ" 2>/dev/null | grep -q "^VERLCTL_FOLLOW=" '
             '&& echo "${p#/proc/}"; done; exit 0')


def test_a_sigtermed_watcher_leaves_no_follower_in_the_container(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    import time

    launch_env.spec["train"]["steps"] = 600
    watch = launch_and_watch(launch_env)
    try:
        container = docker_engine.containers.get(launch_env.name)
        deadline = time.monotonic() + 120
        while not container.exec_run(["sh", "-c", FOLLOWERS]).output.split():  # the watcher's tail -F is up
            assert time.monotonic() < deadline and watch.poll() is None, "no follower seen"
            time.sleep(0.5)
        # What `stop` does to a watcher that does not end by itself in time (and what a service manager does).
        watch.terminate()
        code, out = finish_watch(watch, 180)
        assert "Traceback" not in out and code == 143, (code, out)
        left = container.exec_run(["sh", "-c", FOLLOWERS]).output.split()
        assert left == [], f"followers left in the container: {left}"
        res = launch_env.cli("stop")
        assert res.code == 0, res.out + res.err
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        remove_container(docker_engine, launch_env.name)


def _followers(container, run_log: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The container pids of processes that tail the run log (a watcher's follower or a decoy)."""
    out = ps_in(container, "pid=,args=")
    return [ln.split()[0] for ln in out.splitlines() if "tail" in ln and run_log in ln and "ps -eo" not in ln]


def test_stop_after_a_kill_9_of_the_watcher_leaves_no_follower_and_spares_decoys(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """A18 after kill -9: the watcher's SIGTERM handler never runs, so its `tail -F` stays in the container;
    `stop` finds it by the run's id in its VERLCTL_FOLLOW token, its command and its parent (a docker exec),
    and stops it through the verified signal path. A colleague's `tail -F` of the same log (no token, or
    another run's token, or one started by a shell in the container) is left alone."""
    import time

    launch_env.spec["train"]["steps"] = 600
    watch = launch_and_watch(launch_env)
    try:
        container = docker_engine.containers.get(launch_env.name)
        record = json.loads(next((launch_env.state / "runs").iterdir()).joinpath("run.json").read_text())
        run_log, run_id = record["run_log"], record["run_id"]
        deadline = time.monotonic() + 120
        while not (ours := _followers(container, run_log)):  # the watcher's tail -F is up
            assert time.monotonic() < deadline and watch.poll() is None, "no follower seen"
            time.sleep(0.5)
        watch.kill()  # SIGKILL: no clean-up runs in the watcher
        watch.wait()
        # The killed watcher's followers are those tailing the log now, before any decoy: one it started again
        # after the first was seen (a follower is restarted when the engine loses an exec's output) is its own too.
        ours = _followers(container, run_log)
        assert ours, "the watcher's follower did not outlive its kill -9"
        # Decoys: a colleague's tails of the same log (one with another run's token, one with this run's token
        # but started by a shell in the container, one plain).
        container.exec_run(["tail", "-c", "+1", "-F", "--", run_log], detach=True,
                           environment={"VERLCTL_FOLLOW": "other-run/0123456789abcdef"})
        container.exec_run(["sh", "-c", 'tail -c +1 -F -- "$0" & wait', run_log], detach=True,
                           environment={"VERLCTL_FOLLOW": f"{run_id}/0123456789abcdef"})
        container.exec_run(["tail", "-c", "+1", "-F", "--", run_log], detach=True)
        deadline = time.monotonic() + 60
        while len(decoys := [p for p in _followers(container, run_log) if p not in ours]) < 3:
            assert time.monotonic() < deadline, decoys
            time.sleep(0.3)
        assert _followers(container, run_log) == sorted([*ours, *decoys], key=int)  # ours survived the kill -9
        res = launch_env.cli("stop", "--json")
        assert res.code == 0, res.out + res.err
        doc = json.loads(res.out)
        assert sorted(map(str, doc["followers_stopped"])) == sorted(ours), (doc, ours)
        deadline = time.monotonic() + 30
        while set(_followers(container, run_log)) & set(ours):
            assert time.monotonic() < deadline, _followers(container, run_log)
            time.sleep(0.3)
        assert sorted(_followers(container, run_log), key=int) == sorted(decoys, key=int)  # decoys alive
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
        remove_container(docker_engine, launch_env.name)
