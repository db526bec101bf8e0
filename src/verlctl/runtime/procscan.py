"""Verify and signal the processes of one attempt, in the namespace where they run.

Self-contained (standard library only, Python >= 3.8): the host runtime calls :func:`main` in-process, the
docker runtime sends this file's source to ``python3 -`` inside the container, so that what is checked and
what is signalled are seen in the same PID namespace, within one process.

An attempt's identity (recorded when verlctl started it):

* ``pgid``   the process group (= session) id: the pid of ``start_verl.sh``, the group leader;
* ``marker`` a random per-attempt token, in the environment of every process it starts (``VERLCTL_ATTEMPT``);
* ``start``  the leader's start time in clock ticks since boot (``/proc/<pid>/stat`` field 22).

A group is the attempt's when its leader has the recorded start time and marker, or (leader gone) when a
member carries the marker: a pgid cannot be reused while one of its members lives. Other processes that carry
the marker (Ray workers that made their own process group) are the attempt's too. Nothing else is signalled.
Pid and start time alone (both world-readable) count only for a leader whose environment can no longer be
read (an exiting process has released its memory): a readable environment without the marker is never ours.

Defence in depth: :func:`deliver`, the only function that sends a signal, checks every target again on its
own just before the signal (through a pidfd: the same process, its start time, the same PID namespace as
this scan, the marker read from its environment now), and signals nothing at all when one target fails: a
wrong target set (a bug in :func:`verify`, a forged record) is refused, not partly carried out.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

MARKER_VAR = "VERLCTL_ATTEMPT"
FOLLOW_VAR = "VERLCTL_FOLLOW"  # a verlctl watcher's `tail -F` (runtime/follow.py): ``<run id>/<token>``
PID_MAX_LIMIT = 4194304  # the kernel's PID_MAX_LIMIT on 64-bit


def pid_max() -> int:
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return PID_MAX_LIMIT


def valid_pgid(pgid: object) -> bool:
    """Only ids that name one process group: never 0 (own group), 1 (kill(-1): everything) or negatives."""
    return isinstance(pgid, int) and not isinstance(pgid, bool) and 1 < pgid <= pid_max()


def _stat(pid: int) -> dict | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    if len(rest) < 20:
        return None
    # rest[0] is field 3 (state): field N is rest[N - 3]
    return {"pid": pid, "state": rest[0], "ppid": int(rest[1]), "pgid": int(rest[2]), "sid": int(rest[3]),
            "start": int(rest[19])}


def _has_memory(pid: int) -> bool:
    """False for a process without an address space (one on its way out, a kernel thread): its environment
    reads empty although it had one (``/proc/<pid>/stat`` field 23, vsize, is 0 then)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("utf-8", "replace")
    except OSError:
        return False
    rest = raw[raw.rfind(")") + 2:].split()
    return len(rest) > 20 and rest[20] != "0"


def _environ(pid: int) -> bytes | None:
    """The process's environment, None when it cannot be read (another user's process, or no address space
    any more). An empty environment of a live process (``env -i``) is read, and is empty."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = fh.read()
    except OSError:
        return None
    if not env and not _has_memory(pid):
        return None
    return env


def _marker_in(env: bytes | None, var: str = MARKER_VAR) -> str | None:
    if env is None:
        return None
    prefix = (var + "=").encode()
    for item in env.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix):].decode("utf-8", "replace")
    return None


def _marker_of(pid: int) -> str | None:
    return _marker_in(_environ(pid))


def _pid_ns(pid: int | str) -> str | None:
    """The PID namespace of a process (``pid:[inode]``), None when it cannot be read."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _cmd_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read(4096).replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def scan() -> list[dict]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is None:
            continue
        env = _environ(st["pid"])
        st["marker"] = _marker_in(env)
        st["follow"] = _marker_in(env, FOLLOW_VAR)
        st["env_readable"] = env is not None
        st["ns"] = _pid_ns(name)
        try:
            st["uid"] = os.stat("/proc/" + name).st_uid
        except OSError:
            st["uid"] = -1
        st["cmd"] = _cmd_of(st["pid"])
        out.append(st)
    return out


