"""``verlctl export slurm``: the run as a Slurm batch script (sbatch), from the same spec flags as ``plan``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from verlctl.commands.options import Force, SpecFile, SpecFlags, out_path, with_spec_flags


@with_spec_flags
def export_slurm(
    flags: SpecFlags,
    config: SpecFile = None,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="Write the batch script to this file (default: print it).", parser=out_path),
    ] = None,
    force: Force = False,
    nodes: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--nodes", "-N", help="Number of nodes (cluster.nnodes; default: the hosts in cluster.nodes, "
                     "which become the job's --nodelist, else 1).", show_default=False),
    ] = None,
    partition: Annotated[Optional[str], typer.Option(help="Slurm partition.")] = None,  # noqa: UP045
    time: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--time", "-t", help="Time limit (MINUTES, HH:MM:SS, D-HH:MM:SS)."),
    ] = None,
    gres: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(help="GRES name[:type] of the devices; the count is the devices per node. GPUs: gpu "
                     "(default) or gpu:TYPE; NPUs: the site's name (default: whole nodes, --exclusive)."),
    ] = None,
    cpus_per_task: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--cpus-per-task", help="CPUs of each node's step (Ray counts what the step may use)."),
    ] = None,
    exclusive: Annotated[bool, typer.Option("--exclusive", help="Take whole nodes.")] = False,
    output: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--output", help="The job's output file (sbatch --output; %j is the job id)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (the file written, or the script when no -o; "
                                          "the notes and findings).")
    ] = False,
) -> int:
    """Write an sbatch script that runs the plan's two scripts on a Slurm allocation (Ray head, then workers)."""
    from verlctl.checks.findings import has_errors
    from verlctl.errors import VerlctlError
    from verlctl.plan import make_plan
    from verlctl.render.render import render
    from verlctl.render.slurm import SlurmOptions, check_options, ray_port_args, render_sbatch
    from verlctl.report import print_findings
    from verlctl.runtime.slurm import docker_step_args, docker_step_driver_mounts
    from verlctl.spec.resolve import load_spec

    opts = SlurmOptions(partition=partition, time=time, gres=gres, cpus_per_task=cpus_per_task,
                        exclusive=exclusive, output=output)
    values, names = dict(flags[0]), dict(flags[1])
    if nodes is not None:
        if nodes < 1:
            raise VerlctlError(f"--nodes {nodes}: a job needs at least one node; give --nodes 1 or more")
        values["cluster.nnodes"] = nodes
        names["cluster.nnodes"] = "--nodes"
    resolved = load_spec(config, flags=values, flag_names=names)
    spec = resolved.spec
    check_options(opts, spec.device)
    the_plan = make_plan(resolved)
    findings = [f.model_dump(mode="json") for f in the_plan.findings]
    if has_errors(the_plan.findings):
        from rich.console import Console

        print_findings(Console(stderr=True), the_plan.findings)
        if as_json:
            exc = VerlctlError("the spec has errors (listed above); nothing was written")
            exc.details = {"written": None, "findings": findings}
            raise exc
        sys.stderr.write("error: the spec has errors (listed above); nothing was written\n")
        return 2
    c = spec.cluster
    rendered = render(resolved, the_plan.command, tuple(ray_port_args(c.ray_port, c.dashboard_port, c.ray_start_args)))
    docker = spec.container.runtime == "docker"
    job = render_sbatch(
        rendered,
        nnodes=c.node_count,
        nodelist=list(c.nodes),
        devices_per_node=len(c.devices),
        device=spec.device,
        master_addr=c.master_addr if c.master_addr and resolved.explicit("cluster.master_addr") else "",
        ray_port=c.ray_port,
        join_timeout=c.join_timeout_s,
        experiment=spec.logging.experiment or "verl",
        opts=opts,
        docker_args=docker_step_args(spec) if docker else None,
        image=spec.container.image if docker else None,
        driver_mounts=docker_step_driver_mounts(spec) if docker else None,
    )
    if out is not None:
        write_script(out, job.script, force)
    if as_json:
        import json

        doc = {"written": str(out) if out is not None else None, "script": None if out is not None else job.script,
               "nodes": c.node_count, "notes": list(job.notes), "findings": findings}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        return 0
    if out is None:
        sys.stdout.write(job.script)
    for note in job.notes:
        sys.stderr.write(f"note: {note}\n")
    if out is not None:
        sys.stderr.write(f"wrote {out}\n")
    return 0


def write_script(out: Path, text: str, force: bool = False) -> None:
    """Atomically, never through a planted symlink, an existing file only with ``force``; a bad path is one
    line naming -o (:func:`verlctl.files.check_out_file`)."""
    from verlctl.errors import VerlctlError
    from verlctl.files import check_out_file, write_file

    check_out_file(out, force, example="job.sbatch")
    try:
        write_file(out, text.encode("utf-8"), 0o755)
    except OSError as exc:
        raise VerlctlError(f"-o {out}: cannot write it ({exc.strerror or exc})") from None
