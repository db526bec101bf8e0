"""``verlctl check --fabric``: the collective fabric gate (``orchestrator/fabric.py``) in the run's containers as they
are now, found by the launch's own plan; nothing is created or started."""

from __future__ import annotations

from verlctl.checks.findings import Finding
from verlctl.orchestrator.fabric import run_fabric, skipped, wanted


def check_fabric(resolved: object) -> list[Finding]:
    """``verlctl check --fabric``: the gate in the run's containers as they are now (the launch's own plan finds
    them: the head's and every node's); nothing is created or started. A container that is not running is named
    and the test is not run."""
    from rich.console import Console

    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.launch import Launcher, LaunchOptions
    from verlctl.plan import make_plan
    from verlctl.runtime import containers
    from verlctl.runtime.executor import DockerExecutor, Executor, HostExecutor
    from verlctl.spec.resolve import ResolvedSpec

    assert isinstance(resolved, ResolvedSpec)
    spec = resolved.spec
    if not wanted(spec):
        return [skipped("one device takes part" if spec.cluster.fabric.enabled else "cluster.fabric.enabled is false")]
    if spec.container.runtime == "host":
        targets: list[tuple[str, Executor]] = [("", HostExecutor(python_env=spec.container.python_env))]
    else:
        launcher = Launcher(resolved, LaunchOptions(yes=True, dry_run=True), Console(stderr=True, quiet=True))
        try:
            launcher.prepare()
        except VerlctlError as exc:
            return [skipped(exc.message)]
        found = [(spec.cluster.master_addr or "", launcher.client, launcher.container_plan)]
        found += [(w.address, w.client, w.plan) for w in launcher.workers]
        targets = []
        for address, client, plan in found:
            container = containers.find_container(client, plan.name) if client is not None and plan else None
            if container is None or container.status != "running":
                where_ = f" on {address}" if address else ""
                return [skipped(f"the run's container {plan.name if plan else spec.container.name}{where_} is not "
                                "running (launch runs the test itself, once the containers are up)")]
            targets.append((address, DockerExecutor(client, container.id, plan.name)))
    return run_fabric(spec, targets, make_plan(resolved).command.env).findings
