"""``verlctl export rayjob`` / ``export volcano``: the run as a KubeRay RayJob or a Volcano Job (plus a ConfigMap
with the two launch scripts), through one exporter."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from verlctl.commands.options import Force, SpecFile, SpecFlags, out_path, with_spec_flags

#: The options both manifest exports take (the help of each export's --out and --nodes says what it writes).
DeviceResource = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--device-resource", help="The device plugin's resource (default: huawei.com/Ascend910 on "
                 "NPU, nvidia.com/gpu on GPU).", show_default=False),
]
Pvc = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--pvc", help="PersistentVolumeClaim for the checkpoints (kubernetes.pvc).", show_default=False),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the manifest path and the kubectl command; write nothing.")
]
AsJson = Annotated[
    bool, typer.Option("--json", help="Print one JSON object (the manifest written, the kubectl command, the "
                                      "findings); the other lines go to stderr.")
]


@with_spec_flags
def rayjob(
    flags: SpecFlags,
    config: SpecFile = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="The manifest file to write (ConfigMap + RayJob).", show_default=False,
                     parser=out_path),
    ] = None,
    force: Force = False,
    nodes: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--nodes", help="Worker pods, each with every device of cluster.devices "
                     "(default: the number of cluster.nodes, else 1).", show_default=False),
    ] = None,
    device_resource: DeviceResource = None,
    pvc: Pvc = None,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> int:
    """Write the run as a KubeRay RayJob: head + worker pods, devices, /dev/shm, checkpoints on a PVC."""
    from verlctl.errors import VerlctlError

    if out is None:
        raise VerlctlError("-o: give the manifest file to write, e.g. -o rayjob.yaml")
    target = _check_target(out, force)
    values, names = dict(flags[0]), dict(flags[1])
    for path, value, flag in (("kubernetes.device_resource", device_resource, "--device-resource"),
                              ("kubernetes.pvc", pvc, "--pvc")):
        if value is not None:
            values[path], names[path] = value, flag
    return _export(config, values, names, nodes, target, dry_run, as_json)


@with_spec_flags
def volcano(
    flags: SpecFlags,
    config: SpecFile = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="The manifest file to write (ConfigMaps + Volcano Job).", show_default=False,
                     parser=out_path),
    ] = None,
    force: Force = False,
    nodes: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--nodes", help="Pods, each with every device of cluster.devices, one per host (default: the "
                     "number of cluster.nodes, else 1).", show_default=False),
    ] = None,
    device_resource: DeviceResource = None,
    pvc: Pvc = None,
    queue: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--queue", help="Volcano queue (kubernetes.queue, default: default).", show_default=False),
    ] = None,
    dry_run: DryRun = False,
    as_json: AsJson = False,
) -> int:
    """Write the run as a Volcano Job: gang-scheduled pods, devices, /dev/shm, checkpoints on a PVC, restarts that
    resume; on NPU, the labels and rank-table ConfigMap MindCluster reads."""
    from verlctl.errors import VerlctlError

    if out is None:
        raise VerlctlError("-o: give the manifest file to write, e.g. -o volcano-job.yaml")
    target = _check_target(out, force, "volcano-job.yaml")
    values, names = dict(flags[0]), dict(flags[1])
    for path, value, flag in (("kubernetes.device_resource", device_resource, "--device-resource"),
                              ("kubernetes.pvc", pvc, "--pvc"), ("kubernetes.queue", queue, "--queue")):
        if value is not None:
            values[path], names[path] = value, flag
    return _export(config, values, names, nodes, target, dry_run, as_json, fmt="volcano")


def _check_target(out: Path, force: bool = False, example: str = "rayjob.yaml") -> Path:
    """-o names a file to create, or to replace with --force: never a directory or a special file, in a
    directory that exists (:func:`verlctl.files.check_out_file`)."""
    from verlctl.files import check_out_file

    return check_out_file(out, force, example=example).absolute()


def _export(config: Path | None, values: dict[str, Any], names: dict[str, str], nodes: int | None,
            target: Path, dry_run: bool, as_json: bool = False, fmt: str = "rayjob") -> int:
    """Through the manifest backend of ``fmt`` (``backends/kuberay.py``): prepare the manifest, then write it."""
    import shlex

    from rich.console import Console

    from verlctl.backends.kuberay import KubeRayExport, resolve
    from verlctl.orchestrator.runs import ManifestRun
    from verlctl.render import rayjob
    from verlctl.report import print_findings

    resolved, nodes = resolve(config, values, names, nodes, fmt)
    backend = ManifestRun(fmt)
    request = backend.prepare(resolved, KubeRayExport(target, nodes, dry_run))
    console = Console(stderr=as_json)
    findings = [f.model_dump(mode="json") for f in backend.findings]
    if request.blocked:
        print_findings(console, backend.findings)
        if as_json:
            from verlctl.errors import VerlctlError

            exc = VerlctlError("the spec has errors (listed above); nothing was written")
            exc.details = {"written": None, "findings": findings}
            raise exc
        sys.stderr.write("error: the spec has errors (listed above); nothing was written\n")
        return 2
    spec, opts, kinds, apply = (backend.extra[k] for k in ("spec", "opts", "kinds", "apply"))
    print_findings(console, backend.findings)
    # plain lines: the commands in them must survive copy and paste (no wrapping); on stderr with --json
    say = _say_err if as_json else _say
    say(request.plan[0].text)
    doc = {"written": None, "manifest": str(target), "kinds": kinds, "apply": apply, "dry_run": dry_run,
           "findings": findings}
    if dry_run:
        say(f"would write {target} ({kinds})")
        say(f"would run: {apply}")
        say("dry run: nothing written")
        if as_json:
            _say(json.dumps(doc, indent=2))
        return 0
    backend.submit(request)
    doc["written"] = str(target)
    say(f"wrote {target} ({kinds})")
    say(f"apply it with: {apply}")
    sw = spec.logging.swanlab
    if sw.enabled and sw.mode == "cloud":
        secret = shlex.quote(opts.swanlab_secret)
        say(f"the pods read the SwanLab key from Secret {opts.swanlab_secret} (key {rayjob.SECRET_KEY}); create it "
            f"once: printf %s \"$SWANLAB_API_KEY\" | kubectl create secret generic {secret} "
            f"--from-file={rayjob.SECRET_KEY}=/dev/stdin")
    say("the pods read paths.model, paths.train_files and paths.val_files: they must exist in the image or on a "
        "volume you add")
    if as_json:
        _say(json.dumps(doc, indent=2))
    return 0


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")


def _say_err(line: str) -> None:
    sys.stderr.write(line + "\n")
