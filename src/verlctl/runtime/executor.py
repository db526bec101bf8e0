"""Where commands run: one small interface, two implementations (docker container, this host).

The rest of verlctl does not know which one it talks to. Commands given to an executor run *inside* its
target (never prefixed with ``docker``); copying files in is host-side work (``put_archive`` for docker).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import io
import os
import shlex
import signal
import stat
import subprocess
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlctl.errors import RuntimeFailure


@dataclass
class ExecResult:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0


@dataclass(frozen=True)
class GroupRef:
    """A process group verlctl started, with the identity that is verified before any signal or verdict:
    the per-attempt marker in its environment, the leader's start time, and (docker) the container's start
    time: a container restarted since then means the attempt has ended, whatever its pids are now."""

    pgid: int
    marker: str | None = None
    start: int | None = None
    container_started_at: str | None = None

    def __str__(self) -> str:
        return str(self.pgid)


def as_ref(group: GroupRef | int) -> GroupRef:
    return group if isinstance(group, GroupRef) else GroupRef(int(group))


@dataclass(frozen=True)
class FileSpec:
    content: bytes
    mode: int = 0o644


#: How long Ray's own daemons of a stopped attempt get after SIGTERM before SIGKILL. Ray itself gives each
#: daemon 1 s (ray/_private/node.py, Node._kill_process_impl: terminate(), wait(timeout=1), kill()), `ray stop
#: --force` sends SIGKILL, and `ray start --block` SIGKILLs the rest when one dies. On SIGTERM, `ray start
#: --block` first drains the node for Ray Serve (RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S, 30 s) and gcs_server
#: outlived a 20 s grace: without this, `stop` of a real-Ray run took 21 s. The GCS of a verlctl run keeps
#: its state in memory only (no external Redis), so nothing is lost. The training's own processes (the driver,
#: Ray workers and actors) keep the whole grace period.
RAY_DAEMON_GRACE_S = 2.0

#: How long a group may take to vanish after SIGKILL (the kernel tears it down) before a stop says it did not stop.
KILL_WAIT_S = 10.0

#: At most this long a start waits for its leader to show the run's marker (:meth:`Executor._await_identity`).
IDENTITY_WAIT_S = 10.0


class Executor(abc.ABC):
    kind: str = "?"

    @abc.abstractmethod
    def run(
        self,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 120,
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run a command to completion inside the target and return its exit code and output."""

    @abc.abstractmethod
    def put_files(self, dest_dir: str, files: Mapping[str, FileSpec]) -> None:
        """Copy files into ``dest_dir`` of the target (created if missing), from the host side."""

    @abc.abstractmethod
    def start_detached(self, argv: list[str], log_path: str, cwd: str | None = None,
                       env: Mapping[str, str] | None = None) -> int:
        """Start ``argv`` in a new process group/session with output appended to ``log_path``; return the pgid."""

    @abc.abstractmethod
    def read_file(self, path: str, offset: int = 0, max_bytes: int | None = None) -> bytes | None:
        """Bytes of a file in the target from ``offset`` (None when it does not exist)."""

    @abc.abstractmethod
    def _act(self, ref: GroupRef, sig: int, only: str = "") -> dict[str, Any]:
        """Run :func:`procscan.act` in the target's PID namespace: verify ``ref`` now, signal it if ``sig``
        (``only="ray"``: only its Ray daemons)."""

    @abc.abstractmethod
    def leader_start(self, pid: int) -> int | None:
        """Start time (clock ticks since boot) of ``pid`` in the target, None when it is gone."""

    def marked_processes(self) -> list[dict[str, Any]]:
        """Live processes in the target that carry some verlctl attempt marker (any run's)."""
        from verlctl.runtime import procscan

        return procscan.markers()

    def stop_followers(self, run_id: str, log: str, sig: int = 15) -> dict[str, Any]:
        """Stop the run's log followers (a watcher's ``tail -F``) left in the target, each verified as the
        run's own (:func:`procscan.stop_followers`): {"found", "signalled", "refused"}."""
        from verlctl.runtime import procscan

        return procscan.stop_followers(run_id, log, sig)

    def verdict(self, group: GroupRef | int, sig: int = 0, only: str = "") -> dict[str, Any]:
        """Whether the group is still the attempt verlctl started (identity checked now), and its processes.
        With ``sig``, signal them (``only="ray"``: only its Ray daemons), only when verified."""
        from verlctl.runtime import procscan

        ref = as_ref(group)
        if not procscan.valid_pgid(ref.pgid):
            return {"owned": False, "reason": f"process group id {ref.pgid} is out of range: not signalled",
                    "group": [], "strays": []}
        return self._act(ref, sig, only)

    def group_alive(self, group: GroupRef | int) -> bool:
        """True while a verified process of the attempt is alive."""
        return bool(self.verdict(group)["owned"])

    def signal_group(self, group: GroupRef | int, sig: int) -> bool:
        """Signal the attempt's processes after verifying them; False when nothing of it is alive. A target
        set that fails the last check before the signal (procscan.deliver) is refused as a whole: an error."""
        verdict = self.verdict(group, int(sig))
        if verdict.get("refused"):
            raise RuntimeFailure(f"{self.describe()}: process group {as_ref(group).pgid} was not signalled: "
                                 f"{verdict['refused']}")
        return bool(verdict["owned"])

    def start_group(self, argv: list[str], log_path: str, marker: str, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> GroupRef:
        """:meth:`start_detached` with the attempt's marker in the environment; the identity to record."""
        from verlctl.runtime.procscan import MARKER_VAR

        pgid = self.start_detached(argv, log_path, cwd=cwd, env={**(env or {}), MARKER_VAR: marker})
        ref = GroupRef(pgid, marker, self.leader_start(pgid))
        self._await_identity(ref)
        return ref

    def _await_identity(self, ref: GroupRef) -> None:
        """Return once the new leader shows its identity (the marker in its environment), or has ended, or
        :data:`IDENTITY_WAIT_S` passed. A start returns as soon as the leader's ``execve`` is past its point of
        no return, before the kernel has set up the new environment; read then, the environment is empty, and a
        check of the group (verify's, stop's) would call the attempt gone. Every start goes through here."""
        deadline = time.monotonic() + IDENTITY_WAIT_S
        while not self.group_alive(ref) and time.monotonic() < deadline:
            if ref.start is None or self.leader_start(ref.pgid) != ref.start:
                return  # it has ended (or was never seen): nothing to wait for
            time.sleep(0.02)

    def kill_ray_daemons(self, group: GroupRef | int) -> list[list[Any]]:
        """SIGKILL the Ray daemons (gcs_server, raylet, dashboard, agents, `ray start`) of the verified
        attempt, each checked by pid and start time; what was signalled, as [pid, name]."""
        verdict = self.verdict(group, int(signal.SIGKILL), only="ray")
        return list(verdict.get("daemons") or []) if verdict.get("owned") else []

    def stop_group(self, group: GroupRef | int, grace_s: float = 20.0,
                   ray_grace_s: float = RAY_DAEMON_GRACE_S) -> bool:
        """SIGTERM the group, wait up to ``grace_s``, then SIGKILL; Ray's own daemons still there after
        ``ray_grace_s`` get SIGKILL then (see :data:`RAY_DAEMON_GRACE_S`). True when it is gone."""
        if not self.group_alive(group):
            return True
        self.signal_group(group, signal.SIGTERM)
        started = time.monotonic()
        deadline = started + grace_s
        escalated = False
        while time.monotonic() < deadline:
            if not self.group_alive(group):
                return True
            if not escalated and time.monotonic() - started >= min(ray_grace_s, grace_s):
                escalated = True
                self.kill_ray_daemons(group)
            time.sleep(0.25)
        self.signal_group(group, signal.SIGKILL)
        deadline = time.monotonic() + KILL_WAIT_S
        while time.monotonic() < deadline:
            if not self.group_alive(group):
                return True
            time.sleep(0.25)
        return not self.group_alive(group)

    def file_size(self, path: str) -> int | None:
        res = self.run(["stat", "-c", "%s", path], timeout=30)
        return int(res.out.strip()) if res.ok and res.out.strip().isdigit() else None

    def read_log(self, path: str, offset: int = 0, max_bytes: int | None = None) -> tuple[bytes | None, str]:
        """A run's log, as :meth:`read_file` reads it, for every reader of a log (status, logs, bundle): the
        bytes, or None and why not (absent; a FIFO, a device or a symlink at its name, as in a damaged or
        planted record, is refused by the reader: one reason, never a traceback)."""
        try:
            data = self.read_file(path, offset=offset, max_bytes=max_bytes)
        except OSError as exc:
            return None, f"{path} not read: {exc.strerror or exc}"
        return data, "" if data is not None else f"no log at {path}"

    def describe(self) -> str:
        return self.kind



def _detach_script(log_path: str) -> str:
    # In a non-interactive shell a background child is not a group leader, so setsid(1) does not fork:
    # $! is the pid of the new session leader, i.e. the new process group id.
    # (a simple command in the background: bash forks once, and the child execs setsid, then argv.)
    return 'mkdir -p -- "$(dirname -- "$VERLCTL_LOG")" || exit 1; setsid "$@" >>"$VERLCTL_LOG" 2>&1 </dev/null & echo $!'


# ------------------------------------------------------------------------------------------ host


class HostExecutor(Executor):
    """Runs on this machine (bare metal, conda); processes are started in their own session. With
    ``python_env`` (a venv or conda env directory: ``container.python_env``), its ``bin/`` goes first on PATH for
    every command run here, so ``python3`` and ``ray`` are that environment's."""

    kind = "host"

    def __init__(self, python_env: str | None = None) -> None:
        self.python_env = python_env

    def environ(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """This process's environment, the environment's PATH first, then ``env``."""
        full = dict(os.environ)
        if self.python_env:
            full["PATH"] = f"{self.python_env}/bin:{full.get('PATH', os.defpath)}"
            full["VIRTUAL_ENV"] = self.python_env
            full.pop("PYTHONHOME", None)
        return {**full, **(env or {})}

    def run(
        self,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 120,
        stdin: bytes | None = None,
    ) -> ExecResult:
        full_env = self.environ(env)
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, env=full_env, cwd=cwd, timeout=timeout)
        except FileNotFoundError:
            return ExecResult(127, "", f"{argv[0]}: command not found")
        except subprocess.TimeoutExpired:
            return ExecResult(124, "", f"{shlex.join(argv)}: timed out after {timeout}s")
        return ExecResult(proc.returncode, proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))

    def put_files(self, dest_dir: str, files: Mapping[str, FileSpec]) -> None:
        d = Path(dest_dir)
        d.mkdir(parents=True, exist_ok=True)
        from verlctl.files import write_file

        for name, spec in files.items():
            write_file(d / name, spec.content, spec.mode)  # atomic, never through a planted symlink

    def start_detached(self, argv: list[str], log_path: str, cwd: str | None = None,
                       env: Mapping[str, str] | None = None) -> int:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=self.environ(env),
                start_new_session=True,
            )
        finally:
            log.close()
        return proc.pid

    def read_file(self, path: str, offset: int = 0, max_bytes: int | None = None) -> bytes | None:
        # Never through a symlink planted at the log's name, never a FIFO (that would block): a plain file.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, f"{path} is not a regular file")
            fh.seek(offset)
            return fh.read() if max_bytes is None else fh.read(max_bytes)

    def _act(self, ref: GroupRef, sig: int, only: str = "") -> dict[str, Any]:
        from verlctl.runtime import procscan

        # A leader that is our own child (started by this process) stays a zombie until reaped.
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(ref.pgid, os.WNOHANG)
        return procscan.act(ref.pgid, ref.marker, ref.start, sig, only)

    def leader_start(self, pid: int) -> int | None:
        from verlctl.runtime import procscan

        return procscan.leader_start(pid)

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(path).st_size
        except OSError:
            return None