def verify(procs: list[dict], pgid: int, marker: str | None, start: int | None) -> dict:
    """{"owned": bool, "reason": str, "group": [pids], "strays": [pids]} for the attempt's identity."""
    verdict: dict = {"owned": False, "reason": "", "group": [], "strays": []}
    if not valid_pgid(pgid):
        verdict["reason"] = f"process group id {pgid!r} is out of range"
        return verdict
    if not marker:
        verdict["reason"] = "the record has no process identity (made by an older verlctl): nothing is signalled"
        return verdict
    own_ns = _pid_ns("self")
    # Not the processes of another PID namespace (a container's processes are visible in the host's /proc
    # too); one whose namespace cannot be read is kept here, and deliver() refuses to signal it.
    live = [p for p in procs if p["state"][:1] not in ("Z", "X") and p.get("ns") in (None, own_ns)]
    members = [p for p in live if p["pgid"] == pgid]
    verdict["strays"] = [p["pid"] for p in live if p["marker"] == marker and p["pgid"] != pgid]
    leader = next((p for p in live if p["pid"] == pgid), None)
    if leader is not None:
        if start is not None and leader["start"] != start:
            verdict["reason"] = f"pid {pgid} is another process now (not the one the run started)"
            ours = False
        elif leader["marker"] is None and start is not None and not leader.get("env_readable", True):
            # Its environment can no longer be read (a process on its way out has released its memory), but
            # pid and start time are the process the run started: still ours until it has exited. A leader
            # whose environment reads without the marker is not (pid and start time are world-readable).
            ours = True
        elif leader["marker"] != marker:
            verdict["reason"] = f"process group {pgid} is not this run's (its leader lacks the run's marker)"
            ours = False
        else:
            ours = True
    else:
        ours = any(p["marker"] == marker for p in members)
        if members and not ours:
            verdict["reason"] = f"process group {pgid} is not this run's (no member carries the run's marker)"
    if ours:
        verdict["group"] = [p["pid"] for p in members]
    verdict["owned"] = bool(verdict["group"] or verdict["strays"])
    # The Ray daemons among the attempt's verified processes (the head's GCS and raylet that its `ray start`
    # launched): named by their executable, counted only inside the verified group or its marked strays.
    mine = set(verdict["group"]) | set(verdict["strays"])
    verdict["ray"] = {name: p["pid"] for p in live if p["pid"] in mine
                      for name in [ray_daemon(p.get("cmd", ""))] if name}
    # All of Ray's own daemons among them (what `ray stop` would stop), as [pid, name].
    verdict["daemons"] = [[p["pid"], name] for p in live if p["pid"] in mine
                          for name in [ray_system(p.get("cmd", ""))] if name]
    # The Ray actors among them (their process title ``ray::Class[.method]``): [pid, class name, start].
    verdict["actors"] = [[p["pid"], name, p["start"]] for p in live if p["pid"] in mine
                         for name in [ray_actor(p.get("cmd", ""))] if name]
    # The scripts the attempt's shells and interpreters run (e.g. whether its training script still runs).
    verdict["scripts"] = sorted({script_of(p.get("cmd", "")) for p in live if p["pid"] in mine} - {""})
    if not verdict["owned"] and not verdict["reason"]:
        verdict["reason"] = f"process group {pgid} has ended"
    return verdict


RAY_DAEMONS = ("gcs_server", "raylet")


def ray_daemon(cmd: str) -> str | None:
    """``gcs_server`` / ``raylet`` when the command line runs Ray's daemon of that name (its executable)."""
    exe = cmd.split(" ", 1)[0].rsplit("/", 1)[-1] if cmd else ""
    return exe if exe in RAY_DAEMONS else None


