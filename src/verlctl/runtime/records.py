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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Field, field_validator

from verlctl.errors import VerlctlError
from verlctl.runtime.procscan import PID_MAX_LIMIT

if TYPE_CHECKING:
    from collections.abc import Mapping

    from verlctl.runtime.executor import GroupRef
    from verlctl.spec.resolve import ResolvedSpec

RUN_ID_RE = re.compile(r"[A-Za-z0-9_.-]+")
MAX_RECORD_BYTES = 4 * 1024 * 1024  # a run.json is a few kB: anything larger is damaged, not read
# A process group id that names one group: not 0 (the caller's own), not 1 (kill(-1): every process), not < 0.
Pgid = Annotated[int, Field(gt=1, le=PID_MAX_LIMIT)]


#: The names a run's log file may end with (``verlctl-<run>.log``, the trainer's ``<experiment>.log``,
#: a Slurm job's ``slurm-<job>.out``).
LOG_SUFFIXES = (".log", ".out")


def trusted_uids() -> frozenset[int]:
    """Whose files a record may be made of: this user's, and root's (who can change anything anyway)."""
    return frozenset({os.geteuid(), 0})


class ForeignFile(PermissionError):
    """A file of a run's directory that is another user's: never read as the record's, never written."""


def own_run_dir(d: Path, create: bool = True) -> Path:
    """``d`` (a run's directory, or one inside it) as a directory this user may keep a record in: created 0700
    (whatever the umask) when missing and ``create``; else not a symlink, this user's (or root's), writable by
    no other user. An OSError naming it otherwise (FileNotFoundError: missing, not created)."""
    if create:
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=0o700, parents=True)
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(errno.ENOTDIR, "it is a symbolic link or not a directory: refused to write into it", str(d))
    if st.st_uid not in trusted_uids():
        raise ForeignFile(errno.EPERM, f"it belongs to {owner_name(st.st_uid)}: refused to write into it", str(d))
    if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_uid != os.geteuid()):
        raise ForeignFile(errno.EPERM, f"other users can write it (mode {stat.S_IMODE(st.st_mode):o}): refused to "
                          "write into it", str(d))
    return d


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
        self.write_file("run.json", self.model_dump_json(indent=2).encode("utf-8"))

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one event to events.jsonl (never rewritten, never through a symlink planted there)."""
        ev = {"time": time.time(), "run": self.run_id, "event": kind, **data}
        line = (json.dumps(ev, default=str) + "\n").encode("utf-8")
        fd = self.open_file("events.jsonl", "append")
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return ev

    def open_file(self, name: str, how: str) -> int:
        """The one way a file of the run's own directory is opened for writing (``how``: "append", "write",
        which empties it, or "lock": read-write, kept as it is): ``name`` a plain name or ``attempt-N/name``; every directory on the way is this
        user's (created 0700), the file is never reached through a symlink, is a regular file of this user's
        (or root's), and is created 0600. An OSError naming the file else. The caller closes the descriptor."""
        path = self._own_path(name)
        flags = (os.O_RDWR if how == "lock" else os.O_WRONLY) | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        flags |= os.O_APPEND if how == "append" else 0
        try:
            fd = os.open(path, flags, 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # an OSError like any other write failure: callers warn and go on
                raise OSError(errno.ELOOP, "it is a symbolic link: refused to write through it", str(path)) from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise OSError(errno.EINVAL, "it is not a regular file: refused to write to it", str(path))
            if st.st_uid not in trusted_uids():
                raise ForeignFile(errno.EPERM, f"it belongs to {owner_name(st.st_uid)}: refused to write to it",
                                  str(path))
            if how == "write":
                os.ftruncate(fd, 0)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def write_file(self, name: str, data: bytes) -> Path:
        """Replace the run-directory file ``name`` (a plain name or ``attempt-N/name``) with ``data`` as one
        step: a new 0600 file (``O_EXCL``: never a planted link or file) in a directory of this user's (see
        :meth:`open_file`), renamed over the old name; never a torn copy (a full disk: OSError, the old kept)."""
        from verlctl.files import write_file

        return write_file(self._own_path(name), data, 0o600)

    def _own_path(self, name: str) -> Path:
        """Where ``name`` is written; the run's directory is made only by :meth:`save` (a watcher whose directory
        was removed under it is told so by the OSError, and writes the record again: orchestrator/watcher.py)."""
        parts = name.split("/")
        if not 1 <= len(parts) <= 2 or not all(valid_run_id(x) for x in parts):
            raise ValueError(f"{name[:80]!r} is not a file name in the run's directory")
        d = own_run_dir(self.dir, create=name == "run.json")
        for sub in parts[:-1]:
            d = own_run_dir(d / sub)
        return d / parts[-1]

    def read_file(self, name: str, limit: int = MAX_RECORD_BYTES) -> bytes:
        """One plain file of the run's own directory (``name`` a plain name; never through a symlink, never a
        FIFO or a device, at most ``limit`` bytes): OSError/ValueError when it cannot be read so."""
        if not valid_run_id(name):
            raise ValueError(f"{name[:80]!r} is not a file name in the run's directory")
        return _read_bounded(self.dir / name, limit)

    def load_spec(self, recovery: Mapping[str, Any] | None = None) -> ResolvedSpec:
        """The run's resolved spec (``spec.resolved.yaml``), read through :meth:`read_file` (this user's file,
        never through a link): what a watch or a relaunch runs. A VerlctlError when it cannot be read so."""
        from verlctl.spec.resolve import load_spec
        from verlctl.spec.sources import MAX_SPEC_BYTES

        refusal, _warnings = record_trust(self)  # the record as it is now: its directory may have changed
        if refusal is not None:
            raise VerlctlError(f"run record {self.dir} is not trusted: {refusal}: nothing was run",
                               hint=DamagedRecord(self.run_id, refusal, refused=True).hint)
        path = self.dir / self.spec_file
        try:
            raw = self.read_file(self.spec_file, MAX_SPEC_BYTES)
        except FileNotFoundError:
            raise VerlctlError(f"spec file not found: {path}") from None
        except (OSError, ValueError) as exc:
            why = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
            raise VerlctlError(f"cannot read the run's spec {path}: {why}: nothing was run") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise VerlctlError(f"the run's spec {path} is not UTF-8 text: nothing was run") from None
        return load_spec(path, use_env=False, recovery=recovery, file_text=text)

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
        self.write_file("status.json", json.dumps(status, default=str).encode("utf-8"))

    def read_status(self) -> dict[str, Any] | None:
        try:
            data = json.loads(self.read_file("status.json").decode("utf-8", errors="replace"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None


@dataclass
class DamagedRecord:
    """A run directory whose run.json cannot be used; listed, never acted on."""

    run_id: str  # the directory name
    reason: str
    owner: str | None = None  # set when the record is another user's, unreadable by this one: not damaged
    refused: bool = False  # not trusted (record_refusal): another user's files, or a place others can write

    @property
    def message(self) -> str:
        if self.refused:
            return (f"run record {runs_dir() / self.run_id} is not trusted: {self.reason}: nothing was read from it "
                    "or run")
        if self.owner is not None:
            return f"run record {runs_dir() / self.run_id / 'run.json'} belongs to {self.owner}: not readable by you"
        return f"run record {runs_dir() / self.run_id / 'run.json'} is damaged: {self.reason}"

    @property
    def summary(self) -> str:
        """The record's state in one cell of `verlctl list`."""
        if self.refused:
            return f"not trusted: {self.reason}"
        return f"{self.owner}'s: not readable by you" if self.owner is not None else f"damaged: {self.reason}"

    @property
    def hint(self) -> str:
        if self.refused:
            return ("a record is used only when this user (or root) owns it, its directory and the paths it names, "
                    "and no other user can write where it is kept: run verlctl as that record's owner, or keep "
                    "your runs in a state dir of your own (VERLCTL_STATE_DIR)")
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
    """A regular file's bytes (never through a symlink, never more than ``limit``, never another user's: a
    :class:`ForeignFile`); OSError/ValueError else."""
    fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        if st.st_uid not in trusted_uids():
            raise ForeignFile(errno.EPERM, f"it belongs to {owner_name(st.st_uid)}, not to this user", str(p))
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
    refusal, _warnings = place_trust(d)
    if refusal is not None:
        return DamagedRecord(name, refusal, refused=True)
    try:
        raw = _read_bounded(p)
    except FileNotFoundError:
        return DamagedRecord(name, "run.json is missing")
    except ForeignFile as exc:
        return DamagedRecord(name, f"run.json {exc.strerror}", refused=True)
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
    refusal = path_refusal(record)
    if refusal is not None:
        return DamagedRecord(name, refusal, refused=True)
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
            if e.is_symlink() and e.is_dir():  # listed as refused: never taken for a record, never silently left
                bad.append(DamagedRecord(e.name, f"the run's directory {e.path} is a symlink", refused=True))
                continue
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
            raise VerlctlError(damaged[-1].message, hint=damaged[-1].hint if damaged[-1].refused else "see `verlctl list`")
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


# ------------------------------------------------------------------ whose record is it (A1, the one gate)
#
# Every record is read through _load_dir (load_run, resolve_run, scan_runs, all_runs: status, logs, stop,
# watch and its relaunch, report, bundle, export-hf, list, launch's checks of other runs), and _load_dir refuses
# a record that is not trusted: nothing of it is read further, nothing it names is run or signalled.


def place_trust(d: Path) -> tuple[str | None, list[str]]:
    """Whether the run directory ``d`` is a place this user may take a record from: (why not, or None;
    warnings). Refused: the runs directory writable by every user without the sticky bit, or by a group of a
    directory this user does not own; the run's directory a symlink, another user's, writable by every user,
    or by a group when it is not this user's. A group-writable run directory of this user's is a warning
    (each file in it is still read only when it is this user's)."""
    me = os.geteuid()
    warnings: list[str] = []
    for path, what, is_run_dir in ((d.parent, "the runs directory", False), (d, "the run's directory", True)):
        try:
            st = os.lstat(path) if is_run_dir else os.stat(path)
        except OSError as exc:
            return f"{what} {path} cannot be checked ({exc.strerror or exc})", warnings
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            return f"{what} {path} is a symlink", warnings
        if is_run_dir and st.st_uid not in trusted_uids():
            return f"{what} {path} belongs to {owner_name(st.st_uid)}, not to this user", warnings
        sticky = not is_run_dir and st.st_mode & stat.S_ISVTX
        if st.st_mode & stat.S_IWOTH and not sticky:
            return f"{what} {path} is writable by every user (mode {mode:o})", warnings
        if st.st_mode & stat.S_IWGRP and not sticky:
            if st.st_uid != me:
                return (f"{what} {path} is writable by its group and belongs to {owner_name(st.st_uid)} "
                        f"(mode {mode:o})"), warnings
            warnings.append(f"{what} {path} is writable by its group (mode {mode:o}): anyone in that group "
                            "could change the record (only this user's files in it are read)")
    return None, warnings


#: The paths of a record that name files on this host, by runtime (a container's paths are inside it; its
#: logs may be read from this host once the container is gone).
HOST_PATH_FIELDS = {"host": ("workdir", "scripts_dir", "run_log", "train_log"),
                    "slurm": ("workdir", "scripts_dir", "run_log", "train_log")}
DEFAULT_HOST_PATH_FIELDS = ("run_log", "train_log")


def _foreign_path(p: Path) -> str | None:
    """Why ``p`` is another user's (it, or the nearest directory above it that exists), else None."""
    q = p
    while True:
        try:
            uid = os.lstat(q).st_uid
        except OSError:
            if q.parent == q:
                return None
            q = q.parent
            continue
        if uid not in trusted_uids():
            return f"{q} belongs to {owner_name(uid)}" if q == p else f"its directory {q} belongs to {owner_name(uid)}"
        return None


def path_refusal(record: RunRecord) -> str | None:
    """Why a record's paths are not this user's to act on: a ``..`` component (a path that leaves the
    directory it names), or a path on this host (workdir, scripts_dir, run_log, train_log; a container's
    paths only for its logs) that belongs to another user. None when every one is fine."""
    for field in HOST_PATH_FIELDS.get(record.runtime, DEFAULT_HOST_PATH_FIELDS):
        value = getattr(record, field)
        if not value:
            continue
        if ".." in value.split("/"):
            return f"its {field} {value[:120]} leaves its directory (a '..' component)"
        if not value.startswith("/"):
            continue
        why = _foreign_path(Path(value))
        if why is not None:
            return f"its {field}: {why[:200]}, not to this user"
    return None


def record_trust(record: RunRecord) -> tuple[str | None, list[str]]:
    """The gate once more, on a record already loaded (it may have changed since): (why not, or None;
    warnings to show, e.g. a group-writable run directory of this user's)."""
    refusal, warnings = place_trust(record.dir)
    return refusal or path_refusal(record), warnings


# ------------------------------------------------------------------ one watcher, one writer (A7)

WATCH_LOCK = "watcher.lock"
RECORD_LOCK = "record.lock"


def _lock_fd(record: RunRecord, name: str) -> int:
    """A lock file in a run's directory, through the one helper (no planted symlink followed, this user's)."""
    fd = record.open_file(name, "lock")
    os.set_blocking(fd, True)
    return fd


def hold_watch_lock(record: RunRecord) -> int:
    """Become the run's one watcher: an exclusive flock on ``watcher.lock`` in the run's directory, held (by
    the returned descriptor) while this process lives. A second watcher of the run is refused, naming the
    first; the lock ends with its holder, however it ends (no stale lock after a kill -9)."""
    import fcntl

    path = record.dir / WATCH_LOCK
    try:
        fd = _lock_fd(record, WATCH_LOCK)
    except (OSError, ValueError) as exc:
        raise VerlctlError(f"cannot open {path} ({getattr(exc, 'strerror', None) or exc}): not watching") from None
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
        fd = _lock_fd(record, RECORD_LOCK)
    except (OSError, ValueError) as exc:
        raise VerlctlError(f"cannot open {path} ({getattr(exc, 'strerror', None) or exc})") from None
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
