"""The KubeRay backend: the request is the RayJob manifest (a ConfigMap with the plan's two scripts + the
RayJob: head and worker pods, devices, /dev/shm, checkpoints on a PVC; ``render/rayjob.py``). The orchestrator
plans the run (``orchestrator/runs.py``: ``ManifestRun``) and hands this backend verl's command and the verdict's
findings; the backend renders the pods' scripts and the manifest, and writes it. The cluster is kubectl's, so
are status, logs and stop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlctl.backends.base import Action, LaunchRequest
from verlctl.backends.base import Stage as S

#: Findings that do not hold for a RayJob: the SwanLab key comes from a Kubernetes Secret, not from here.
NOT_FOR_RAYJOB = frozenset({"swanlab_api_key"})


@dataclass(frozen=True)
class KubeRayExport:
    target: Path  # the manifest file to write
    nodes: int  # worker pods
    dry_run: bool


def resolve(config: Path | None, values: dict[str, Any], names: dict[str, str], nodes: int | None,
            fmt: str = "rayjob") -> tuple[Any, int]:
    """The spec as the pods run it: ``nodes`` pods holding devices (default: the number of cluster.nodes, else 1),
    named as the format's scheduler names them (verl counts nodes: trainer.nnodes; the names are in the pods'
    resolved spec)."""
    from verlctl.render import rayjob, volcano
    from verlctl.spec.resolve import load_spec

    if nodes is not None:
        rayjob.check_nodes(nodes)
    else:
        nodes = max(1, len(load_spec(config, flags=values, flag_names=names).spec.cluster.nodes))
    pods = volcano.pod_names(nodes) if fmt == "volcano" else rayjob.worker_names(nodes)
    values, names = {**values, "cluster.nodes": pods}, {**names, "cluster.nodes": "--nodes"}
    return load_spec(config, flags=values, flag_names=names), nodes


class KubeRayBackend:
    """A Kubernetes job written as a manifest: the KubeRay RayJob here, the Volcano Job in :class:`VolcanoBackend`."""

    name = "kuberay"
    where = "Kubernetes (KubeRay RayJob)"

    def __init__(self, console: Any = None) -> None:
        self.console = console
        self.extra: dict[str, Any] = {}

    def manifest_request(self, resolved: Any, command: Any, findings: list[Any], options: Any) -> LaunchRequest:
        """The manifest for ``resolved`` (from :func:`resolve`) running verl's ``command`` (the plan's); with an
        error among ``findings`` (the verdict's, planned by the orchestrator), a request with no manifest,
        ``blocked``."""
        import dataclasses
        import shlex

        from verlctl.checks.findings import has_errors
        from verlctl.render import rayjob
        from verlctl.render.render import render

        spec = resolved.spec
        name = rayjob.job_name(spec.logging.experiment)  # the job's name in the cluster: what kubectl takes
        if has_errors(findings):
            return LaunchRequest(self.name, name, self.where, spec.container.workdir, "", "",
                                 blocked=("the spec has errors",))
        opts = self._options(spec, options.nodes)
        # The head pod runs start_verl.sh: it finds its own address (no node list in Kubernetes).
        pod_spec = spec.model_copy(update={"cluster": spec.cluster.model_copy(update={"master_addr": None})})
        rendered = render(dataclasses.replace(resolved, spec=pod_spec), command)
        docs = self._manifests(spec, rendered, opts)
        kinds = ", ".join(f"{d['kind']} {d['metadata']['name']}" for d in docs)
        per_node = len(spec.cluster.devices)
        apply = f"kubectl apply --filename={shlex.quote(str(options.target))}"
        self.extra = {"kinds": kinds, "apply": apply, "opts": opts, "spec": spec}
        plan = (
            Action(S.WRITE_MANIFEST, f"{options.nodes} {self.pods_are} x {per_node} {opts.device_resource} = "
                                     f"{options.nodes * per_node} devices; checkpoints on PVC {opts.pvc} at "
                                     f"{spec.paths.checkpoints}"),
            Action(S.WRITE_MANIFEST, f"write {options.target} ({kinds})"),
            Action(S.SUBMIT, f"run: {apply} (yours: verlctl does not talk to the cluster)"),
        )
        return LaunchRequest(self.name, name, self.where, spec.container.workdir, "", "",
                             files=dict(rendered.files), env_file_names=tuple(sorted(rendered.command.env_file)),
                             manifest=rayjob.dump(docs), stages=(S.WRITE_MANIFEST, S.SUBMIT), plan=plan)

    def write_manifest(self, request: LaunchRequest, target: Path) -> Path:
        """Write the request's manifest to ``target`` (atomically, never through a planted symlink)."""
        from verlctl.errors import VerlctlError
        from verlctl.files import write_file

        if request.manifest is None:
            raise ValueError("write_manifest() takes an unblocked request")  # a programming error
        try:
            write_file(target, request.manifest.encode("utf-8"), 0o644)
        except OSError as exc:
            raise VerlctlError(f"-o {target}: cannot write it: {exc.strerror or exc}") from None
        return target

    pods_are = "worker pod(s)"

    def _options(self, spec: Any, nodes: int) -> Any:
        from verlctl.render import rayjob

        return rayjob.options_for(spec, nodes)

    def _manifests(self, spec: Any, rendered: Any, opts: Any) -> list[dict[str, Any]]:
        from verlctl.render import rayjob

        return rayjob.manifests(spec, rendered, opts)

    def kubectl_hint(self, handle: Any) -> str:
        return (f"kubectl get rayjob {handle}; kubectl logs -l ray.io/node-type=head -f; "
                f"kubectl delete rayjob {handle}")


class VolcanoBackend(KubeRayBackend):
    """The run as a Volcano Job (``render/volcano.py``): gang-scheduled pods that each run ``start_verl.sh``; on
    NPU with the labels and the rank-table ConfigMap MindCluster reads."""

    name = "volcano"
    where = "Kubernetes (Volcano Job)"
    pods_are = "pod(s)"

    def _options(self, spec: Any, nodes: int) -> Any:
        from verlctl.render import volcano

        return volcano.options_for(spec, nodes)

    def _manifests(self, spec: Any, rendered: Any, opts: Any) -> list[dict[str, Any]]:
        from verlctl.render import volcano

        return volcano.manifests(spec, rendered, opts)

    def kubectl_hint(self, handle: Any) -> str:
        return f"kubectl get vcjob {handle}; kubectl logs {handle}-head-0 -f; kubectl delete vcjob {handle}"
