"""The backends: each knows its target (``backends/base.py``'s interface) and nothing of verl; this module picks
one by its ``launch --backend`` name (``orchestrator.runs.run_named`` / ``run_for`` pick a run's verbs).
The orchestrator (``verlctl.orchestrator``: launch, runs, watcher) walks the stages and calls down into them; no
backend imports the orchestrator. Backends load on first use (CLI start-up stays fast).
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
