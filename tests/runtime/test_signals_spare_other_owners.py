"""Other people's things (issue #22, adversarial review turn 3): forged records, decoys owned by this user and
by another uid (``nobody``), processes in another PID namespace. Real processes and real signals; every
process here is started by the test and killed by it at the end."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from test_recovery_host import (
    HostRuns,  # noqa: F401 - a real watcher, a TEST-DOUBLE trainer (a bash script printing verl's lines)
    host_runs_in,
)

from conftest import run_cli
from fault_support import alive, leader_start, started_procs, state_cli, wait_for
from fault_support import record_doc as any_record_doc
from fault_support import write_record as write_any_record

RUN = "20260101-000000-adv-abcd"
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (another uid, PID namespaces)")


def record_doc(state: Path, pgid: int, run: str = RUN, **attempt: object) -> dict:
    return any_record_doc(state, run, pgid, created_at=4102444800, **attempt)


def write_record(state: Path, pgid: int, run: str = RUN, **attempt: object) -> Path:
    return write_any_record(state, run, pgid, created_at=4102444800, **attempt)


def cli(state: Path, *args: str):  # type: ignore[no-untyped-def]
    return state_cli(state, *args)


@pytest.fixture
def procs():  # type: ignore[no-untyped-def]
    yield from started_procs()


def test_a1_a_forged_record_naming_a_decoys_pid_and_start_time_does_not_kill_it(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    # A1, same user: pid and start time are world-readable, the marker is made up. The decoy's environment
    # reads (it is this user's process) and has no marker: it is not the run's.
    decoy = procs(["sleep", "600"])
    empty = procs(["/bin/sleep", "600"], clear_env=True)  # `env -i`: an environment that reads empty
    for victim in (decoy, empty):
        write_record(tmp_path, victim.pid, marker=f"{RUN}/1/forged", leader_start=leader_start(victim.pid))
        res = cli(tmp_path, "stop", RUN, "--grace", "2")
        assert res.code == 0, res.err
        assert "nothing signalled" in res.out and "not this run's" in res.out, res.out
        assert "stopped process group" not in res.out
        res = cli(tmp_path, "status", RUN, "--json")
        assert res.json()["alive"] is False
    time.sleep(0.3)
    assert alive(decoy.pid) and alive(empty.pid)


@as_root
def test_a1_a_record_planted_by_nobody_in_a_shared_state_dir_is_refused(procs) -> None:  # type: ignore[no-untyped-def]
    # A1 across users: `nobody` writes a record into a 1777 state dir that names a root process; root's
    # `verlctl stop` (the newest record) must neither kill it nor take the record for its own.
    shared = Path(tempfile.mkdtemp(prefix="verlctl-adv-shared-"))
    try:
        shared.chmod(0o1777)
        (shared / "runs").mkdir()
        (shared / "runs").chmod(0o1777)
        decoy = procs(["sleep", "600"])
        doc = record_doc(shared, decoy.pid, marker=f"{RUN}/1/planted-by-nobody", leader_start=leader_start(decoy.pid))
        plant = ("import json, os, sys; d = os.path.join(sys.argv[1], 'runs', sys.argv[2]); os.mkdir(d, 0o755); "
                 "open(os.path.join(d, 'run.json'), 'w').write(sys.argv[3])")
        subprocess.run([shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3", "-c", plant, str(shared), RUN, json.dumps(doc)], check=True, user=NOBODY,
                       env={"PATH": os.environ.get("PATH", "/usr/bin")})
        assert (shared / "runs" / RUN / "run.json").stat().st_uid == NOBODY
        res = cli(shared, "stop", "--grace", "2")
        assert res.code != 0, res.out
        assert "belongs to uid 65534" in res.err and "not trusted" in res.err, res.err
        assert "Traceback" not in res.err and len(res.err.strip().splitlines()) <= 3, res.err
        assert json.loads((shared / "runs" / RUN / "run.json").read_text()).get("stopped") is not True
        time.sleep(0.3)
        assert alive(decoy.pid)
        # the same record as root's own file, but in a run directory every user can write: refused too
        subprocess.run(["chown", "-R", "0:0", "--", str(shared / "runs" / RUN)], check=True)
        (shared / "runs" / RUN).chmod(0o777)
        res = cli(shared, "stop", RUN, "--grace", "2")
        assert res.code != 0 and "writable by every user" in res.err, res.err
        assert alive(decoy.pid)
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_the_last_check_before_a_signal_refuses_a_target_set_with_a_decoy(procs) -> None:  # type: ignore[no-untyped-def]
    # Defence in depth: deliver() checks each target on its own (marker read now, start time, PID namespace)
    # and signals nothing when one of them is not the run's, whatever verify() said.
    from verlctl.runtime import procscan

    marker = f"{RUN}/1/deliver"
    run = procs(["sleep", "600"], env={"VERLCTL_ATTEMPT": marker})
    decoy = procs(["sleep", "600"])
    other_run = procs(["sleep", "600"], env={"VERLCTL_ATTEMPT": f"{RUN}/2/other"})
    rs, ds, os_ = leader_start(run.pid), leader_start(decoy.pid), leader_start(other_run.pid)
    for bad in ([decoy.pid, ds], [other_run.pid, os_], [run.pid, rs + 1], [1, 1], [os.getpid(), leader_start(os.getpid())]):
        out = procscan.deliver([[run.pid, rs], bad], marker, signal.SIGTERM)
        assert out["refused"] and out["signalled"] == [], (bad, out)
    time.sleep(0.3)
    assert alive(run.pid) and alive(decoy.pid) and alive(other_run.pid)
    assert procscan.deliver([[run.pid, rs]], "", signal.SIGTERM)["signalled"] == []
    out = procscan.deliver([[run.pid, rs]], marker, signal.SIGTERM)
    assert out == {"signalled": [run.pid], "refused": ""}
    assert wait_for(lambda: not alive(run.pid))
    assert alive(decoy.pid) and alive(other_run.pid)


@as_root
def test_a_process_with_the_runs_marker_in_another_pid_namespace_is_not_the_runs(tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    # "Same container namespace": a container's processes are visible in the host's /proc; one that carries
    # the run's marker (another container of a copied environment) is never signalled by a host-side stop.
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1)")
    marker = f"{RUN}/1/nsmarker"
    run = procs(["sleep", "600"], env={"VERLCTL_ATTEMPT": marker})
    nested = procs(["unshare", "--pid", "--fork", "--", "env", f"VERLCTL_ATTEMPT={marker}", "sleep", "600"])

    def nested_sleep() -> int | None:
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    raw = Path(f"/proc/{name}/stat").read_text()
                    if int(raw[raw.rfind(")") + 2:].split()[1]) == nested.pid and "sleep" in raw:
                        return int(name)
        return None

    assert wait_for(lambda: nested_sleep() is not None)
    inner = nested_sleep()
    assert inner is not None
    assert os.readlink(f"/proc/{inner}/ns/pid") != os.readlink("/proc/self/ns/pid")
    write_record(tmp_path, run.pid, marker=marker, leader_start=leader_start(run.pid))
    res = cli(tmp_path, "stop", RUN, "--grace", "5")
    assert res.code == 0, res.err
    assert f"stopped process group {run.pid}" in res.out
    assert "other groups" not in res.out, res.out  # the nested process is not counted as the run's
    assert wait_for(lambda: not alive(run.pid))
    time.sleep(0.3)
    assert alive(inner)


# ------------------------------------------------------------------ A7: one watcher per run, one writer

@pytest.fixture
def host_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    yield from host_runs_in(tmp_path, monkeypatch)


def _watch_started(record, pid: int) -> bool:  # type: ignore[no-untyped-def]
    return any(e.get("event") == "watch_started" and e.get("pid") == pid for e in record.events())


def test_a7_a_second_watcher_of_a_run_is_refused_and_a_hand_started_one_is_recorded(host_runs) -> None:  # type: ignore[no-untyped-def]
    from verlctl.runtime.records import load_run

    record = host_runs.start(["Total training steps: 5"], tail="sleep 300")
    first = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", record.run_id], env=host_runs.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    third = None
    try:
        assert wait_for(lambda: _watch_started(record, first.pid), 60)
        assert load_run(record.run_id).watcher_pid == first.pid  # hand-started, and recorded
        res = run_cli("watch", record.run_id, env=host_runs.env(), timeout=90)
        assert res.code != 0, res.out
        assert f"already watched (pid {first.pid})" in res.err and "Traceback" not in res.err, res.err
        assert load_run(record.run_id).watcher_pid == first.pid
        st = run_cli("status", record.run_id, "--json", env=host_runs.env()).json()
        assert st["watcher"] == {"pid": first.pid, "alive": True}, st
        # the lock ends with its holder, however it ends: after a kill -9 the next watcher takes over
        first.kill()
        first.wait()
        third = subprocess.Popen([sys.executable, "-m", "verlctl", "watch", record.run_id], env=host_runs.env(),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        assert wait_for(lambda: _watch_started(record, third.pid), 60)
        assert load_run(record.run_id).watcher_pid == third.pid
        res = run_cli("stop", record.run_id, "--grace", "5", env=host_runs.env())
        assert res.code == 0, res.err
        assert f"stopped the watcher (pid {third.pid})" in res.out, res.out
        assert third.wait(timeout=60) is not None
    finally:
        for p in (first, third):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_a7_stop_waits_for_a_relaunch_that_holds_the_record_and_stops_its_attempt(host_runs, procs) -> None:  # type: ignore[no-untyped-def]
    # The lost attempt of A7: a relaunch starts attempt 2 and records it while `stop` marks the run. With the
    # record's lock, stop sees attempt 2 (and stops it) instead of the stale attempt 1.
    from host_launch_support import holds_record_lock
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import Attempt, load_run, record_lock

    record = host_runs.start(["Total training steps: 5"], tail="true")
    ex = HostExecutor()
    assert wait_for(lambda: not ex.group_alive(record.attempts[0].ref), 60)  # attempt 1 has ended
    stop = None
    try:
        with record_lock(record):
            stop = subprocess.Popen([sys.executable, "-m", "verlctl", "stop", record.run_id, "--grace", "5"],
                                    env=host_runs.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

            assert wait_for(lambda: holds_record_lock(stop.pid), 60), "stop never opened the record's lock"
            # the relaunch: attempt 2 starts and is recorded while stop waits
            ref = ex.start_group(["sleep", "600"], str(Path(record.run_log)), f"{record.run_id}/2/{os.urandom(8).hex()}")
            fresh = load_run(record.run_id)
            fresh.attempts.append(Attempt(number=2, pgid=ref.pgid, started_at=time.time(), marker=ref.marker,
                                          leader_start=ref.start))
            fresh.pgid = ref.pgid
            fresh.save()
            host_runs.records.append(fresh)
            assert stop.poll() is None
        out, err = stop.communicate(timeout=90)
        assert stop.returncode == 0, err
        assert f"stopped process group {ref.pgid}" in out, out
        assert not ex.group_alive(ref)
        assert load_run(record.run_id).stopped is True
    finally:
        if stop is not None and stop.poll() is None:
            stop.kill()
            stop.wait()


def test_a_session_member_whose_environment_lost_the_marker_is_signalled_only_with_its_session(procs) -> None:  # type: ignore[no-untyped-def]
    # Ray's DashboardAgent / RuntimeEnvAgent rewrite their environment with their process title: the marker
    # cannot be read from them, but they are members of the attempt's session (its leader ran setsid).
    from verlctl.runtime import procscan

    marker = f"{RUN}/1/session"
    leader = procs(["bash", "-c", "env -u VERLCTL_ATTEMPT sleep 600 & wait"], env={"VERLCTL_ATTEMPT": marker})

    def child() -> int | None:
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError):
                    raw = Path(f"/proc/{name}/stat").read_text()
                    fields = raw[raw.rfind(")") + 2:].split()
                    argv = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
                    if int(fields[1]) == leader.pid and argv[0] == b"sleep":  # exec'd (not the forked bash)
                        return int(name)
        return None

    assert wait_for(lambda: child() is not None)
    kid = child()
    assert kid is not None and b"VERLCTL_ATTEMPT" not in Path(f"/proc/{kid}/environ").read_bytes()
    decoy = procs(["sleep", "600"])
    ls, ks, ds = leader_start(leader.pid), leader_start(kid), leader_start(decoy.pid)
    # without a verified member of its session in the same call, or from another session: refused
    assert procscan.deliver([[kid, ks]], marker, signal.SIGTERM, session=leader.pid)["refused"]
    assert procscan.deliver([[leader.pid, ls], [kid, ks]], marker, signal.SIGTERM)["refused"]
    out = procscan.deliver([[leader.pid, ls], [decoy.pid, ds]], marker, signal.SIGTERM, session=decoy.pid)
    assert out["refused"] and out["signalled"] == []
    time.sleep(0.3)
    assert alive(leader.pid) and alive(kid) and alive(decoy.pid)
    # the whole verified group, through stop's own path
    from verlctl.runtime.executor import GroupRef, HostExecutor

    ex = HostExecutor()
    ref = GroupRef(leader.pid, marker, ls)
    assert sorted(ex.verdict(ref)["group"]) == sorted([leader.pid, kid])
    assert ex.stop_group(ref, grace_s=10)
    # (once the marked leader is gone the group counts as ended; the unmarked member got its signal with it)
    assert wait_for(lambda: not alive(kid) and not alive(leader.pid), 30)
    assert alive(decoy.pid)


# ------------------------------------------------------------------ A5: one run per checkpoint directory

def test_a5_the_start_script_refuses_a_checkpoint_directory_a_live_run_holds(tmp_path: Path) -> None:
    import fcntl

    from test_scripts import BASE_PATHS, _verl_checkout
    from verlctl.checks.ownership import CHECKPOINT_LOCK, checkpoint_lock_held

    from scripts_harness import render_from, run_start_script

    ckpt = tmp_path / "ckpt"
    rendered = render_from({**BASE_PATHS, "container.workdir": str(_verl_checkout(tmp_path / "verl")),
                            "paths.logs": str(tmp_path / "logs"), "paths.checkpoints": str(ckpt)})
    rendered.write(tmp_path / "scripts")
    ckpt.mkdir()
    (ckpt / CHECKPOINT_LOCK).write_text("")
    with open(ckpt / CHECKPOINT_LOCK) as held:  # a live run (of any user) holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert checkpoint_lock_held(str(ckpt)) is True
        rec = run_start_script(tmp_path / "scripts", tmp_path / "record", [])
        assert rec.proc.returncode != 0, rec.proc.stdout
        assert f"the checkpoint directory {ckpt} is in use by another live run" in rec.proc.stderr, rec.proc.stderr
        assert rec.argv == [] and "devices joined Ray" not in rec.proc.stdout  # stopped before Ray, no training
        # and before launch, the finding names the run recorded here that uses it (or says it is someone else's)
        from verlctl.checks.ownership import checkpoint_in_use
        from verlctl.spec.resolve import load_spec

        spec = load_spec(None, flags={**BASE_PATHS, "paths.checkpoints": str(ckpt)}, environ={}).spec
        (mine,) = checkpoint_in_use(spec, ["r-live"])
        assert mine.code == "checkpoint_in_use" and "(run r-live)" in mine.message, mine.line()
        (theirs,) = checkpoint_in_use(spec, [])
        assert "(a run of another user or state directory)" in theirs.message, theirs.line()
    assert checkpoint_lock_held(str(ckpt)) is False
    rec = run_start_script(tmp_path / "scripts", tmp_path / "record", [])
    assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
    assert checkpoint_lock_held(str(ckpt)) is False  # released with the run's last process
    # a planted symlink is never followed
    (ckpt / CHECKPOINT_LOCK).unlink()
    (ckpt / CHECKPOINT_LOCK).symlink_to(tmp_path / "elsewhere")
    rec = run_start_script(tmp_path / "scripts", tmp_path / "record", [])
    assert rec.proc.returncode != 0 and "is a symlink: refused" in rec.proc.stderr
    assert not (tmp_path / "elsewhere").exists()


@as_root
def test_a5_the_default_checkpoint_directory_of_another_user_is_not_shared(tmp_path: Path) -> None:
    from verlctl.spec.resolve import load_spec

    flags = {"paths.model": "/m/Qwen3-0.6B", "paths.train_files": "/d/t.parquet", "paths.val_files": "/d/v.parquet"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        first = load_spec(None, flags=flags, environ={}).spec.paths
        assert first.checkpoints.startswith(f"{tmp_path}/checkpoints/") and not first.checkpoints.endswith("-root")
        os.makedirs(first.checkpoints)
        os.chown(first.checkpoints, NOBODY, NOBODY)  # a colleague's run made it
        second = load_spec(None, flags=flags, environ={}).spec.paths
        assert second.checkpoints == first.checkpoints + "-root", second.checkpoints
        assert second.logs == first.logs + "-root", second.logs
        os.chown(first.checkpoints, 0, 0)  # this user's own: resumed from, as before
        assert load_spec(None, flags=flags, environ={}).spec.paths.checkpoints == first.checkpoints
    finally:
        os.chdir(cwd)


def test_o3_the_ray_dashboard_listens_on_loopback_for_a_single_node_run() -> None:
    from test_scripts import BASE_PATHS

    from scripts_harness import render_from

    one = render_from(dict(BASE_PATHS)).files["start_verl.sh"]
    assert "--dashboard-host=127.0.0.1 " in one and "0.0.0.0" not in one
    two = render_from({**BASE_PATHS, "cluster.nodes": ["192.0.2.1", "192.0.2.2"]}).files["start_verl.sh"]
    assert "--dashboard-host=0.0.0.0 " in two
