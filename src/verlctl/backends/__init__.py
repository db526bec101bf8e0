"""Every backend behind one interface (``backends/base.py``); this module picks one.

``backend_named("slurm")`` for a launch, ``backend_for(record)`` for a recorded run; ``run_status`` /
``show_logs`` / ``stop_run`` / ``watch_run`` are what ``status``, ``logs``, ``stop`` and ``watch`` call: they
talk to the interface, never to a backend's own module. Backends load on first use (CLI start-up stays fast).
"""

from __future__ import annotations

from typing import Any

from verlctl.backends.base import Backend
from verlctl.errors import VerlctlError

#: ``launch --backend`` names: local covers one host's Docker, Docker on SSH nodes, and the host runtime.
NAMES = ("local", "slurm", "kuberay", "volcano")


def backend_named(name: str, console: Any = None) -> Backend:
    if name == "local":
        from verlctl.backends.docker import DockerBackend

        return DockerBackend(console)
    if name == "slurm":
        from verlctl.backends.slurm import SlurmBackend

        return SlurmBackend(console)
    if name == "kuberay":
        from verlctl.backends.kuberay import KubeRayBackend

        return KubeRayBackend(console)
    if name == "volcano":
        from verlctl.backends.kuberay import VolcanoBackend

        return VolcanoBackend(console)
    raise VerlctlError(f"--backend {name!r}: give {', '.join(NAMES[:-1])} or {NAMES[-1]}")


def backend_for(record: Any, console: Any = None) -> Backend:
    """The backend that launched a recorded run (its ``runtime``: docker, host or slurm)."""
    return backend_named("slurm" if record.runtime == "slurm" else "local", console)


def run_status(run_id: str | None) -> dict[str, Any]:
    """``verlctl status``: the run's backend reads its state."""
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return backend_for(record).status(record)


def show_logs(run_id: str | None, follow: bool, lines: int) -> int:
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return backend_for(record).logs(record, follow, lines)


def stop_run(run_id: str | None, remove_container: bool, grace: float, console: Any = None) -> dict[str, Any]:
    from verlctl.runtime.records import resolve_run

    record = resolve_run(run_id)
    return backend_for(record, console).stop(record, remove_container, grace, console)
