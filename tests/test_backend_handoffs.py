"""What each non-local backend does with the operations it does not own: a Kubernetes run (KubeRay RayJob or
Volcano Job) leaves status, logs, stop, watch and relaunch to kubectl and says which kubectl command does each; a
Slurm launch interrupted before its job was submitted has nothing to clean up and says so."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from verlctl.backends.base import Change, NotOnBackend
from verlctl.backends.kuberay import KubeRayBackend, VolcanoBackend
from verlctl.backends.slurm import SlurmBackend

#: every operation of the backend interface that acts on a run once it exists, with its arguments
OPERATIONS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "status": ("status", ()),
    "logs": ("log", (True, 50)),
    "stop": ("stop", (False, 10.0, None)),
    "watch": ("watch", (None, print, None)),
    "relaunch": ("relaunch", (Change("device_oom", ("offload",)),)),
}
HINTS = {
    "kuberay": ("kubectl get rayjob job-1; kubectl logs -l ray.io/node-type=head -f; kubectl delete rayjob job-1"),
    "volcano": "kubectl get vcjob job-1; kubectl logs job-1-head-0 -f; kubectl delete vcjob job-1",
}


@pytest.mark.parametrize("backend", [KubeRayBackend, VolcanoBackend], ids=["kuberay", "volcano"])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_kubernetes_runs_operations_are_kubectls_with_the_commands_named(backend: type, operation: str) -> None:
    what, args = OPERATIONS[operation]
    b = backend()
    with pytest.raises(NotOnBackend) as err:
        getattr(b, operation)("job-1", *args)
    assert err.value.message == f"a {b.where} run's {what} is kubectl's: verlctl only writes the manifest"
    assert err.value.hint == HINTS[b.name]


def test_a_slurm_launch_interrupted_before_its_job_was_submitted_changes_nothing() -> None:
    """The launch guard's clean-up (Ctrl-C, a failed verification) of a Slurm launch that had submitted nothing:
    no job to cancel, no record to mark; the one line says so."""
    assert SlurmBackend(Console()).abort("Ctrl-C") == "interrupted (Ctrl-C) before anything was started: nothing changed"


def test_a_slurm_backend_without_a_console_prints_to_one_and_keeps_a_given_one() -> None:
    """``verlctl status`` / ``stop`` / ``watch`` get the run's backend from its record without a console
    (``backends.backend_for``): it prints to the terminal then; a given console (stderr under --json) is kept."""
    assert isinstance(SlurmBackend().console, Console)
    mine = Console(stderr=True)
    assert SlurmBackend(mine).console is mine
