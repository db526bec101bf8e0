"""Run records: one directory per launch under the user's state dir, so that status / logs / stop work
later from any shell.

Layout of ``$XDG_STATE_HOME/verlctl/runs/<run id>/`` (``VERLCTL_STATE_DIR`` overrides the root):

* ``run.json``           the handles: runtime, container id, process group, log paths, paths inside the target
* ``spec.resolved.yaml`` the resolved spec (secrets masked), ``start_verl.sh``, ``run_training.sh``
* ``events.jsonl``       append-only events (launch, started, failure, recovery, stop, …)
* ``status.json``        the watcher's live status (step/total, ETA, last metrics), when a watcher runs
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import re
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, field_validator

from verlctl.errors import VerlctlError
from verlctl.runtime.procscan import PID_MAX_LIMIT

if TYPE_CHECKING:
    from verlctl.runtime.executor import GroupRef

RUN_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
MAX_RECORD_BYTES = 4 * 1024 * 1024  # a run.json is a few kB: anything larger is damaged, not read
# A process group id that names one group: not 0 (the caller's own), not 1 (kill(-1): every process), not < 0.
Pgid = Annotated[int, Field(gt=1, le=PID_MAX_LIMIT)]


#: The names a run's log file may end with (``verlctl-<run>.log``, the trainer's ``<experiment>.log``,
#: a Slurm job's ``slurm-<job>.out``).
LOG_SUFFIXES = (".log", ".out")


def check_record_path(field: str, v: str, absolute: bool = True) -> str:
    """A path in a run record: absolute (unless ``absolute`` is False), without a control character; else
    ValueError. A record is read back from a state dir that someone else may have written to: its paths are input.
    """
    if re.search(r"[\x00-\x1f\x7f]", v):
        raise ValueError(f"{field} holds a control character")
    if absolute and not v.startswith("/"):
        raise ValueError(f"{field} {v[:80]!r} is not an absolute path")
    return v


def valid_run_id(run_id: str) -> bool:
    return bool(RUN_ID_RE.fullmatch(run_id)) and run_id not in (".", "..")


def state_root() -> Path:
    override = os.environ.get("VERLCTL_STATE_DIR")
    if override:
        return Path(override)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "verlctl"


def runs_dir() -> Path:
    return state_root() / "runs"


def new_run_id(experiment: str) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{stamp}-{experiment[:40]}-{secrets.token_hex(2)}"


class Attempt(BaseModel):
    """One start of the training (the first launch, or a recovery restart)."""

    number: int
    pgid: Pgid
    started_at: float
    marker: str | None = None  # VERLCTL_ATTEMPT in the environment of every process of this attempt
    leader_start: int | None = None  # the group leader's start time (clock ticks since boot)
    container_started_at: str | None = None  # docker: the container's StartedAt when the attempt started
    features: list[str] = Field(default_factory=list, description="features on for this attempt")
    reason: str = "launch"
    resumed_from: str | None = None  # checkpoint dir the trainer should resume from
    log_offset: int = 0  # size of the run log when this attempt started

    @property
    def ref(self) -> GroupRef:
        from verlctl.runtime.executor import GroupRef

        return GroupRef(self.pgid, self.marker, self.leader_start, self.container_started_at)


class NodeHandle(BaseModel):
    """A worker node of a multi-node run: where its container is and the process group started there."""

    address: str
    container_id: str | None = None
    container_name: str | None = None
    container_created: bool = False
    pgid: Pgid | None = None
    marker: str | None = None
    leader_start: int | None = None
    container_started_at: str | None = None

    @property
    def ref(self) -> GroupRef | None:
        from verlctl.runtime.executor import GroupRef

        if self.pgid is None:
            return None
        return GroupRef(self.pgid, self.marker, self.leader_start, self.container_started_at)


class SlurmJobRef(BaseModel):
    """One submission of a Slurm run (the first, or an OOM-recovery resubmission): the job id is the handle."""

    number: int
    job_id: Annotated[str, Field(pattern=r"^[0-9]{1,12}$")]
    job_name: str
    submitted_at: float
    output: str  # the job's output file (sbatch --output), on storage this host shares with the nodes
    features: list[str] = Field(default_factory=list)
    reason: str = "launch"
    resumed_from: str | None = None


class RunRecord(BaseModel):
    run_id: str
    created_at: float
    runtime: str  # docker | host | slurm
    container_id: str | None = None
    container_name: str | None = None
    container_created: bool = False  # created by this run (stop --remove-container may remove it)
    image: str | None = None
    workdir: str
    scripts_dir: str  # inside the target
    run_log: str  # inside the target: output of start_verl.sh
    train_log: str  # inside the target: the training command's tee
    checkpoints: str
    experiment: str
    verl_version: str
    pgid: Pgid | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    head_address: str | None = None  # multi-node: the head node (None: this machine)
    workers: list[NodeHandle] = Field(default_factory=list)  # multi-node: the other nodes
    ssh_user: str | None = None
    ssh_port: int | None = None
    remote_docker_socket: str = "/var/run/docker.sock"
    ssh_config: str | None = None
    watcher_pid: Pgid | None = None
    stopped: bool = False
    swanlab_url: str | None = None
    spec_file: str = "spec.resolved.yaml"
    slurm_jobs: list[SlurmJobRef] = Field(default_factory=list)  # runtime "slurm": every submission, in order
    python_env: str | None = None  # runtime "host": container.python_env (its bin/ first on PATH)

    @field_validator("run_id")
    @classmethod
    def _run_id_is_a_name(cls, v: str) -> str:
        if not valid_run_id(v):
            raise ValueError(f"run_id {v!r} is not a plain name ([A-Za-z0-9_.-]+)")
        return v

    @field_validator("spec_file")
    @classmethod
    def _spec_file_is_a_name(cls, v: str) -> str:
        # A name in the run's own directory: an absolute path would make report/bundle/export-hf read any file.
        if not valid_run_id(v):
            raise ValueError(f"spec_file {v[:80]!r} is not a file name in the run's directory")
        return v

    @field_validator("python_env")
    @classmethod
    def _python_env_is_a_plain_absolute_path(cls, v: str | None, info: Any) -> str | None:
        return None if v is None else check_record_path(info.field_name, v)

    @field_validator("scripts_dir", "workdir")
    @classmethod
    def _dirs_are_plain_absolute_paths(cls, v: str, info: Any) -> str:
        return check_record_path(info.field_name, v)

    @field_validator("run_log", "train_log")
    @classmethod
    def _logs_are_log_files(cls, v: str, info: Any) -> str:
        if v == "":  # not known yet (a Slurm job before its submission; the train log before the render)
            return v
        # The train log is the trainer's own `tee` target, as rendered (relative when paths.logs is unset).
        check_record_path(info.field_name, v, absolute=info.field_name == "run_log")
        if not v.endswith(LOG_SUFFIXES):
            raise ValueError(f"{info.field_name} {v[:80]!r} is not a log file (its name must end in .log or .out)")
        return v

    @property
    def ref(self) -> GroupRef | None:
        """The identity of the current attempt's process group (None when nothing was started)."""
        from verlctl.runtime.executor import GroupRef

        if self.pgid is None:
            return None
        for a in reversed(self.attempts):
            if a.pgid == self.pgid:
                return a.ref
        return GroupRef(self.pgid)

    # ------------------------------------------------------------------ persistence

    @property
    def dir(self) -> Path:
        if not valid_run_id(self.run_id):  # never leaves the state directory
            raise VerlctlError(f"run id {self.run_id!r} is not a plain name: refused")
        return runs_dir() / self.run_id

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".run.json.", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(self.model_dump_json(indent=2))
            os.replace(tmp, self.dir / "run.json")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one event to events.jsonl (never rewritten, never through a symlink planted there)."""
        ev = {"time": time.time(), "run": self.run_id, "event": kind, **data}
        self.dir.mkdir(parents=True, exist_ok=True)
        line = (json.dumps(ev, default=str) + "\n").encode("utf-8")
        try:
            fd = os.open(self.dir / "events.jsonl",
                         os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # an OSError like any other write failure: callers warn and go on
                raise OSError(errno.ELOOP, "it is a symbolic link: refused to write through it",
                              str(self.dir / "events.jsonl")) from None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OSError(errno.EINVAL, "it is not a regular file: refused to write to it",
                              str(self.dir / "events.jsonl"))
            os.write(fd, line)
        finally:
            os.close(fd)
        return ev

    def read_file(self, name: str, limit: int = MAX_RECORD_BYTES) -> bytes:
        """One plain file of the run's own directory (``name`` a plain name; never through a symlink, never a
        FIFO or a device, at most ``limit`` bytes): OSError/ValueError when it cannot be read so."""
        if not valid_run_id(name):
            raise ValueError(f"{name[:80]!r} is not a file name in the run's directory")
        return _read_bounded(self.dir / name, limit)

    def events(self) -> list[dict[str, Any]]:
        try:
            text = self.read_file("events.jsonl", 64 * 1024 * 1024).decode("utf-8", errors="replace")
        except (OSError, ValueError):
            return []
        out = []
        for line in text.splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def write_status(self, status: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".status.json.", dir=self.dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(json.dumps(status, default=str))
            os.replace(tmp, self.dir / "status.json")
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def read_status(self) -> dict[str, Any] | None:
        p = self.dir / "status.json"
        try:
            data = json.loads(_read_bounded(p).decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


@dataclass
class DamagedRecord:
    """A run directory whose run.json cannot be used; listed, never acted on."""

    run_id: str  # the directory name
    reason: str
    owner: str | None = None  # set when the record is another user's, unreadable by this one: not damaged

    @property
    def message(self) -> str:
        if self.owner is not None:
            return f"run record {runs_dir() / self.run_id / 'run.json'} belongs to {self.owner}: not readable by you"
        return f"run record {runs_dir() / self.run_id / 'run.json'} is damaged: {self.reason}"

    @property
    def summary(self) -> str:
        """The record's state in one cell of `verlctl list`."""
        return f"{self.owner}'s: not readable by you" if self.owner is not None else f"damaged: {self.reason}"

    @property
    def hint(self) -> str:
        if self.owner is not None:
            return "run verlctl as that user, or use your own state dir (VERLCTL_STATE_DIR)"
        return "repair or remove that directory"


