"""runtime/procscan.py function by function, on real processes of this test's own (each with a marker unique to
the test) and on process tables built from them: the checks that decide what `stop` may signal, each branch
with the bug it would let through. Fast (seconds): the test set of procscan's mutation score (issue 22), which
is measured only inside a private PID namespace (bench/mutate.py refuses otherwise)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from verlctl.runtime import procscan


def _wait(cond, what: str, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class Procs:
    """Processes this test started (each in a process group of its own unless told), killed at the end."""

    def __init__(self) -> None:
        self.items: list[subprocess.Popen] = []

    def start(self, argv: list[str], env: dict[str, str] | None = None, group: int = 0,
              executable: str | None = None, cwd: str | None = None, user: int | None = None) -> subprocess.Popen:
        p = subprocess.Popen(argv, env=env, process_group=group, executable=executable, cwd=cwd, user=user,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.items.append(p)
        first = argv[0].rsplit("/", 1)[-1]
        _wait(lambda: _cmd(p.pid).split(" ")[0].rsplit("/", 1)[-1] == first, f"{argv} started")
        return p

    def alive(self, p: subprocess.Popen) -> bool:
        return p.poll() is None

    def close(self) -> None:
        for p in self.items:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)  # our own child, by its pid
            p.wait(timeout=60)


@pytest.fixture
def procs() -> Iterator[Procs]:
    ps = Procs()
    yield ps
    ps.close()


def _marker() -> str:
    return f"units-{uuid.uuid4().hex}/1/{uuid.uuid4().hex[:8]}"


def _sleep(procs: Procs, marker: str | None = None, group: int = 0, clean: bool = False) -> subprocess.Popen:
    env = {} if clean else dict(os.environ)
    if marker is not None:
        env[procscan.MARKER_VAR] = marker
    return procs.start([shutil.which("sleep") or "sleep", "600"], env=env, group=group)


# ------------------------------------------------------------------ small readers


def test_valid_pgid_bounds() -> None:
    top = procscan.pid_max()
    assert top >= 32768
    for bad in (0, 1, -1, -5, True, False, 1.5, "7", None, top + 1):
        assert not procscan.valid_pgid(bad), bad
    for good in (2, 300, top):
        assert procscan.valid_pgid(good), good


def test_stat_environ_and_marker_of_a_live_process(procs: Procs) -> None:
    m = _marker()
    p = _sleep(procs, m)
    st = procscan._stat(p.pid)
    assert st is not None and st["pid"] == p.pid and st["pgid"] == p.pid and st["sid"] == os.getsid(0)
    assert st["ppid"] == os.getpid() and st["state"][0] in "SR"
    assert procscan.leader_start(p.pid) == st["start"] > 0
    assert procscan._marker_of(p.pid) == m
    env = procscan._environ(p.pid)
    assert env is not None and (procscan.MARKER_VAR + "=" + m).encode() in env.split(b"\0")
    assert procscan._marker_in(env, "NOT_THERE_" + uuid.uuid4().hex) is None
    assert procscan._marker_in(None) is None
    assert procscan._marker_in(b"A=1\0VERLCTL_ATTEMPTX=no\0VERLCTL_ATTEMPT=yes\0") == "yes"
    assert procscan._marker_in(b"VERLCTL_FOLLOW=r/t\0", procscan.FOLLOW_VAR) == "r/t"
    assert procscan._has_memory(p.pid)
    assert procscan._pid_ns(p.pid) == procscan._pid_ns("self") is not None
    assert procscan._cmd_of(p.pid).endswith("sleep 600")


def test_the_start_time_is_field_22_of_stat(procs: Procs) -> None:
    """The start time (clock ticks after boot) read independently: a later-started process has a later one,
    it is not after now, and it is field 22 (not the neighbouring vsize / rss)."""
    a = _sleep(procs)
    time.sleep(0.05)  # ticks are 10 ms: the second process starts at least 5 ticks later
    b = _sleep(procs)
    for p in (a, b):
        raw = Path(f"/proc/{p.pid}/stat").read_text()
        assert procscan.leader_start(p.pid) == int(raw[raw.rfind(")") + 2:].split()[19])
    ticks_now = float(Path("/proc/uptime").read_text().split()[0]) * os.sysconf("SC_CLK_TCK")
    sa, sb = procscan.leader_start(a.pid), procscan.leader_start(b.pid)
    assert sa is not None and sb is not None and sa < sb <= ticks_now + 1


def test_an_empty_environment_reads_empty_and_a_gone_process_reads_none(procs: Procs) -> None:
    p = _sleep(procs, clean=True)  # env -i: readable, and empty
    assert procscan._environ(p.pid) == b""
    assert procscan._marker_of(p.pid) is None
    os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert procscan._stat(p.pid) is None and procscan._environ(p.pid) is None
    assert procscan.leader_start(p.pid) is None and procscan._cmd_of(p.pid) == ""
    assert not procscan._has_memory(p.pid) and procscan._pid_ns(p.pid) is None


def test_scan_lists_our_process_with_its_marker_and_identity(procs: Procs) -> None:
    m = _marker()
    p = _sleep(procs, m)
    mine = next(x for x in procscan.scan() if x["pid"] == p.pid)
    assert mine["marker"] == m and mine["env_readable"] is True and mine["follow"] is None
    assert mine["uid"] == os.geteuid() and mine["ns"] == procscan._pid_ns("self")
    assert mine["start"] == procscan.leader_start(p.pid) and mine["cmd"].endswith("sleep 600")
    listed = [x for x in procscan.markers() if x["marker"] == m]
    assert [x["pid"] for x in listed] == [p.pid]


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(("cmd", "daemon", "system"), [
    ("/opt/ray/core/src/ray/gcs/gcs_server --port=6379", "gcs_server", "gcs_server"),
    ("/x/raylet --node_ip_address=1.2.3.4", "raylet", "raylet"),
    ("raylet", "raylet", "raylet"),
    ("/usr/bin/python3 -u /s/ray/dashboard/dashboard.py --host=127.0.0.1", None, "dashboard.py"),
    ("python /s/ray/dashboard/agent.py --x", None, "agent.py"),
    ("/usr/bin/python3.11 -u /s/ray/_private/log_monitor.py --a --b", None, "log_monitor.py"),
    ("python3 -u /s/ray/_private/runtime_env/agent/main.py", None, "main.py"),
    ("python3 -u /s/ray/util/client/server/server.py", None, "server.py"),
    ("python3 -u /s/ray/autoscaler/_private/monitor.py", None, "monitor.py"),
    ("ray::DashboardAgent", None, "ray::DashboardAgent"),
    ("ray::RuntimeEnvAgent --x", None, "ray::RuntimeEnvAgent"),
    ("/usr/bin/python3 /usr/local/bin/ray start --head --block", None, "ray start"),
    ("/usr/bin/python3 /usr/local/bin/ray status", None, None),
    ("python3 -m recipe.dapo.main_dapo a=b", None, None),
    ("ray::TaskRunner.run", None, None),
    ("bash /x/start_verl.sh", None, None),
    ("/x/gcs_server_not", None, None),
    ("sleep 1 /s/ray/dashboard/dashboard.py", None, None),  # not run by Python
    ("python3 a b c /s/ray/dashboard/dashboard.py", None, None),  # beyond the interpreter's first words
    ("python3 -u -X /s/ray/dashboard/dashboard.py", None, "dashboard.py"),  # the third word still counts
    ("", None, None),
])
def test_ray_names(cmd: str, daemon: str | None, system: str | None) -> None:
    assert procscan.ray_daemon(cmd) == daemon
    assert procscan.ray_system(cmd) == system


@pytest.mark.parametrize(("cmd", "script"), [
    ("bash /x/run_training.sh", "run_training.sh"),
    ("/bin/sh /y/start_verl.sh --x", "start_verl.sh"),
    ("python3 /z/t.py", "t.py"),
    ("python main.py", "main.py"),
    ("bash -c 'x'", ""),
    ("bash", ""),
    ("sleep 600", ""),
    ("/usr/bin/python3.11 /z/t.py", ""),
])
def test_script_of(cmd: str, script: str) -> None:
    assert procscan.script_of(cmd) == script


@pytest.mark.parametrize(("cmd", "ok"), [
    ("tail -c +1 -F -- /l/run.log", True),
    ("tail -c +12345 -F -- /l/run.log", True),
    ("tail -c +1 -F -- /l/run.log.other", False),
    ("tail -c +1 -F -- /l/other.log", False),
    ("tail -c +x -F -- /l/run.log", False),
    ("tail -c + -F -- /l/run.log", False),
    ("tail -c 1 -F -- /l/run.log", False),
    ("tail -F -- /l/run.log", False),
    ("tail -c +1 -f -- /l/run.log", False),
    ("xtail -c +1 -F -- /l/run.log", False),
    ("", False),
])
def test_follower_command(cmd: str, ok: bool) -> None:
    assert procscan.follower_cmd_ok(cmd, "/l/run.log") is ok
    assert not procscan.follower_cmd_ok(cmd, "")


def _follower(pid: int, follow: str | None, cmd: str = "tail -c +1 -F -- /l/run.log", ppid: int = 0,
              ns: str | None = None, state: str = "S") -> dict:
    return {"pid": pid, "ppid": ppid, "pgid": pid, "sid": pid, "start": 7, "state": state, "marker": None,
            "follow": follow, "ns": procscan._pid_ns("self") if ns is None else ns, "cmd": cmd}


def test_follower_targets_are_the_runs_own_only() -> None:
    ours = _follower(10, "run-a/0123456789abcdef")
    table = [
        ours,
        _follower(11, "run-ab/0123456789abcdef"),  # another run whose id starts like ours
        _follower(12, "run-a"),  # no token part
        _follower(13, "run-a/"),  # an empty token
        _follower(14, None),  # a colleague's plain tail of the log
        _follower(15, "run-a/0123456789abcdef", ppid=40),  # started by a shell in the container
        _follower(16, "run-a/0123456789abcdef", ns="pid:[1]"),  # another PID namespace
        _follower(17, "run-a/0123456789abcdef", state="Z"),  # a zombie
        _follower(18, "run-a/0123456789abcdef", cmd="tail -c +1 -F -- /l/other.log"),
        _follower(19, "other/run-a/0123456789abcdef"),
    ]
    assert [p["pid"] for p in procscan.follower_targets(table, "run-a", "/l/run.log")] == [10]
    assert procscan.follower_targets(table, "", "/l/run.log") == []
    assert procscan.follower_targets(table, "run-a", "") == []
    assert procscan.follower_targets(table, "run-a/0123456789abcdef", "/l/run.log") == []  # '/': not a run id
    assert procscan.follower_targets([_follower(20, "run-a/x", state="X")], "run-a", "/l/run.log") == []
    assert [p["pid"] for p in procscan.follower_targets([_follower(21, "run-a/x", state="R")], "run-a",
                                                         "/l/run.log")] == [21]


def test_stop_followers_finds_none_on_the_host_and_leaves_a_same_token_tail_of_this_namespace(
        procs: Procs, tmp_path: Path) -> None:
    """A tail of the log with the run's token, started here (its parent is this test: not a docker exec), is
    no follower to stop."""
    log = tmp_path / "run.log"
    log.write_text("x\n")
    env = {**os.environ, procscan.FOLLOW_VAR: "run-q/0123456789abcdef"}
    p = procs.start([shutil.which("tail") or "tail", "-c", "+1", "-F", "--", str(log)], env=env)
    assert procscan.stop_followers("run-q", str(log)) == {"found": [], "signalled": [], "refused": []}
    assert procs.alive(p)


# ------------------------------------------------------------------ verify (process tables)


def _row(pid: int, pgid: int, marker: str | None, start: int = 100, state: str = "S", ns: str | None = None,
         env_readable: bool = True, cmd: str = "sleep 600") -> dict:
    return {"pid": pid, "ppid": 1, "pgid": pgid, "sid": pgid, "start": start, "state": state, "marker": marker,
            "env_readable": env_readable, "ns": procscan._pid_ns("self") if ns is None else ns, "cmd": cmd,
            "uid": 0}


M = "run/1/abc"


def test_verify_refuses_bad_ids_and_records_without_identity() -> None:
    table = [_row(500, 500, M)]
    for bad in (0, 1, -500):
        v = procscan.verify(table, bad, M, 100)
        assert not v["owned"] and "out of range" in v["reason"] and v["group"] == [] == v["strays"]
    for none in (None, ""):
        v = procscan.verify(table, 500, none, 100)
        assert not v["owned"] and "no process identity" in v["reason"]


def test_verify_the_leader_with_its_start_and_marker_is_ours_with_its_group_and_strays() -> None:
    table = [
        _row(500, 500, M, cmd="bash /s/start_verl.sh"),
        _row(501, 500, M, cmd="/r/raylet --x"),
        _row(502, 500, None, cmd="/r/gcs_server --y"),  # a member whose env lost the marker: still the group's
        _row(600, 600, M, cmd="python3 -u /s/ray/dashboard/agent.py"),  # a marked stray (own group)
        _row(601, 601, "run/2/zzz"),  # another attempt's: not a stray
        _row(602, 500, M, state="Z"),  # a zombie member: not counted
        _row(603, 603, M, ns="pid:[1]"),  # the marker, but in another PID namespace
        _row(700, 700, None, cmd="bash /s/run_training.sh"),
    ]
    v = procscan.verify(table, 500, M, 100)
    assert v["owned"] and v["reason"] == ""
    assert v["group"] == [500, 501, 502] and v["strays"] == [600]
    assert v["ray"] == {"raylet": 501, "gcs_server": 502}
    assert sorted(map(tuple, v["daemons"])) == [(501, "raylet"), (502, "gcs_server"), (600, "agent.py")]
    assert v["scripts"] == ["start_verl.sh"]  # `python3 -u X` runs X too, but -u is read as an option here


def test_verify_a_leader_with_another_start_time_or_without_the_marker_is_not_ours() -> None:
    v = procscan.verify([_row(500, 500, M, start=999), _row(501, 500, M)], 500, M, 100)
    assert not v["owned"] or v["group"] == []
    assert "another process now" in v["reason"] and v["group"] == []
    v = procscan.verify([_row(500, 500, None), _row(501, 500, M)], 500, M, 100)
    assert v["group"] == [] and "lacks the run's marker" in v["reason"]
    v = procscan.verify([_row(500, 500, "run/9/other")], 500, M, 100)
    assert not v["owned"] and "lacks the run's marker" in v["reason"]
    # start unknown (an older record): the marker alone decides
    v = procscan.verify([_row(500, 500, M, start=5)], 500, M, None)
    assert v["owned"] and v["group"] == [500]


def test_verify_an_unreadable_leader_counts_only_with_its_start_time() -> None:
    # on its way out (environment unreadable), pid and start time still name it
    v = procscan.verify([_row(500, 500, None, env_readable=False)], 500, M, 100)
    assert v["owned"] and v["group"] == [500]
    # without a recorded start time, nothing names it
    v = procscan.verify([_row(500, 500, None, env_readable=False)], 500, M, None)
    assert not v["owned"] and "lacks the run's marker" in v["reason"]
    # readable and without the marker: never ours (A1)
    v = procscan.verify([_row(500, 500, None, env_readable=True)], 500, M, 100)
    assert not v["owned"]
    # a table without the readability (an older scan's): read as readable, so never ours by pid and start alone
    row = _row(500, 500, None)
    del row["env_readable"]
    assert not procscan.verify([row], 500, M, 100)["owned"]


def test_verify_a_group_whose_leader_is_gone() -> None:
    v = procscan.verify([_row(501, 500, M), _row(502, 500, None)], 500, M, 100)
    assert v["owned"] and v["group"] == [501, 502]
    v = procscan.verify([_row(501, 500, None), _row(502, 500, "run/3/x")], 500, M, 100)
    assert not v["owned"] and "no member carries the run's marker" in v["reason"]
    v = procscan.verify([_row(777, 777, None)], 500, M, 100)
    assert not v["owned"] and v["reason"] == "process group 500 has ended"
    v = procscan.verify([_row(500, 500, M, state="X")], 500, M, 100)  # a dead leader is not live
    assert not v["owned"] and "has ended" in v["reason"]
    v = procscan.verify([_row(800, 800, M)], 500, M, 100)  # only a stray left: still the run's
    assert v["owned"] and v["group"] == [] and v["strays"] == [800]


# ------------------------------------------------------------------ deliver and act (real signals)


def test_deliver_signals_verified_targets_by_pidfd(procs: Procs) -> None:
    m = _marker()
    a, b = _sleep(procs, m), _sleep(procs, m)
    sa, sb = procscan.leader_start(a.pid), procscan.leader_start(b.pid)
    fds = len(os.listdir("/proc/self/fd"))
    out = procscan.deliver([[a.pid, sa], [b.pid, sb]], m, signal.SIGTERM)
    assert out == {"signalled": [a.pid, b.pid], "refused": ""}
    assert a.wait(timeout=60) == -signal.SIGTERM and b.wait(timeout=60) == -signal.SIGTERM
    assert len(os.listdir("/proc/self/fd")) == fds
    # an ended target is left out, not refused
    assert procscan.deliver([[a.pid, sa]], m, signal.SIGTERM) == {"signalled": [], "refused": ""}


def test_deliver_refuses_the_whole_set_when_one_target_fails(procs: Procs) -> None:
    m = _marker()
    good, plain = _sleep(procs, m), _sleep(procs)
    sg, sp = procscan.leader_start(good.pid), procscan.leader_start(plain.pid)
    out = procscan.deliver([[good.pid, sg], [plain.pid, sp]], m, signal.SIGTERM)
    assert out["signalled"] == [] and "does not carry the run's marker" in out["refused"]
    out = procscan.deliver([[good.pid, sg + 1]], m, signal.SIGTERM)
    assert out["signalled"] == [] and "another process than the one verified" in out["refused"]
    for bad in (1, 0, -1, os.getpid()):
        out = procscan.deliver([[good.pid, sg], [bad, 5]], m, signal.SIGTERM)
        assert out["signalled"] == [] and "is never signalled" in out["refused"], bad
    for m2, sig in (("", signal.SIGTERM), (m, 0)):
        out = procscan.deliver([[good.pid, sg]], m2, sig)
        assert out["signalled"] == [] and out["refused"]
    assert procscan.deliver([[good.pid, sg]], "run/9/other", signal.SIGTERM)["signalled"] == []
    assert procs.alive(good) and procs.alive(plain)


def test_deliver_counts_an_unmarked_session_member_only_next_to_a_marked_one(procs: Procs) -> None:
    m = _marker()
    leader = _sleep(procs, m)
    member = _sleep(procs, None, group=leader.pid)  # same group, own session though: not the leader's session
    sl, sm = procscan.leader_start(leader.pid), procscan.leader_start(member.pid)
    sid = os.getsid(leader.pid)
    out = procscan.deliver([[member.pid, sm]], m, signal.SIGTERM, session=sid)
    assert out["signalled"] == [] and "does not carry the run's marker" in out["refused"]
    out = procscan.deliver([[leader.pid, sl], [member.pid, sm]], m, signal.SIGTERM, session=sid)
    assert out == {"signalled": [leader.pid, member.pid], "refused": ""}
    assert member.wait(timeout=60) == -signal.SIGTERM


def test_deliver_leaves_out_a_zombie_and_signals_the_rest(procs: Procs) -> None:
    m = _marker()
    live, dead = _sleep(procs, m), _sleep(procs, m)
    sl, sd = procscan.leader_start(live.pid), procscan.leader_start(dead.pid)
    os.kill(dead.pid, signal.SIGKILL)  # our own child; not reaped yet: a zombie
    _wait(lambda: (procscan._stat(dead.pid) or {"state": "Z"})["state"] == "Z", "the zombie")
    assert procscan._has_memory(dead.pid) is False and procscan._environ(dead.pid) is None  # no address space
    fds = len(os.listdir("/proc/self/fd"))
    assert procscan.deliver([[dead.pid, sd]], m, signal.SIGTERM) == {"signalled": [], "refused": ""}
    assert len(os.listdir("/proc/self/fd")) == fds  # the zombie's pidfd is closed too
    out = procscan.deliver([[dead.pid, sd], [live.pid, sl]], m, signal.SIGTERM)
    assert out == {"signalled": [live.pid], "refused": ""}
    assert live.wait(timeout=60) == -signal.SIGTERM


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)")
def test_deliver_refuses_a_marked_process_of_another_pid_namespace(procs: Procs) -> None:
    m = _marker()
    env = {**os.environ, procscan.MARKER_VAR: m}
    outer = procs.start([shutil.which("unshare") or "unshare", "--pid", "--fork", "--kill-child", "--",
                         shutil.which("sleep") or "sleep", "600"], env=env)
    kids: list[int] = []

    def inner() -> bool:
        kids[:] = [int(x) for x in Path(f"/proc/{outer.pid}/task/{outer.pid}/children").read_text().split()]
        return bool(kids) and _cmd(kids[0]).split(" ")[0].rsplit("/", 1)[-1] == "sleep"

    _wait(inner, "the process in the nested namespace")
    pid = kids[0]
    assert procscan._pid_ns(pid) != procscan._pid_ns("self") and procscan._marker_of(pid) == m
    out = procscan.deliver([[pid, procscan.leader_start(pid)]], m, signal.SIGTERM)
    assert out["signalled"] == [] and "runs in another PID namespace" in out["refused"], out
    assert procscan._stat(pid) is not None  # still there


def test_deliver_with_another_variable(procs: Procs) -> None:
    token = f"run-v/{uuid.uuid4().hex}"
    env = {**os.environ, procscan.FOLLOW_VAR: token}
    p = procs.start([shutil.which("sleep") or "sleep", "600"], env=env)
    s = procscan.leader_start(p.pid)
    assert procscan.deliver([[p.pid, s]], token, signal.SIGTERM)["signalled"] == []  # not VERLCTL_ATTEMPT
    assert procscan.deliver([[p.pid, s]], token, signal.SIGTERM, var=procscan.FOLLOW_VAR)["signalled"] == [p.pid]
    assert p.wait(timeout=60) == -signal.SIGTERM


def test_act_verifies_then_signals_the_group_and_its_strays(procs: Procs) -> None:
    m = _marker()
    leader = _sleep(procs, m)
    member = _sleep(procs, m, group=leader.pid)
    stray = _sleep(procs, m)
    decoy = _sleep(procs, _marker())
    start = procscan.leader_start(leader.pid)
    v = procscan.act(leader.pid, m, start, 0)
    assert v["owned"] and "signalled" not in v and v["group"] == sorted([leader.pid, member.pid])
    assert v["strays"] == [stray.pid]
    # the leader's pid now names another process: its group is not signalled, the marked stray still is
    v = procscan.act(leader.pid, m, start + 1, signal.SIGTERM)
    assert v["group"] == [] and "another process now" in v["reason"] and v["delivered"] == [stray.pid]
    assert stray.wait(timeout=60) == -signal.SIGTERM
    assert all(procs.alive(p) for p in (leader, member, decoy))
    v = procscan.main([str(leader.pid), m, str(start), str(int(signal.SIGTERM))])
    assert v["signalled"] is True and sorted(v["delivered"]) == sorted([leader.pid, member.pid])
    for p in (leader, member):
        assert p.wait(timeout=60) == -signal.SIGTERM
    assert procs.alive(decoy)
    v = procscan.main([str(leader.pid), "-", "-", "0"])
    assert not v["owned"] and "no process identity" in v["reason"]


def test_act_only_ray_signals_the_daemons_only(procs: Procs, tmp_path: Path) -> None:
    m = _marker()
    leader = _sleep(procs, m)
    script = tmp_path / "ray" / "_private" / "log_monitor.py"
    script.parent.mkdir(parents=True)
    script.write_text("import time\ntime.sleep(600)\n")
    env = {**os.environ, procscan.MARKER_VAR: m}
    daemon = procs.start([sys.executable, "-u", str(script)], env=env, group=leader.pid)
    _wait(lambda: "/ray/" in _cmd(daemon.pid), "the daemon's exec")
    v = procscan.act(leader.pid, m, procscan.leader_start(leader.pid), signal.SIGTERM, only="ray")
    assert v["signalled"] is True and v["delivered"] == [daemon.pid]
    assert daemon.wait(timeout=60) == -signal.SIGTERM and procs.alive(leader)


def test_deliver_watcher_signals_only_this_runs_watcher(procs: Procs, tmp_path: Path) -> None:
    tail = shutil.which("tail") or "tail"
    # GNU tail takes its options after the operands: argv ["verlctl", "watch", RUN, "-F"] keeps running
    run_id = f"run-w-{uuid.uuid4().hex[:8]}"
    w = procs.start(["verlctl", "watch", run_id, "-F"], executable=tail, cwd=str(tmp_path))
    other = procs.start(["/opt/bin/verlctl", "watch", "another-run", "-F"], executable=tail, cwd=str(tmp_path))
    not_verlctl = procs.start(["verlctlx", "watch", run_id, "-F"], executable=tail, cwd=str(tmp_path))
    first = procs.start(["watch", run_id, "-F"], executable=tail, cwd=str(tmp_path))  # `watch` is argv[0]
    # `watch` first, a word that ends in /verlctl last (argv[-1] is no program name)
    wrapped = procs.start(["watch", run_id, "-F", "/x/verlctl"], executable=tail, cwd=str(tmp_path))
    logs = procs.start(["verlctl", "logs", run_id, "-F"], executable=tail, cwd=str(tmp_path))  # not a watcher
    decoys = [other, not_verlctl, first, wrapped, logs]
    if os.geteuid() == 0:  # another user's `verlctl watch RUN` in this namespace
        decoys.append(procs.start(["verlctl", "watch", run_id, "-F"], executable=tail, cwd="/", user=65534))
    fds = len(os.listdir("/proc/self/fd"))
    for p in decoys:
        assert procscan.deliver_watcher(p.pid, run_id, signal.SIGTERM) is False
    assert procscan.deliver_watcher(other.pid, "another-run", 0) is False
    assert procscan.deliver_watcher(w.pid, "", signal.SIGTERM) is False
    assert procscan.deliver_watcher(os.getpid(), run_id, signal.SIGTERM) is False
    assert procscan.deliver_watcher(1, run_id, signal.SIGTERM) is False
    assert len(os.listdir("/proc/self/fd")) == fds  # every pidfd closed again
    assert all(procs.alive(p) for p in (w, other, not_verlctl, first))
    assert procscan.deliver_watcher(other.pid, "another-run", signal.SIGTERM)
    assert procscan.deliver_watcher(w.pid, run_id, signal.SIGTERM)
    assert w.wait(timeout=60) == -signal.SIGTERM and other.wait(timeout=60) == -signal.SIGTERM
    assert procscan.deliver_watcher(w.pid, run_id, signal.SIGTERM) is False  # gone
    assert len(os.listdir("/proc/self/fd")) == fds
    assert all(procs.alive(p) for p in decoys if p is not other)


def test_residents_lists_everything_but_this_scan(procs: Procs) -> None:
    m = _marker()
    p = _sleep(procs, m)
    token = f"run-r/{uuid.uuid4().hex}"
    f = procs.start([shutil.which("sleep") or "sleep", "600"], env={**os.environ, procscan.FOLLOW_VAR: token})
    rows = {r["pid"]: r for r in procscan.residents()}
    assert os.getpid() not in rows or os.getpid() == 1  # a namespace's init is listed (callers skip pid 1)
    assert 1 in rows  # the init (of the container) is listed: `stop --remove-container` decides about it
    if os.getppid() > 1:
        assert os.getppid() not in rows  # what runs the scan is not listed
    assert rows[p.pid]["marker"] == m and rows[p.pid]["follower"] is False and rows[p.pid]["ppid"] == os.getpid()
    assert rows[p.pid]["uid"] == os.geteuid() and rows[p.pid]["cmd"].endswith("sleep 600")
    assert rows[f.pid]["follower"] is True and rows[f.pid]["marker"] is None
    with contextlib.suppress(Exception):
        os.kill(p.pid, signal.SIGKILL)
    p.wait(timeout=60)
    assert p.pid not in {r["pid"] for r in procscan.residents()}


def test_the_command_line_interface(procs: Procs) -> None:
    m = _marker()
    p = _sleep(procs, m)
    script = str(Path(procscan.__file__))
    run = lambda *a: subprocess.run([sys.executable, script, *a], capture_output=True, text=True,  # noqa: E731
                                    check=True, timeout=120).stdout
    import json

    assert json.loads(run("--start", str(p.pid))) == procscan.leader_start(p.pid)
    assert any(x["pid"] == p.pid and x["marker"] == m for x in json.loads(run("--markers")))
    assert any(x["pid"] == p.pid for x in json.loads(run("--residents")))
    assert json.loads(run("--unfollow", "run-x", "/no/such.log", "15")) == {"found": [], "signalled": [],
                                                                           "refused": []}
    v = json.loads(run(str(p.pid), m, str(procscan.leader_start(p.pid)), "0"))
    assert v["owned"] and v["group"] == [p.pid]
    assert procs.alive(p)


def test_pidfd_and_send_by_pidfd_and_by_pid(procs: Procs) -> None:
    """_pidfd names a live process (a pidfd here: Linux >= 5.3, Python >= 3.9) and None for a gone one; _send
    signals by pidfd, or by pid where pidfds are unavailable (fd -1), and says False when it cannot."""
    a, b = _sleep(procs), _sleep(procs)
    fd = procscan._pidfd(a.pid)
    assert fd is not None and fd >= 0
    try:
        assert procscan._send(a.pid, fd, signal.SIGTERM) is True
        assert a.wait(timeout=60) == -signal.SIGTERM
        assert procscan._send(a.pid, fd, signal.SIGTERM) is False  # the process behind the pidfd has ended
    finally:
        procscan.os_close(fd)
    assert procscan._pidfd(a.pid) is None
    assert procscan._send(b.pid, -1, signal.SIGTERM) is True  # no pidfd: by pid
    assert b.wait(timeout=60) == -signal.SIGTERM
    assert procscan._send(b.pid, -1, signal.SIGTERM) is False  # reaped: no such process
    procscan.os_close(-1)  # nothing to close, no error


def test_residents_cut_a_long_command_line_to_200_characters(procs: Procs) -> None:
    p = procs.start([sys.executable, "-c", "import time; time.sleep(600)", "x" * 300])
    _wait(lambda: "x" * 300 in _cmd(p.pid), "the long command line")
    row = next(r for r in procscan.residents() if r["pid"] == p.pid)
    assert len(row["cmd"]) == 200 and row["cmd"].endswith("x")


@pytest.mark.skipif(os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("nsenter")),
                    reason="needs root, unshare(1) and nsenter(1)")
def test_stop_followers_in_a_container_like_pid_namespace(procs: Procs, tmp_path: Path) -> None:
    """As in a container: a PID namespace of its own (its init a `tail -F` with the run's token, pid 1 there)
    and processes started into it from outside (as `docker exec` does: parent pid 0 there). procscan, run
    inside, stops the run's follower, refuses pid 1, and leaves a same-token tail that a shell there started."""
    log = tmp_path / "run.log"
    log.write_text("x\n")
    tail = "tail"  # as the follower's exec runs it (`exec tail ...`): argv[0] is the bare name
    token = "run-n/" + uuid.uuid4().hex[:16]
    env = {**os.environ, procscan.FOLLOW_VAR: token}
    init = procs.start([shutil.which("unshare") or "unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
                        "--", tail, "-c", "+1", "-F", "--", str(log)], env=env)
    kids: list[int] = []

    def inner() -> bool:
        kids[:] = [int(x) for x in Path(f"/proc/{init.pid}/task/{init.pid}/children").read_text().split()]
        return bool(kids) and _cmd(kids[0]).split(" ")[0].rsplit("/", 1)[-1] == "tail"

    _wait(inner, "the namespace's init")
    enter = [shutil.which("nsenter") or "nsenter", "-t", str(kids[0]), "-p", "-m", "--"]
    ours = procs.start([*enter, tail, "-c", "+5", "-F", "--", str(log)], env=env)
    shell = procs.start([*enter, "sh", "-c", '"$0" -c +1 -F -- "$1" & wait', tail, str(log)], env=env)
    other = procs.start([*enter, tail, "-c", "+1", "-F", "--", str(log)],
                        env={**os.environ, procscan.FOLLOW_VAR: "run-other/" + uuid.uuid4().hex[:16]})

    def followers_inside() -> list[str]:
        res = subprocess.run([*enter, "sh", "-c", 'for p in /proc/[0-9]*; do c=$(tr "\\0" " " < "$p/cmdline" '
                              '2>/dev/null); case "$c" in tail*) echo "${p#/proc/}";; esac; done'],
                             capture_output=True, text=True, timeout=60)
        return res.stdout.split()

    _wait(lambda: len(followers_inside()) == 4, "four tails in the namespace")
    script = str(Path(procscan.__file__))
    import json

    res = subprocess.run([*enter, sys.executable, script, "--unfollow", "run-n", str(log), str(int(signal.SIGTERM))],
                         capture_output=True, text=True, timeout=120)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(out["found"]) == 2 and 1 in out["found"], out  # the init and the exec'd follower
    assert len(out["signalled"]) == 1 and out["signalled"][0] != 1, out
    assert out["refused"] == ["pid 1 is never signalled"], out
    assert ours.wait(timeout=60) == -signal.SIGTERM  # nsenter dies of the signal its child died of
    assert procs.alive(init) and procs.alive(shell) and procs.alive(other)
    assert len(followers_inside()) == 3


def test_a_marked_process_is_listed_with_its_command_cut_at_200_characters() -> None:
    marker = f"mut5-{uuid.uuid4().hex}/1/{uuid.uuid4().hex[:8]}"
    sleep = shutil.which("sleep") or "sleep"
    env = {**os.environ, procscan.MARKER_VAR: marker}
    long_arg = "0" * 300  # sleep adds it to 600 as zero seconds
    started = [subprocess.Popen([sleep, "600", long_arg], env=env, process_group=0),
               subprocess.Popen([sleep, "600"], env=env, process_group=0)]
    try:
        deadline = time.monotonic() + 60
        listed: dict[int, str] = {}
        while time.monotonic() < deadline:
            listed = {m["pid"]: m["cmd"] for m in procscan.markers() if m["marker"] == marker}
            if len(listed) == 2 and all(c.endswith(("0", "600")) for c in listed.values()):
                break
            time.sleep(0.05)
        full = f"{sleep} 600 {long_arg}"
        assert listed[started[0].pid] == full[:200] and len(listed[started[0].pid]) == 200
        assert listed[started[1].pid] == f"{sleep} 600"  # a short command whole
    finally:
        for p in started:
            p.kill()
            p.wait(timeout=60)