# ---------------------------------------------------------------------------------------- docker


class DockerExecutor(Executor):
    """Runs inside a container through the Docker SDK (low-level exec API, so exit codes are real)."""

    kind = "docker"

    def __init__(self, client: object, container_id: str, name: str | None = None) -> None:
        self.client = client
        self.container_id = container_id
        self.name = name or container_id[:12]

    @property
    def api(self) -> Any:
        return self.client.api  # type: ignore[attr-defined]

    def describe(self) -> str:
        return f"container {self.name}"

    def run(
        self,
        argv: list[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = 120,
        stdin: bytes | None = None,
        retry: bool = True,
    ) -> ExecResult:
        if stdin is not None:
            raise NotImplementedError("stdin is not supported for container commands")
        cmd = list(argv)
        if timeout is not None:
            cmd = ["timeout", "--kill-after=5", str(int(max(1, timeout))), *cmd]
        attempts = 3 if retry else 1
        for attempt in range(attempts):
            try:
                eid = self.api.exec_create(
                    self.container_id, cmd, environment=dict(env) if env else None, workdir=cwd, stdout=True,
                    stderr=True,
                )["Id"]
            except Exception as exc:  # docker.errors.APIError and transport errors
                raise RuntimeFailure(f"{self.describe()}: cannot run {argv[0]}: {_docker_message(exc)}") from None
            try:
                out, err = self.api.exec_start(eid, demux=True)
            except ValueError as exc:
                # docker-py occasionally loses the stream framing under load ("N is not a valid stream"):
                # the command ran, its output is lost. Idempotent commands are simply run again.
                if attempt + 1 < attempts:
                    continue
                code = self._exit_code(eid, wait_s=_exit_wait(timeout))
                return ExecResult(code, "", f"output lost ({exc})")
            except Exception as exc:
                raise RuntimeFailure(f"{self.describe()}: cannot run {argv[0]}: {_docker_message(exc)}") from None
            code = self._exit_code(eid, wait_s=_exit_wait(timeout))
            err_text = (err or b"").decode(errors="replace")
            if code == EXEC_STILL_RUNNING:
                err_text += f"\n(the command was still running {_exit_wait(timeout):.0f}s after its output ended)"
            return ExecResult(code, (out or b"").decode(errors="replace"), err_text)
        raise AssertionError("unreachable")

    def _exit_code(self, eid: str, wait_s: float = 30.0) -> int:
        """The exec's exit code, once the engine has recorded that it ended.

        The end of an exec's output stream does not mean the exec has ended: the engine records the exit
        asynchronously (``Running: true, ExitCode: null`` for a while after the stream closed, long enough
        to see on a loaded machine or over an ssh-forwarded socket), and a command may close its output and
        go on running. So poll, bounded, until ``Running`` is false. ``EXEC_STILL_RUNNING`` (-1) when it
        did not end within ``wait_s``."""
        return self._exec_state(eid, wait_s).get("ExitCode", EXEC_STILL_RUNNING)

    def _exec_state(self, eid: str, wait_s: float = 30.0) -> dict[str, Any]:
        """``{"Running": bool, "ExitCode": int, "Pid": int}`` of an exec, waiting (bounded) for it to end."""
        deadline = time.monotonic() + wait_s
        pause = 0.02
        while True:
            try:
                info = self.api.exec_inspect(eid)
            except Exception as exc:
                raise RuntimeFailure(f"{self.describe()}: cannot inspect a command: {_docker_message(exc)}") from None
            code = info.get("ExitCode")
            if not info.get("Running") and code is not None:
                return {"Running": False, "ExitCode": int(code), "Pid": info.get("Pid")}
            if time.monotonic() >= deadline:
                return {"Running": bool(info.get("Running")), "ExitCode": EXEC_STILL_RUNNING, "Pid": info.get("Pid")}
            time.sleep(pause)
            pause = min(0.5, pause * 2)

    def put_files(self, dest_dir: str, files: Mapping[str, FileSpec]) -> None:
        res = self.run(["mkdir", "-p", "--", dest_dir], timeout=30)
        if not res.ok:
            raise RuntimeFailure(f"{self.describe()}: cannot create {dest_dir}: {res.err.strip()}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            now = time.time()
            for name, spec in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(spec.content)
                info.mode = spec.mode
                info.mtime = int(now)
                tf.addfile(info, io.BytesIO(spec.content))
        try:
            ok = self.api.put_archive(self.container_id, dest_dir, buf.getvalue())
        except Exception as exc:
            raise RuntimeFailure(f"{self.describe()}: cannot copy files to {dest_dir}: {_docker_message(exc)}") from None
        if not ok:
            raise RuntimeFailure(f"{self.describe()}: cannot copy files to {dest_dir}")

    def start_detached(self, argv: list[str], log_path: str, cwd: str | None = None,
                       env: Mapping[str, str] | None = None) -> int:
        # Not idempotent: run once, and read the pgid back from a file (robust to lost exec output).
        pid_file = f"/tmp/verlctl-start-{time.time_ns()}.pid"
        script = _detach_script(log_path) + ' > "$VERLCTL_PID_FILE"'
        cmd = ["bash", "-c", script, "verlctl-start", *argv]
        environment = {"VERLCTL_LOG": log_path, "VERLCTL_PID_FILE": pid_file, **(env or {})}
        res = self.run(cmd, env=environment, cwd=cwd, timeout=60, retry=False)
        raw = self.read_file(pid_file)
        for _ in range(5):  # read as empty once on a loaded engine although the start exited 0: ask again
            if not res.ok or (raw or b"").strip():
                break
            time.sleep(0.2)
            raw = self.read_file(pid_file)
        pid = (raw or b"").decode(errors="replace").strip()
        self.run(["rm", "-f", "--", pid_file], timeout=30)
        if not res.ok or not pid.isdigit():
            raise RuntimeFailure(f"{self.describe()}: could not start {argv}: {_start_failure(res, raw, pid_file)}")
        return int(pid)

    def read_file(self, path: str, offset: int = 0, max_bytes: int | None = None) -> bytes | None:
        # The output ends with a marker: on a loaded engine an exec's output can arrive empty although the
        # command ran and exited 0 (seen for the start pid file), and empty must not be read as "no data".
        # Exit 2: a tail (or head) that did not run or failed (a failed fork on a loaded machine) is a failed read,
        # never an empty file; a tail ended by SIGPIPE (141) once head has its bytes is a whole read.
        # Only a regular file is read: a FIFO or device planted at the path would block the read or never end.
        script = ('[ -f "$1" ] && [ -r "$1" ] || exit 1; if [ -n "$3" ]; then tail -c "+$2" -- "$1" | head -c "$3"; '
                  's=("${PIPESTATUS[@]}"); [ "${s[0]}" = 0 ] || [ "${s[0]}" = 141 ] || exit 2; '
                  '[ "${s[1]}" = 0 ] || exit 2; else tail -c "+$2" -- "$1" || exit 2; fi; printf %s "$4"')
        cmd = ["bash", "-c", script, "read", path, str(offset + 1), "" if max_bytes is None else str(max_bytes),
               _READ_END]
        marker = _READ_END.encode()
        for attempt in range(3):
            try:
                eid = self.api.exec_create(self.container_id, cmd, stdout=True, stderr=False)["Id"]
                out = self.api.exec_start(eid) or b""
            except ValueError:  # lost stream framing (see run): read again
                if attempt < 2:
                    continue
                raise RuntimeFailure(f"{self.describe()}: cannot read {path}: the output stream was garbled") from None
            except Exception as exc:
                raise RuntimeFailure(f"{self.describe()}: cannot read {path}: {_docker_message(exc)}") from None
            code = self._exit_code(eid)
            if code == EXEC_STILL_RUNNING:
                raise RuntimeFailure(f"{self.describe()}: cannot read {path}: the read did not finish")
            if code == 2 and attempt < 2:  # the read itself failed: read again
                continue
            if code != 0:
                return None
            if out.endswith(marker):
                return out[: -len(marker)]
        raise RuntimeFailure(f"{self.describe()}: cannot read {path}: its output was lost 3 times (engine overloaded?)")

    def file_size(self, path: str) -> int | None:
        for _ in range(3):
            res = self.run(["stat", "-c", "%s", "--", path], timeout=30)
            if not res.ok:
                return None
            if res.out.strip().isdigit():
                return int(res.out.strip())
            # exit 0 with no number: the output was lost on the way; ask again
        return None

    def started_at(self) -> str | None:
        """The container's State.StartedAt (changes on every restart)."""
        try:
            return str(self.api.inspect_container(self.container_id)["State"]["StartedAt"])
        except Exception as exc:
            raise RuntimeFailure(f"{self.describe()}: cannot inspect the container: {_docker_message(exc)}") from None

    def start_group(self, argv: list[str], log_path: str, marker: str, cwd: str | None = None,
                    env: Mapping[str, str] | None = None) -> GroupRef:
        ref = super().start_group(argv, log_path, marker, cwd=cwd, env=env)
        return GroupRef(ref.pgid, ref.marker, ref.start, self.started_at())

    def _procscan(self, args: list[str]) -> Any:
        import json

        from verlctl.runtime import procscan

        source = Path(procscan.__file__).read_text(encoding="utf-8")
        # A loaded engine can lose an exec's output although the command ran (see read_file): ask again, a
        # bounded number of times, before calling the check failed. The scan only reads (signals are sent by
        # a later call, after a verdict), so asking twice is harmless.
        for _ in range(3):
            res = self.run(["python3", "-c", source, *args], timeout=60)
            try:
                return json.loads(res.out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                if res.code not in (0, -1) and (res.err or "").strip():
                    break
        raise RuntimeFailure(
            f"{self.describe()}: cannot check the run's processes: {(res.err or res.out).strip()[:200]}"
        ) from None

    def _act(self, ref: GroupRef, sig: int, only: str = "") -> dict[str, Any]:
        if ref.container_started_at is not None and self.started_at() != ref.container_started_at:
            return {"owned": False, "group": [], "strays": [],
                    "reason": "the container restarted after the attempt started: the attempt has ended"}
        verdict: dict[str, Any] = self._procscan([str(ref.pgid), ref.marker or "-",
                                                  "-" if ref.start is None else str(ref.start), str(int(sig)),
                                                  *([only] if only else [])])
        return verdict

    def marked_processes(self) -> list[dict[str, Any]]:
        value = self._procscan(["--markers"])
        return value if isinstance(value, list) else []

    def stop_followers(self, run_id: str, log: str, sig: int = 15) -> dict[str, Any]:
        value = self._procscan(["--unfollow", run_id, log, str(int(sig))])
        if not isinstance(value, dict):
            raise RuntimeFailure(f"{self.describe()}: cannot stop the run's log followers")
        return value

    def residents(self) -> list[dict[str, Any]]:
        """Every live process in the container (pid, ppid, uid, cmd, marker, follower), for the removal check."""
        value = self._procscan(["--residents"])
        if not isinstance(value, list):
            raise RuntimeFailure(f"{self.describe()}: cannot list the container's processes")
        return value

    def leader_start(self, pid: int) -> int | None:
        value = self._procscan(["--start", str(pid)])
        return int(value) if isinstance(value, int) else None


EXEC_STILL_RUNNING = -1
_READ_END = "\x1e@@verlctl-read-end@@"


def _exit_wait(timeout: float | None) -> float:
    """How long to wait for an exec to be recorded as ended once its output ended (the command runs under
    ``timeout --kill-after=5``, so it ends by then; without a limit, a generous bound)."""
    return 30.0 if timeout is None else max(1.0, timeout) + 10.0


def _start_failure(res: ExecResult, pid_raw: bytes | None, pid_file: str) -> str:
    """What was seen when a detached start failed: the exit code, the exec's state, the pid file, the output."""
    if res.code == EXEC_STILL_RUNNING:
        state = "the start command had not ended"
    else:
        state = f"the start command exited with status {res.code}"
    if pid_raw is None:
        pid_seen = f"no pid file {pid_file}"
    elif not pid_raw.strip():
        pid_seen = f"pid file {pid_file} empty"
    else:
        pid_seen = f"pid file {pid_file} holds {' '.join(pid_raw.decode(errors='replace').split())[:40]!r}"
    output = " ".join((res.err.strip() or res.out.strip()).split())[:300]
    return f"{state}; {pid_seen}; output: {output or '(none)'}"


def _docker_message(exc: BaseException) -> str:
    explanation = getattr(exc, "explanation", None)
    text = str(explanation or exc)
    return " ".join(text.split())[:300]
