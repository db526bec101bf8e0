"""The fault matrix on the real engine: each fault is reported by the watcher (an event, and `status`) soon
after it happens, with the right state, and nothing of the run is lost (the record, the events, the
checkpoints written before the fault).

The product aims at 5 s from the fault to the event; the tests allow 10 s (the machine running them is
loaded) and print the measured latency. The training is the stand-in trainer (tests/standin, a TEST
DOUBLE for verl's training step); Docker, Ray, the mounts and the watcher are real.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from docker_support import ps_in
from fault_support import events, finish_watch, launch_and_watch, poll_value, run_dir, wait_event
from launch_support import LaunchEnv, remove_container

pytestmark = pytest.mark.docker

REPORT_WITHIN_S = 10.0  # product target 5 s; doubled for a loaded test machine
#: A killed Ray head is seen by the watcher's liveness scan (the head's gcs_server / raylet among the attempt's
#: verified processes), confirmed by a second scan 0.5 s later. The product target is 5 s; the margin is one
#: liveness interval (Watcher.liveness_every_s, 2.5 s): the fault can land just after a scan, and on the loaded
#: test machine each scan (a `docker exec` of python3) takes up to a second or so. Before this check the alert
#: came from the log only, after Ray's own GCS reconnect timeout (60 s; 62 s seen in CI).
RAY_HEAD_REPORT_WITHIN_S = 5.0 + 2.5


def checkpoints(env: LaunchEnv) -> list[str]:
    return sorted(p.name for p in Path(env.spec["paths"]["checkpoints"]).glob("global_step_*"))


def nothing_lost(env: LaunchEnv, before: list[str]) -> None:
    record = json.loads((run_dir(env) / "run.json").read_text())
    assert record["attempts"] and record["run_id"] == run_dir(env).name
    kinds = [e["event"] for e in events(env)]
    firsts = [k for k in kinds if k in ("launch", "started", "verified")]
    assert firsts[:3] == ["launch", "started", "verified"], kinds
    assert set(before) <= set(checkpoints(env)), (before, checkpoints(env))


def status(env: LaunchEnv) -> dict[str, Any]:
    res = env.cli("status", "--json")
    assert res.code == 0, res.out + res.err
    return json.loads(res.out)  # type: ignore[no-any-return]


@pytest.fixture
def fenv(launch_env: LaunchEnv) -> LaunchEnv:
    launch_env.spec["train"]["steps"] = 600  # runs until the fault
    return launch_env


def test_container_killed(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    watch = launch_and_watch(fenv)
    try:
        before = poll_value(lambda: (c := checkpoints(fenv)) and len(c) >= 2 and c, 180, "two checkpoints")
        t_fault = time.time()
        docker_engine.containers.get(fenv.name).kill()
        lost = wait_event(fenv, "target_lost", 60)
    finally:
        code, out = finish_watch(watch)
    latency = lost["time"] - t_fault
    print(f"container killed -> target_lost event: {latency:.2f} s")
    assert latency <= REPORT_WITHIN_S, latency
    assert lost["state"] == "exited" and lost["exit_code"] == 137, lost
    assert code == 1, out
    gave_up = wait_event(fenv, "gave_up", 5)
    assert "is exited (exit code 137)" in gave_up["reason"] and "checkpoints are kept" in gave_up["reason"]
    assert "lost the run's container" in out and "Traceback" not in out, out
    st = status(fenv)
    assert st["container"]["state"] == "exited" and st["state"] == "failed", st
    assert str(st["state_why"]).startswith("the watcher gave up"), st
    nothing_lost(fenv, before)


def test_log_stalls(fenv: LaunchEnv) -> None:
    fenv.spec["env"].update({"VERLCTL_STANDIN_STALL_AT_STEP": "4"})
    fenv.spec["recovery"] = {"stall_min_s": 8, "stall_step_factor": 2.0}
    watch = launch_and_watch(fenv)
    try:
        stalled = wait_event(fenv, "stalled", 240)
    finally:
        code, out = finish_watch(watch)
    idle, limit = (float(x) for x in
                   __import__("re").search(r"no progress for (\d+)s .*\(limit (\d+)s\)", stalled["reason"]).groups())
    print(f"log stalled -> stalled event {idle - limit:.0f} s after the limit ({limit:.0f} s) was reached")
    assert idle - limit <= REPORT_WITHIN_S, stalled
    assert code == 1 and "stalled" in out, out
    st = status(fenv)
    assert st["alive"] is True and st["gave_up"]["reason"].startswith("gave up: stalled"), st  # hung, not dead
    nothing_lost(fenv, ["global_step_1", "global_step_2", "global_step_3"])
    fenv.cli("stop")


def test_checkpoint_disk_full(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    ckpt = Path(fenv.spec["paths"]["checkpoints"])
    ckpt.mkdir(parents=True)
    # Room for a few of the stand-in's checkpoints (a page per file), then ENOSPC.
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24k,mode=0777", "tmpfs", str(ckpt)],
                           capture_output=True, text=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mount.stderr.strip()}")
    log = Path(fenv.spec["paths"]["logs"])
    try:
        watch = launch_and_watch(fenv)
        try:
            def full() -> float | None:
                text = "".join(p.read_text(errors="replace") for p in log.glob("verlctl-*.log"))
                return time.time() if "No space left on device" in text else None

            t_fault = poll_value(full, 240, "the disk-full error in the log")
            alert = wait_event(fenv, "alert", 60)
        finally:
            code, out = finish_watch(watch)
        latency = alert["time"] - t_fault
        print(f"checkpoint disk full -> alert: {latency:.2f} s after the error line was seen")
        assert latency <= REPORT_WITHIN_S, latency
        assert alert["category"] == "disk_full", alert
        assert code == 1, out
        st = status(fenv)
        assert st["state"].startswith(("failed", "not running")) and st["last_error"]["category"] == "disk_full", st
        saved = checkpoints(fenv)
        assert saved and "global_step_1" in saved, saved
        nothing_lost(fenv, saved)
    finally:
        remove_container(docker_engine, fenv.name)
        subprocess.run(["umount", "-l", str(ckpt)], check=False)


def test_ray_head_killed(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    watch = launch_and_watch(fenv)
    try:
        before = poll_value(lambda: (c := checkpoints(fenv)) and len(c) >= 2 and c, 180, "two checkpoints")
        container = docker_engine.containers.get(fenv.name)
        ps = ps_in(container, "pid=,args=")
        gcs = [ln.split()[0] for ln in ps.splitlines() if "gcs_server" in ln and "verlctl-ray-" in ln]
        assert len(gcs) == 1, ps
        t_fault = time.time()
        assert container.exec_run(["kill", "-9", gcs[0]]).exit_code == 0
        alert = wait_event(fenv, "alert", RAY_HEAD_REPORT_WITHIN_S + 60)
    finally:
        code, out = finish_watch(watch, timeout=120)
    latency = alert["time"] - t_fault
    print(f"Ray head (gcs_server) killed -> alert {alert['category']}: {latency:.2f} s")
    assert latency <= RAY_HEAD_REPORT_WITHIN_S, (latency, alert)
    # The head's processes go with it; the watcher names the dead daemon (or the driver's first error names the
    # dead actor, a consequence whose hint points back at the node, or the lost GCS / raylet).
    tail = "".join(p.read_text(errors="replace") for p in Path(fenv.spec["paths"]["logs"]).glob("verlctl-*.log"))
    assert alert["category"] in ("ray_gcs_unreachable", "raylet_died", "ray_actor_died"), (alert, tail[-3000:])
    assert code == 1, out
    # The watcher names the daemon it found gone: gcs_server, or the raylet when that went first (a SIGKILLed
    # gcs_server can stay in the process table while the kernel tears it down; the raylet exits on its own).
    assert "the Ray head of attempt 1 is gone: " in out or "ray_actor_died" in out, out
    st = status(fenv)
    assert st["alive"] is False and st["gave_up"] is not None, st
    nothing_lost(fenv, before)


@pytest.fixture
def ssh_home(tmp_path: Path):  # type: ignore[no-untyped-def]
    from test_multinode_docker import private_sshd

    yield from private_sshd(tmp_path)


def test_a_worker_node_becomes_unreachable(launch_env: LaunchEnv, ssh_home: Path) -> None:
    import psutil

    from test_multinode_docker import WORKER, _local_ip

    env = launch_env
    env.spec["cluster"].update({"nodes": [_local_ip(), WORKER], "devices": [0, 1, 2, 3],
                                "ssh_config": str(ssh_home / ".ssh" / "config")})
    env.spec["train"].update({"steps": 600})
    watch = launch_and_watch(env)
    try:
        before = poll_value(lambda: (c := checkpoints(env)) and len(c) >= 2 and c, 240, "two checkpoints")
        # The node's sshd goes away (listener and the sessions it forked: what a node off the network is to ssh).
        sshd = psutil.Process(int((ssh_home.parent / "sshd" / "sshd.pid").read_text()))
        t_fault = time.time()
        for p in [*sshd.children(recursive=True), sshd]:
            p.kill()
        ev = wait_event(env, "node_unreachable", 60)
        latency = ev["time"] - t_fault
        print(f"worker node unreachable -> node_unreachable event: {latency:.2f} s")
        assert latency <= REPORT_WITHIN_S, latency
        assert ev["node"] == WORKER and "unreachable" in ev["reason"], ev
        st = status(env)
        [worker] = st["workers"]
        assert worker["state"].startswith("unreachable"), st
        assert st["alive"] is True, st  # the head trains on: Ray's own traffic does not go through ssh
        nothing_lost(env, before)
    finally:
        env.cli("stop")
        code, out = finish_watch(watch)
    assert code == 0 and f"worker node {WORKER}" in out, out


@pytest.fixture
def private_engine(docker_engine, test_image):  # type: ignore[no-untyped-def]
    """A Docker engine of this test only (own data root, exec root, socket, pid file; no bridge, no iptables),
    holding the test image, that the test may restart. The shared engine is never restarted.

    It runs in a network namespace of its own: a dockerd started with ``--bridge none`` deletes the
    ``docker0`` interface of its namespace, which on the host is the shared engine's bridge."""
    import shutil
    import tempfile

    import docker

    dockerd = shutil.which("dockerd")
    if dockerd is None or shutil.which("unshare") is None:
        pytest.skip("dockerd or unshare is not installed: a private engine cannot be started here")
    host_bridge = subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode == 0
    root = Path(tempfile.mkdtemp(prefix="vt-dockerd-", dir="/tmp"))  # short: unix socket paths are limited
    sock = root / "docker.sock"
    argv = ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "private-dockerd",
            dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"), "-H", f"unix://{sock}",
            "--pidfile", str(root / "docker.pid"), "--bridge", "none", "--iptables=false"]
    state: dict[str, Any] = {}

    def start() -> None:
        log = open(root / "dockerd.log", "ab")  # noqa: SIM115 - handed to the daemon
        state["proc"] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        log.close()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if state["proc"].poll() is not None:
                break
            try:
                docker.DockerClient(base_url=f"unix://{sock}", version="auto", timeout=10).ping()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.5)
        tail = (root / "dockerd.log").read_text(errors="replace")[-1500:]
        stop()
        pytest.skip(f"a private dockerd could not start here: {tail}")

    def stop() -> None:
        proc = state.get("proc")
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)

    start()
    try:
        save = subprocess.Popen(["docker", "save", test_image], stdout=subprocess.PIPE)
        load = subprocess.run(["docker", "-H", f"unix://{sock}", "load"], stdin=save.stdout, capture_output=True,
                              text=True, timeout=900)
        save.wait(timeout=60)
        assert load.returncode == 0 and save.returncode == 0, load.stderr
        yield {"socket": sock, "start": start, "stop": stop, "url": f"unix://{sock}"}
    finally:
        try:
            if state["proc"].poll() is not None:
                start()
            client = docker.DockerClient(base_url=f"unix://{sock}", version="auto", timeout=60)
            for c in client.containers.list(all=True):
                c.remove(force=True)
        finally:
            stop()
            subprocess.run(["rm", "-rf", "--", str(root)], check=False)
            if host_bridge:  # the shared engine's bridge is untouched
                assert subprocess.run(["ip", "link", "show", "docker0"], capture_output=True).returncode == 0