#: Ray's daemons that run as Python scripts of the ray package, or under a process title Ray sets.
RAY_PY_DAEMONS = ("/ray/autoscaler/_private/monitor.py", "/ray/dashboard/dashboard.py", "/ray/dashboard/agent.py",
                  "/ray/_private/log_monitor.py", "/ray/_private/runtime_env/agent/main.py",
                  "/ray/util/client/server/server.py")
RAY_TITLES = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def ray_system(cmd: str) -> str | None:
    """The name of a Ray daemon (what `ray start` launched and `ray stop` stops: gcs_server, raylet, the
    dashboard, agents, log monitor, autoscaler monitor, and `ray start` itself), None for anything else (the
    training driver, Ray workers and actors)."""
    daemon = ray_daemon(cmd)
    if daemon:
        return daemon
    words = cmd.split(" ")
    if words[0] in RAY_TITLES:
        return words[0]
    if words[0].rsplit("/", 1)[-1].startswith("python"):
        for w in words[1:4]:
            if w.endswith(RAY_PY_DAEMONS):
                return w.rsplit("/", 1)[-1]
            if w.endswith("/bin/ray") and "start" in words:
                return "ray start"
    return None


def ray_actor(cmd: str) -> str | None:
    """The class of the Ray actor a process runs (Ray titles an actor's worker ``ray::Class`` or
    ``ray::Class.method``), None for anything else (an idle worker, Ray's own agents)."""
    word = cmd.split(" ", 1)[0] if cmd else ""
    if not word.startswith("ray::") or word in RAY_TITLES:
        return None
    name = word[5:].split(".", 1)[0]
    return name if name.isidentifier() and name != "IDLE" else None


def script_of(cmd: str) -> str:
    """The file name of the script a shell or interpreter runs (``bash /x/run_training.sh`` -> that name)."""
    words = cmd.split(" ")
    if len(words) < 2 or words[0].rsplit("/", 1)[-1] not in ("bash", "sh", "python", "python3"):
        return ""
    arg = words[1]
    return "" if arg.startswith("-") else arg.rsplit("/", 1)[-1]


def deliver(targets: list[list[int]], marker: str, sig: int, session: int | None = None,
            var: str = "") -> dict:
    """Send ``sig`` to every target ``[pid, start]``, each verified again here, on its own, just before the
    signal: a pidfd names the process (no pid reuse between check and signal), and it must have that start
    time, live in this PID namespace and carry ``marker`` in its environment (read now). A member of the
    attempt's ``session`` (its leader ran setsid) whose environment no longer shows the marker (Ray's agents
    rewrite theirs with their process title) counts only when a target of that session that carries the marker
    is verified in the same call: a session id cannot be joined from outside, nor reused while it has members.
    A target that has ended, or whose environment cannot be read any more (on its way out), is left out. When
    any target fails a check, nothing at all is signalled: {"signalled": [pids], "refused": reason or ""}.
    ``var``: the environment variable that carries ``marker`` (default ``VERLCTL_ATTEMPT``; a follower's
    ``VERLCTL_FOLLOW``)."""
    out: dict = {"signalled": [], "refused": ""}
    var = var or MARKER_VAR
    own_ns = _pid_ns("self")
    if not marker or own_ns is None or not sig:
        out["refused"] = "no marker, no signal, or this PID namespace cannot be read"
        return out
    me = os.getpid()
    checked = []  # (pid, fd, carries the marker, session id)
    try:
        for pid, start in targets:
            if not valid_pgid(pid) or pid == me:
                out["refused"] = f"pid {pid!r} is never signalled"
                return out
            fd = _pidfd(pid)
            if fd is None:
                continue  # it has ended
            st = _stat(pid)
            env = _environ(pid) if st is not None else None
            if st is None or st["state"][:1] in ("Z", "X") or env is None:
                os_close(fd)
                continue  # ended, or on its way out: nothing left to signal
            checked.append((pid, fd, _marker_in(env, var) == marker, st["sid"]))
            if st["start"] != start:
                out["refused"] = f"pid {pid} is another process than the one verified"
                return out
            if _pid_ns(pid) != own_ns:
                out["refused"] = f"pid {pid} runs in another PID namespace"
                return out
        anchored = session is not None and any(m and sid == session for _p, _f, m, sid in checked)
        for pid, _fd, marked, sid in checked:
            if not marked and not (anchored and sid == session):
                out["refused"] = f"pid {pid} does not carry the run's marker"
                return out
        for pid, fd, _m, _sid in checked:
            if _send(pid, fd, sig):
                out["signalled"].append(pid)
    finally:
        for _pid, fd, _m, _sid in checked:
            os_close(fd)
    return out


