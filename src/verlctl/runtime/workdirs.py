"""The directories a launch creates, host side and container side (listed in the checklist before "yes")."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _first_missing(path: str) -> str | None:
    """The highest ancestor of ``path`` (or itself) that does not exist on this host; None if it exists."""
    p = Path(path)
    if p.exists():
        return None
    top = p
    for parent in p.parents:
        if parent.exists():
            break
        top = parent
    return str(top)


def directories_to_create(spec: Any, run_id: str) -> list[str]:
    """Every directory a launch of ``spec`` creates, host side and container side, as action lines."""
    from verlctl.runtime.records import runs_dir

    workdir = spec.container.workdir.rstrip("/") or "/"
    docker = spec.container.runtime == "docker"
    outputs = [(spec.paths.checkpoints, "paths.checkpoints"), (spec.paths.logs, "paths.logs")]
    sw = spec.logging.swanlab
    if sw.enabled and sw.mode != "disabled" and sw.log_dir:
        outputs.append((sw.log_dir, "logging.swanlab.log_dir"))
    others = [n for n in spec.cluster.nodes if n != spec.cluster.master_addr] if len(spec.cluster.nodes) > 1 else []
    out: list[str] = []
    for path, why in outputs:
        if not path:
            continue
        if docker and (path == workdir or path.startswith(workdir + "/")):
            out.append(f"create directory {path} inside the container ({why}; not on the host: removed with the "
                       "container)")
            continue
        top = _first_missing(path)
        if top is not None:
            below = f", with {path} below it" if top != path else ""
            mounted = ", mounted into the container at the same path" if docker else ""
            out.append(f"create directory {top} on this host ({why}{below}{mounted})")
        for node in others:
            out.append(f"on {node}: the Docker engine creates {path} if it is missing ({why})")
    where = "inside the container" if docker else "on this host"
    out.append(f"create directory {workdir}/.verlctl/runs/{run_id} {where} (the run's scripts and 0600 env file)")
    out.append(f"create directory {runs_dir() / run_id} on this host (the run record)")
    return out