def test_docker_engine_restarted(launch_env: LaunchEnv, private_engine) -> None:  # type: ignore[no-untyped-def]
    env = launch_env
    env.extra_env["DOCKER_HOST"] = private_engine["url"]
    env.spec["train"]["steps"] = 600
    missed: str | None = None
    watch = launch_and_watch(env)
    try:
        before = poll_value(lambda: (c := checkpoints(env)) and len(c) >= 2 and c, 240, "two checkpoints")
        t_fault = time.time()
        private_engine["stop"]()  # SIGTERM: the engine stops its containers (no live-restore), then exits
        engine_gone_s = time.time() - t_fault
        try:
            lost = wait_event(env, "target_lost", 60)
        except AssertionError as exc:  # say what the watcher printed, and when the engine went
            watch.terminate()
            missed = f"{exc}; the engine was gone {engine_gone_s:.1f}s after the fault"
            raise
        latency = lost["time"] - t_fault
        print(f"Docker engine stopped -> target_lost event ({lost['state']}): {latency:.2f} s")
        # Seen while the engine was stopping (its container exited) or once it was gone.
        assert lost["state"] in ("exited", "engine unreachable"), lost
        private_engine["start"]()
        if lost["state"] == "engine unreachable":
            back = wait_event(env, "engine_back", 120)
            assert back["state"] == "exited", back
    finally:
        code, out = finish_watch(watch, timeout=180)
        if missed is not None:
            raise AssertionError(f"{missed}; the watcher said: {out}") from None
    assert latency <= REPORT_WITHIN_S, latency
    assert code == 1 and "Traceback" not in out, out
    gave_up = wait_event(env, "gave_up", 5)
    assert "is exited" in gave_up["reason"], gave_up
    st = status(env)
    assert st["container"]["state"] == "exited" and st["state"] == "failed", st
    assert str(st["state_why"]).startswith("the watcher gave up"), st
    nothing_lost(env, before)