def os_close(fd: int) -> None:
    if fd >= 0:
        with contextlib.suppress(OSError):
            os.close(fd)


def _pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (-1 where pidfds are unavailable: Python < 3.9 or an old kernel), None when gone."""
    if not hasattr(os, "pidfd_open"):
        return -1
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    except OSError:
        return -1


def _send(pid: int, fd: int, sig: int) -> bool:
    try:
        if fd >= 0:
            import signal as _signal

            _signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        return False
    return True


def deliver_watcher(pid: int, run_id: str, sig: int) -> bool:
    """Signal the watcher of ``run_id`` at ``pid``, checked here on its own just before the signal (through a
    pidfd): this user's process, in this PID namespace, running ``verlctl watch <run_id>``. False when not."""
    if not valid_pgid(pid) or pid == os.getpid() or not run_id or not sig:
        return False
    fd = _pidfd(pid)
    if fd is None:
        return False
    try:
        try:
            uid = os.stat(f"/proc/{pid}").st_uid
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = [a.decode("utf-8", "replace") for a in fh.read(65536).split(b"\0")]
        except OSError:
            return False
        if uid != os.geteuid() or _pid_ns(pid) != _pid_ns("self") or "watch" not in argv:
            return False
        i = argv.index("watch")
        if i < 1 or not (argv[i - 1] == "verlctl" or argv[i - 1].endswith("/verlctl")):
            return False
        if run_id not in argv[i + 1:]:
            return False
        return _send(pid, fd, sig)
    finally:
        os_close(fd)


def act(pgid: int, marker: str | None, start: int | None, sig: int, only: str = "") -> dict:
    """Verify the attempt's identity now; with ``sig`` > 0 signal its group and its stray processes (with
    ``only="ray"``: only its Ray daemons), through :func:`deliver`, which checks each of them again."""
    procs = scan()
    verdict = verify(procs, pgid, marker, start)
    if sig and verdict["owned"] and marker:
        starts = {p["pid"]: p["start"] for p in procs}
        verified = set(verdict["group"]) | set(verdict["strays"])
        if only == "ray":
            pids = [pid for pid, _name in verdict["daemons"]]
        else:
            pids = list(verdict["group"]) + list(verdict["strays"])
        if not set(pids) <= verified:
            verdict["refused"] = "the processes to signal are not the ones verified: nothing signalled"
        else:
            done = deliver([[pid, starts[pid]] for pid in pids], marker, sig, session=pgid)
            verdict["refused"] = done["refused"]
            verdict["delivered"] = done["signalled"]
        verdict["signalled"] = not verdict["refused"]
    return verdict


def main(argv: list[str]) -> dict:
    """``act`` from command-line words: PGID MARKER START SIG [ONLY] ('-' for none)."""
    pgid, marker, start, sig = argv[:4]
    return act(int(pgid), None if marker == "-" else marker, None if start == "-" else int(start), int(sig),
               argv[4] if len(argv) > 4 else "")


def leader_start(pid: int) -> int | None:
    st = _stat(pid)
    return None if st is None else int(st["start"])


