"""Run records: one directory per launch under the user's state dir, so that status / logs / stop work
later from any shell.

Layout of ``$XDG_STATE_HOME/verlctl/runs/<run id>/`` (``VERLCTL_STATE_DIR`` overrides the root):

* ``run.json``           the handles: runtime, container id, process group, log paths, paths inside the target
* ``spec.resolved.yaml`` the resolved spec (secrets masked), ``start_verl.sh``, ``run_training.sh``
* ``events.jsonl``       append-only events (launch, started, failure, recovery, stop, …)
* ``status.json``        the watcher's live status (step/total, ETA, last metrics), when a watcher runs
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from verlctl.errors import VerlctlError


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
    pgid: int
    started_at: float
    features: list[str] = Field(default_factory=list, description="features on for this attempt")
    reason: str = "launch"
    resumed_from: str | None = None  # checkpoint dir the trainer should resume from
    log_offset: int = 0  # size of the run log when this attempt started


class NodeHandle(BaseModel):
    """A worker node of a multi-node run: where its container is and the process group started there."""

    address: str
    container_id: str | None = None
    container_name: str | None = None
    container_created: bool = False
    pgid: int | None = None


class RunRecord(BaseModel):
    run_id: str
    created_at: float
    runtime: str  # docker | host
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
    pgid: int | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    head_address: str | None = None  # multi-node: the head node (None: this machine)
    workers: list[NodeHandle] = Field(default_factory=list)  # multi-node: the other nodes
    ssh_user: str | None = None
    ssh_port: int | None = None
    remote_docker_socket: str = "/var/run/docker.sock"
    ssh_config: str | None = None
    watcher_pid: int | None = None
    stopped: bool = False
    swanlab_url: str | None = None
    spec_file: str = "spec.resolved.yaml"

    # ------------------------------------------------------------------ persistence

    @property
    def dir(self) -> Path:
        return runs_dir() / self.run_id

    def save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "run.json.tmp"
        tmp.write_text(self.model_dump_json(indent=2), encoding="utf-8")
        os.replace(tmp, self.dir / "run.json")

    def event(self, kind: str, **data: Any) -> dict[str, Any]:
        """Append one event to events.jsonl (never rewritten)."""
        ev = {"time": time.time(), "run": self.run_id, "event": kind, **data}
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "events.jsonl", "a", encoding="utf-8") as fh:
            fh.write(json.dumps(ev, default=str) + "\n")
        return ev

    def events(self) -> list[dict[str, Any]]:
        p = self.dir / "events.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def write_status(self, status: dict[str, Any]) -> None:
        tmp = self.dir / "status.json.tmp"
        tmp.write_text(json.dumps(status, default=str), encoding="utf-8")
        os.replace(tmp, self.dir / "status.json")

    def read_status(self) -> dict[str, Any] | None:
        p = self.dir / "status.json"
        try:
            data: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
            return data
        except (OSError, json.JSONDecodeError):
            return None


def load_run(run_id: str) -> RunRecord:
    p = runs_dir() / run_id / "run.json"
    try:
        return RunRecord.model_validate_json(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VerlctlError(f"no run {run_id!r} under {runs_dir()} (see `verlctl list`)") from None
    except ValueError as exc:
        raise VerlctlError(f"run record {p} is damaged: {str(exc).splitlines()[0]}") from None


def all_runs() -> list[RunRecord]:
    root = runs_dir()
    if not root.is_dir():
        return []
    out = []
    for d in root.iterdir():
        if (d / "run.json").is_file():
            try:
                out.append(RunRecord.model_validate_json((d / "run.json").read_text(encoding="utf-8")))
            except ValueError:
                continue
    return sorted(out, key=lambda r: r.created_at)


def resolve_run(run_id: str | None) -> RunRecord:
    """A run by id (or unique prefix); the newest run when none is given."""
    runs = all_runs()
    if not runs:
        raise VerlctlError(f"no runs recorded under {runs_dir()}: start one with `verlctl launch`")
    if run_id is None:
        return runs[-1]
    exact = [r for r in runs if r.run_id == run_id]
    if exact:
        return exact[0]
    matches = [r for r in runs if r.run_id.startswith(run_id)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise VerlctlError(f"no run {run_id!r} (see `verlctl list`)")
    raise VerlctlError(f"run id {run_id!r} is ambiguous: {', '.join(r.run_id for r in matches[:5])}")