# ------------------------------------------------------------------ Ctrl-C / SIGTERM during launch (A19)

INTERRUPT_CLEANED_WITHIN_S = 60.0  # the verified stop (20 s grace at most) and the container's removal, loaded


@pytest.mark.parametrize(("phase", "sig"), [("preflight:", "SIGINT"), ("verify that", "SIGTERM")])
def test_an_interrupted_launch_stops_what_it_started(fenv: LaunchEnv, docker_engine, phase: str, sig: str) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C (or SIGTERM) during `launch`: exit 130 with one line, the gate closed, the attempt stopped, the
    container this launch created removed, the run marked stopped: nothing keeps training (review A19)."""
    import os
    import signal
    import tempfile

    err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - read after the process ends
    proc = subprocess.Popen([sys.executable, "-m", "verlctl", "launch", "-c", str(fenv.spec_file), "--yes"],
                            env=fenv.env(), stdout=subprocess.PIPE, stderr=err, text=True)
    seen = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if phase in line:
                break
        assert any(phase in ln for ln in seen), "".join(seen)
        t_sig = time.monotonic()
        os.kill(proc.pid, getattr(signal, sig))  # the launch's own process, started above
        rest = proc.communicate(timeout=INTERRUPT_CLEANED_WITHIN_S + 60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - t_sig
    err.seek(0)
    stderr = err.read()
    print(f"{sig} during '{phase}': exit {proc.returncode} after {took:.1f} s")
    assert proc.returncode == 130, "".join(seen) + rest + stderr
    assert took <= INTERRUPT_CLEANED_WITHIN_S, took
    what = "Ctrl-C" if sig == "SIGINT" else "SIGTERM"
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and f"interrupted ({what}) during launch of run" in lines[0], stderr
    assert "Traceback" not in stderr + rest
    assert "removed container" in rest or "container" in lines[0], rest + stderr
    assert docker_engine.containers.list(all=True, filters={"name": fenv.name}) == []
    kinds = [e["event"] for e in events(fenv)]
    assert "launch_interrupted" in kinds, kinds
    st = status(fenv)
    assert st["state"] != "running", st
    record = json.loads((run_dir(fenv) / "run.json").read_text())
    assert record["stopped"] is True


def test_two_watchers_of_one_run(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """A7: a second `verlctl watch` of a watched run is refused at once, naming the first; after an OOM the
    run is relaunched once, every attempt is recorded, and `stop` leaves nothing of it running."""
    offload = "actor_rollout_ref.actor.megatron.param_offload=True"
    fenv.spec["train"]["steps"] = 600
    fenv.spec["env"].update({"VERLCTL_STANDIN_OOM_AT_STEP": "3", "VERLCTL_STANDIN_OOM_UNLESS": offload})
    res = fenv.cli("launch", "-c", str(fenv.spec_file), "--yes", "--watch")
    assert res.code == 0, res.out + res.err
    first = wait_event(fenv, "watch_started", 60)
    t0 = time.monotonic()
    second = fenv.cli("watch", timeout=120)
    refused_s = time.monotonic() - t0
    print(f"second watcher refused after {refused_s:.1f} s (CLI start-up included)")
    assert second.code != 0, second.out
    assert f"already watched (pid {first['pid']})" in second.err and "Traceback" not in second.err, second.err
    assert refused_s <= REPORT_WITHIN_S + 10, refused_s
    wait_event(fenv, "recovery", 240)
    started = poll_value(lambda: [e for e in events(fenv) if e["event"] == "started"][1:] or None, 120,
                       "attempt 2 started")
    kinds = [e["event"] for e in events(fenv)]
    assert kinds.count("watch_started") == 1 and kinds.count("recovery") == 1, kinds
    assert kinds.count("started") == 2, kinds
    record = json.loads((run_dir(fenv) / "run.json").read_text())
    assert [a["pgid"] for a in record["attempts"]][1] == started[0]["pgid"], record["attempts"]
    assert record["watcher_pid"] == first["pid"]
    res = fenv.cli("stop", "--grace", "10")
    assert res.code == 0, res.err
    assert f"stopped the watcher (pid {first['pid']})" in res.out and f"stopped process group {started[0]['pgid']}" in res.out, res.out
    container = docker_engine.containers.get(fenv.name)
    out = ps_in(container, "args=")
    left = [ln for ln in out.splitlines() if any(k in ln for k in ("start_verl.sh", "standin", "raylet", "gcs_server"))]
    assert not left, left


def _driver_pid(container: Any) -> str:
    """The training driver's pid in the container: the stand-in's `python3 -m recipe.dapo.main_dapo`."""
    ps = ps_in(container, "pid=,args=")
    pids = [ln.split()[0] for ln in ps.splitlines()
            if len(ln.split()) > 2 and ln.split()[1].startswith("python") and "main_dapo" in ln]
    assert len(pids) == 1, ps
    return pids[0]


def test_driver_killed_with_sigkill_is_not_called_host_oom(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """O2: a `kill -9` of the training driver (a user's, through `docker exec`) is "killed by signal 9
    (SIGKILL)", with OOM named as one possibility only: the container's memory cgroup counted no OOM kill."""
    watch = launch_and_watch(fenv)
    try:
        before = poll_value(lambda: (c := checkpoints(fenv)) and len(c) >= 2 and c, 180, "two checkpoints")
        container = docker_engine.containers.get(fenv.name)
        pid = _driver_pid(container)
        t_fault = time.time()
        assert container.exec_run(["kill", "-9", pid]).exit_code == 0
        alert = wait_event(fenv, "alert", 60)
    finally:
        code, out = finish_watch(watch)
    latency = alert["time"] - t_fault
    print(f"driver killed -9 -> alert {alert['category']}: {latency:.2f} s")
    assert latency <= REPORT_WITHIN_S, latency
    assert alert["category"] == "killed", alert
    assert "killed by signal 9 (SIGKILL, exit 137)" in alert["message"], alert
    assert "OOM is one possibility only" in alert["message"], alert
    assert "the memory cgroup's oom_kill counter shows no new OOM kill" in alert["message"], alert
    assert code == 1 and "Traceback" not in out, out
    assert "host ran out of RAM" not in out and "most likely the kernel OOM killer" not in out, out
    st = status(fenv)
    assert st["state"] == "failed" and st["gave_up"]["category"] == "killed", st
    nothing_lost(fenv, before)


HOG = """
import os, sys, time
pid, limit = int(sys.argv[1]), int(sys.argv[2])
chunks = []
while sum(len(c) for c in chunks) < limit:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break  # the driver was OOM-killed: no more pressure
    chunks.append(b"x" * (8 << 20))
    time.sleep(0.02)
print("hogged", sum(len(c) for c in chunks) >> 20, "MiB", flush=True)
"""


def test_driver_killed_by_the_container_s_oom_killer_is_host_oom(fenv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """O2, the real thing: the container gets a memory limit just above its use, the driver is made the OOM
    killer's first choice (oom_score_adj 1000), and a process of the container allocates until the kernel
    OOM-kills the driver: the watcher says host OOM, citing the memory cgroup's oom_kill counter."""
    watch = launch_and_watch(fenv)
    try:
        before = poll_value(lambda: (c := checkpoints(fenv)) and len(c) >= 2 and c, 180, "two checkpoints")
        container = docker_engine.containers.get(fenv.name)
        pid = _driver_pid(container)
        usage = int(container.exec_run(["cat", "/sys/fs/cgroup/memory/memory.usage_in_bytes"]).output or 0) or \
            int(container.exec_run(["cat", "/sys/fs/cgroup/memory.current"]).output or 0)
        assert usage > 0
        limit = usage + (192 << 20)
        try:
            container.update(mem_limit=limit, memswap_limit=limit)
        except Exception as exc:  # noqa: BLE001 - an engine without memory limits cannot run this case
            pytest.skip(f"the engine cannot limit the container's memory: {exc}")
        assert container.exec_run(["sh", "-c", f"echo 1000 > /proc/{pid}/oom_score_adj"]).exit_code == 0
        t_fault = time.time()
        hog = container.exec_run(["python3", "-c", HOG, pid, str(4 << 30)])
        assert b"hogged" in hog.output, hog.output
        alert = wait_event(fenv, "alert", 60)
    finally:
        code, out = finish_watch(watch)
    latency = alert["time"] - t_fault
    print(f"driver OOM-killed in its cgroup -> alert {alert['category']}: {latency:.2f} s")
    assert alert["category"] == "host_oom", alert.get("message")  # the message names the evidence read
    assert "killed by signal 9 (SIGKILL, exit 137)" in alert["message"], alert
    # The counter against the reading taken when the watch started; when that reading could not be taken (an
    # exec that failed on a loaded engine: seen once in a loaded CI run), the cgroup's own count, as said.
    said = alert["message"].split("did it: ", 1)[-1]
    assert "the kernel OOM killer (host RAM) did it: " in alert["message"], alert
    assert said.startswith("the memory cgroup's oom_kill counter went from 0 to ") or re.match(
        r"the memory cgroup's oom_kill counter is [1-9]", said), alert
    assert latency <= REPORT_WITHIN_S, latency
    assert code == 1 and "Traceback" not in out, out
    kinds = [e["event"] for e in events(fenv)]
    assert "recovery" not in kinds, kinds  # host OOM never climbs the offload rung
    nothing_lost(fenv, before)