def markers() -> list[dict]:
    """The live processes that carry a verlctl attempt marker (pid, marker, command)."""
    return [{"pid": p["pid"], "marker": p["marker"], "cmd": p["cmd"][:200]} for p in scan()
            if p["marker"] and p["state"][:1] not in ("Z", "X")]


def residents() -> list[dict]:
    """Every live process but this scan (and its parents): pid, ppid, uid, command, its verlctl attempt marker and whether it
    is a verlctl follower (``tail -F`` of a watcher). What `stop --remove-container` would end. Reads only."""
    procs = scan()
    ppid = {p["pid"]: p["ppid"] for p in procs}
    mine = set()  # this scan and what runs it (`timeout ... python3 -c`), up to the container's init
    pid = os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        pid = ppid.get(pid, 0)
    prefix = (FOLLOW_VAR + "=").encode()
    out = []
    for p in procs:
        if p["pid"] in mine or p["state"][:1] in ("Z", "X"):
            continue
        env = _environ(p["pid"]) or b""
        out.append({"pid": p["pid"], "ppid": p["ppid"], "uid": p["uid"], "cmd": p["cmd"][:200],
                    "marker": p["marker"], "follower": any(i.startswith(prefix) for i in env.split(b"\0"))})
    return out


def follower_cmd_ok(cmd: str, log: str) -> bool:
    """Whether ``cmd`` is a follower's command for ``log``: ``tail -c +N -F -- LOG`` (runtime/follow.py)."""
    head = "tail -c +"
    if not log or not cmd.startswith(head):
        return False
    offset, sep, rest = cmd[len(head):].partition(" ")
    return offset.isdigit() and sep == " " and rest == "-F -- " + log


def follower_targets(procs: list[dict], run_id: str, log: str) -> list[dict]:
    """The live followers of ``run_id``'s ``log`` among ``procs``, each verified as the run's own: in this PID
    namespace, ``VERLCTL_FOLLOW=<run id>/<token>`` in its environment, the command ``tail -c +N -F -- LOG``,
    and started by ``docker exec`` from outside the container's PID namespace (parent pid 0 seen from
    inside): a `tail` that a shell in the container started (a colleague's) has a parent here."""
    own_ns = _pid_ns("self")
    if not run_id or "/" in run_id or not log:
        return []
    return [p for p in procs if p["state"][:1] not in ("Z", "X") and p.get("ns") == own_ns
            and str(p.get("follow") or "").startswith(run_id + "/") and len(str(p["follow"])) > len(run_id) + 1
            and p["ppid"] == 0 and follower_cmd_ok(p.get("cmd", ""), log)]


def stop_followers(run_id: str, log: str, sig: int = 15) -> dict:
    """Stop the run's followers (``tail -F`` of its log) that a watcher left behind (one killed with -9 never
    stopped its own): each verified by :func:`follower_targets`, then again by :func:`deliver` just before
    its signal (its own token read from its environment then). {"found", "signalled", "refused"}."""
    out: dict = {"found": [], "signalled": [], "refused": []}
    for p in follower_targets(scan(), run_id, log):
        out["found"].append(p["pid"])
        done = deliver([[p["pid"], p["start"]]], p["follow"], sig, var=FOLLOW_VAR)
        out["signalled"] += done["signalled"]
        if done["refused"]:
            out["refused"].append(done["refused"])
    return out


if __name__ == "__main__":
    if sys.argv[1:2] == ["--residents"]:
        print(json.dumps(residents()))
    elif sys.argv[1:2] == ["--start"]:
        print(json.dumps(leader_start(int(sys.argv[2]))))
    elif sys.argv[1:2] == ["--unfollow"]:
        print(json.dumps(stop_followers(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    elif sys.argv[1:2] == ["--markers"]:
        print(json.dumps(markers()))
    else:
        print(json.dumps(main(sys.argv[1:])))