def owner_name(uid: int) -> str:
    """``uid 0 (root)``; ``uid 1234`` when the uid has no name here."""
    import pwd

    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _foreign_owner(p: Path) -> str | None:
    """The owner of ``p`` (or of its directory) when that is another user's, else None."""
    for q in (p, p.parent):
        try:
            uid = os.lstat(q).st_uid
        except OSError:
            continue
        if uid != os.geteuid():
            return owner_name(uid)
    return None


def _read_bounded(p: Path, limit: int = MAX_RECORD_BYTES) -> bytes:
    """A regular file's bytes (never through a symlink, never more than ``limit``); OSError/ValueError else."""
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_size > limit:
            raise ValueError(f"larger than {limit // (1024 * 1024)} MiB")
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise ValueError(f"larger than {limit // (1024 * 1024)} MiB")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _load_dir(d: Path) -> RunRecord | DamagedRecord:
    name = d.name
    if not valid_run_id(name):
        return DamagedRecord(name, "the directory name is not a plain run id")
    p = d / "run.json"
    try:
        raw = _read_bounded(p)
    except FileNotFoundError:
        return DamagedRecord(name, "run.json is missing")
    except OSError as exc:
        why = "a symlink" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
        owner = _foreign_owner(p) if exc.errno in (errno.EACCES, errno.EPERM) else None
        return DamagedRecord(name, f"run.json cannot be read ({why})", owner)
    except ValueError as exc:
        return DamagedRecord(name, f"run.json is {exc}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return DamagedRecord(name, "run.json is not UTF-8 text")
    if not text.strip():
        return DamagedRecord(name, "run.json is empty")
    try:
        record = RunRecord.model_validate_json(text)
    except ValueError as exc:
        first = str(exc).splitlines()
        detail = "; ".join(x.strip() for x in first[1:3]) if len(first) > 1 else (first[0] if first else "invalid")
        return DamagedRecord(name, f"run.json is invalid: {detail[:200]}")
    if record.run_id != name:
        return DamagedRecord(name, f"run.json names run {record.run_id!r}, not its directory {name!r}")
    return record


def scan_runs() -> tuple[list[RunRecord], list[DamagedRecord]]:
    """Every recorded run, and the run directories whose record is damaged (one bad record spoils nothing)."""
    root = runs_dir()
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except FileNotFoundError:
        return [], []
    except OSError as exc:
        raise VerlctlError(f"cannot read the run records under {root}: {exc.strerror or exc}") from None
    good: list[RunRecord] = []
    bad: list[DamagedRecord] = []
    for e in entries:
        try:
            if not e.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        loaded = _load_dir(Path(e.path))
        (good if isinstance(loaded, RunRecord) else bad).append(loaded)  # type: ignore[arg-type]
    return sorted(good, key=lambda r: r.created_at), bad


def load_run(run_id: str) -> RunRecord:
    if not valid_run_id(run_id):
        raise VerlctlError(f"no run {run_id!r} under {runs_dir()} (see `verlctl list`)")
    loaded = _load_dir(runs_dir() / run_id)
    if isinstance(loaded, DamagedRecord):
        if loaded.reason == "run.json is missing" and not (runs_dir() / run_id).is_dir():
            raise VerlctlError(f"no run {run_id!r} under {runs_dir()} (see `verlctl list`)")
        raise VerlctlError(loaded.message)
    return loaded


def all_runs() -> list[RunRecord]:
    return scan_runs()[0]


def run_id_matches(run_id: str, given: str) -> bool:
    """Whether ``given`` names ``run_id``: the whole id, its start (the time stamp) or its end (the random
    suffix, with or without its dash)."""
    return bool(given) and (run_id.startswith(given) or run_id.endswith(given))


def resolve_run(run_id: str | None) -> RunRecord:
    """A run by id, or by a part that only one run's id starts or ends with (``20261206-1043`` or the random
    suffix ``1a9f``); the newest run when none is given. A damaged record is named. Every command's ``RUN``
    argument is resolved here."""
    runs, damaged = scan_runs()
    if not runs and not damaged:
        raise VerlctlError(f"no runs recorded under {runs_dir()}: start one with `verlctl launch`")
    if run_id is None:
        if not runs:
            raise VerlctlError(damaged[-1].message, hint="see `verlctl list`")
        return runs[-1]
    exact = [r for r in runs if r.run_id == run_id]
    if exact:
        return exact[0]
    bad_exact = [d for d in damaged if d.run_id == run_id]
    if bad_exact:
        raise VerlctlError(bad_exact[0].message, hint=bad_exact[0].hint)
    matches = [r.run_id for r in runs if run_id_matches(r.run_id, run_id)]
    bad = [d for d in damaged if run_id_matches(d.run_id, run_id)]
    if len(matches) == 1 and not bad:
        return next(r for r in runs if r.run_id == matches[0])
    if len(bad) == 1 and not matches:
        raise VerlctlError(bad[0].message, hint=bad[0].hint)
    if not matches and not bad:
        raise VerlctlError(f"no run {run_id!r} (see `verlctl list`)")
    names = matches + [d.run_id for d in bad]
    raise VerlctlError(f"run id {run_id!r} is ambiguous: {', '.join(names[:5])}")


# ------------------------------------------------------------------ whose record is it (A1)


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (KeyError, OSError, ImportError):
        return f"uid {uid}"


def record_trust(record: RunRecord) -> tuple[str | None, list[str]]:
    """Whether this user may act on the processes a record names: (why not, or None; warnings).

    A record is only as trustworthy as the files it is read from: one owned by another user, or kept where
    another user can write (a world-writable run directory, or a world-writable runs directory without the
    sticky bit), may name any process (pid and start time are world-readable). Such records are refused.
    A group-writable place is a warning (with a private user group it is harmless)."""
    me = os.geteuid()
    trusted = {me, 0}
    warnings: list[str] = []
    d = runs_dir() / record.run_id
    checks = [(runs_dir(), "the runs directory", True), (d, "the run's directory", False),
              (d / "run.json", "run.json", False)]
    for path, what, sticky_ok in checks:
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{what} {path} cannot be checked ({exc.strerror or exc})", warnings
        if stat.S_ISLNK(st.st_mode):
            return f"{what} {path} is a symlink", warnings
        if st.st_uid not in trusted:
            return f"{what} {path} belongs to {_owner_name(st.st_uid)}, not to this user", warnings
        shared = st.st_mode & stat.S_IWOTH
        if shared and not (sticky_ok and st.st_mode & stat.S_ISVTX):
            return f"{what} {path} is writable by every user (mode {stat.S_IMODE(st.st_mode):o})", warnings
        if st.st_mode & stat.S_IWGRP and not (sticky_ok and st.st_mode & stat.S_ISVTX):
            warnings.append(f"{what} {path} is writable by its group (mode {stat.S_IMODE(st.st_mode):o}): "
                            "anyone in that group could change the record")
    return None, warnings


# ------------------------------------------------------------------ one watcher, one writer (A7)

WATCH_LOCK = "watcher.lock"
RECORD_LOCK = "record.lock"


def _lock_fd(path: Path) -> int:
    """A lock file in a run's directory, opened without following a planted symlink."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def hold_watch_lock(record: RunRecord) -> int:
    """Become the run's one watcher: an exclusive flock on ``watcher.lock`` in the run's directory, held (by
    the returned descriptor) while this process lives. A second watcher of the run is refused, naming the
    first; the lock ends with its holder, however it ends (no stale lock after a kill -9)."""
    import fcntl

    path = record.dir / WATCH_LOCK
    try:
        fd = _lock_fd(path)
    except OSError as exc:
        raise VerlctlError(f"cannot open {path} ({exc.strerror or exc}): not watching") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
        os.close(fd)
        who = f"pid {holder}" if holder.isdigit() else "another process"
        raise VerlctlError(f"run {record.run_id} is already watched ({who}): one watcher per run",
                           hint=f"follow it with `verlctl logs -f {record.run_id}` or `verlctl status "
                                f"{record.run_id}`; its watcher's output is in {record.dir / 'watcher.log'}") from None
    except OSError as exc:
        os.close(fd)
        raise VerlctlError(f"cannot lock {path} ({exc.strerror or exc}): not watching") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


@contextlib.contextmanager
def record_lock(record: RunRecord, timeout: float = 120.0) -> Any:
    """Exclusive use of the run's record (``record.lock``): a relaunch (start an attempt, save it) and
    `stop`'s mark never interleave, so no attempt is lost and no stop is overwritten. Waits up to
    ``timeout`` for the holder."""
    import fcntl

    path = record.dir / RECORD_LOCK
    try:
        fd = _lock_fd(path)
    except OSError as exc:
        raise VerlctlError(f"cannot open {path} ({exc.strerror or exc})") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise VerlctlError(f"run {record.run_id}: its record stayed locked for {timeout:g}s "
                                       "(a relaunch in progress?)", hint="try again in a minute") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
