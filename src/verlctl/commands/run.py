"""``verlctl launch``, ``status``, ``logs``, ``stop``, ``list``, ``quickstart``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from verlctl.commands.options import (
    Force,
    JsonOut,
    RunArg,
    SpecFile,
    SpecFlags,
    Verbose,
    check_seconds,
    out_path,
    with_spec_flags,
)


@with_spec_flags
def launch(
    flags: SpecFlags,
    config: SpecFile = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (needs a complete spec).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every action in order; change nothing.")] = False,
    out: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("--out", "-o", help="With --dry-run: write the rendered scripts into this directory (files "
                     "of the set already there: only with --force). --backend kuberay/volcano: the manifest file to write.",
                     parser=out_path),
    ] = None,
    force: Force = False,
    pull: Annotated[bool, typer.Option("--pull", help="Pull the image when it is not present locally.")] = False,
    watch: Annotated[bool, typer.Option("--watch", help="Leave a detached watcher (OOM recovery, alerts).")] = False,
    notify_cmd: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--notify-cmd", help="With --watch: command run with each alert event as JSON on stdin."),
    ] = None,
    verify_timeout: Annotated[float, typer.Option(help="Seconds to wait for the training to start.")] = 300.0,
    ask_all: Annotated[bool, typer.Option("--ask-all", help="Ask every round, even for values already given.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (the run id, actions, findings); asks nothing, "
                                          "so it needs --yes or --dry-run. Progress goes to stderr.")
    ] = False,
    backend: Annotated[
        str, typer.Option("--backend", help="local (this host / SSH nodes), slurm (sbatch the job), kuberay or "
                                            "volcano (write the RayJob / Volcano Job manifest to -o; kubectl "
                                            "applies it).")
    ] = "local",
    nodes: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--nodes", "-N", help="Number of nodes (cluster.nnodes; a scheduler picks them).",
                     show_default=False),
    ] = None,
    partition: Annotated[Optional[str], typer.Option(help="--backend slurm: the partition.")] = None,  # noqa: UP045
    time_limit: Annotated[
        Optional[str], typer.Option("--time", help="--backend slurm: the time limit.")  # noqa: UP045
    ] = None,
    gres: Annotated[
        Optional[str], typer.Option(help="--backend slurm: GRES name[:type] of the devices.")  # noqa: UP045
    ] = None,
    canary: Annotated[
        bool, typer.Option("--canary", help="First run 1 step + a checkpoint, then a resume from it + 1 step "
                                            "(weight sync), each timed; the full run starts only if both pass.")
    ] = False,
    canary_timeout: Annotated[float, typer.Option(help="With --canary: seconds for each canary phase.")] = 3600.0,
    skip_fabric: Annotated[
        bool, typer.Option("--skip-fabric", help="No collective fabric test before training (cluster.fabric.enabled "
                                                 "false).")
    ] = False,
    verbose: Verbose = False,
) -> int:
    """Prepare the container, start training and verify it started (asks first unless --yes)."""
    from verlctl.errors import VerlctlError

    if skip_fabric:
        flags = ({**flags[0], "cluster.fabric.enabled": False}, {**flags[1], "cluster.fabric.enabled": "--skip-fabric"})
    from verlctl.orchestrator.flow import launch_flow

    check_seconds(verify_timeout, "--verify-timeout")
    check_seconds(canary_timeout, "--canary-timeout")
    if canary and backend == "slurm":
        raise VerlctlError("--canary runs with --backend local for now (a Slurm job is one allocation)",
                           hint="launch without --canary, or run the canary on one node with --backend local")
    from verlctl.backends import NAMES

    if backend not in NAMES:
        raise VerlctlError(f"--backend {backend!r}: give {', '.join(NAMES[:-1])} or {NAMES[-1]}")
    if backend in ("kuberay", "volcano"):
        from verlctl.orchestrator.flow import launch_kuberay_flow

        if canary or watch or pull:
            flag = "--canary" if canary else ("--watch" if watch else "--pull")
            raise VerlctlError(f"{flag} is for --backend local: a Kubernetes run is kubectl's once the manifest is "
                               "written")
        return launch_kuberay_flow(config, flags[0], flags[1], out, force, nodes, dry_run=dry_run, as_json=as_json,
                                   fmt="volcano" if backend == "volcano" else "rayjob")
    if nodes is not None:
        if nodes < 1:
            raise VerlctlError(f"--nodes {nodes}: a run needs at least one node; give --nodes 1 or more")
        flags = ({**flags[0], "cluster.nnodes": nodes}, {**flags[1], "cluster.nnodes": "--nodes"})
    if backend == "slurm":
        from verlctl.orchestrator.flow import launch_slurm_flow
        from verlctl.render.slurm import SlurmOptions

        return launch_slurm_flow(
            config, flags[0], flags[1], SlurmOptions(partition=partition, time=time_limit, gres=gres), yes=yes,
            dry_run=dry_run, watch=watch, notify_cmd=notify_cmd, verify_timeout=verify_timeout, as_json=as_json,
        )
    given = [f for f, v in (("--partition", partition), ("--time", time_limit), ("--gres", gres)) if v is not None]
    if given:
        raise VerlctlError(f"{given[0]} is a Slurm option: add --backend slurm")
    return launch_flow(
        config, flags[0], flags[1], yes=yes, dry_run=dry_run, out=out, force=force, pull=pull, watch=watch,
        notify_cmd=notify_cmd, verify_timeout=verify_timeout, ask_all=ask_all, as_json=as_json, canary=canary,
        canary_timeout=canary_timeout, verbose=verbose,
    )


def quickstart(
    yes: Annotated[bool, typer.Option("--yes", "-y", hidden=True)] = True,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every action in order; change nothing.")] = False,
    pull: Annotated[bool, typer.Option("--pull", help="Pull the image when it is not present locally.")] = False,
    watch: Annotated[bool, typer.Option("--watch/--no-watch", help="Leave a detached watcher.")] = True,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object, as `launch --json` does. Progress goes to stderr.")
    ] = False,
) -> int:
    """Launch in one command, asking nothing: every setting comes from environment variables.

    The variables are those a one-shot launch script takes (CONTAINER, TRAIN_STEPS, MODEL_PATH, TRAIN_FILE,
    VAL_FILE, SWANLAB_HOST, SWANLAB_API_KEY, …); the same as `launch --yes` without a spec file."""
    from verlctl.orchestrator.flow import launch_flow

    return launch_flow(None, {}, {}, yes=True, dry_run=dry_run, out=None, pull=pull, watch=watch, notify_cmd=None,
                       verify_timeout=300.0, ask_all=False, as_json=as_json, quickstart=True)


def status(
    run: RunArg = None,
    as_json: JsonOut = False,
    plot: Annotated[
        bool, typer.Option("--plot", help="Also chart score, response length, throughput and step time over the steps.")
    ] = False,
) -> int:
    """Container state, process alive, last progress and step metrics, last error."""
    import shutil

    from verlctl.orchestrator.inspect import print_plots, print_status, step_series
    from verlctl.orchestrator.runs import run_status

    doc = run_status(run)
    charts = step_series(run) if plot else None
    if as_json:
        if charts is not None:
            doc["charts"] = charts
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        print_status(doc)
        if charts is not None:
            print_plots(charts, width=max(20, min(120, shutil.get_terminal_size((80, 24)).columns - 16)))
    return 0


def logs(
    run: RunArg = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", help="Lines from the end (0: all).")] = 200,
) -> int:
    """Print the run's log (from inside the container or the host)."""
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import show_logs

    if lines < 0:
        raise VerlctlError(f"--lines must be 0 (all) or a number of lines from the end; got {lines}")
    return show_logs(run, follow=follow, lines=lines)


def stop(
    run: RunArg = None,
    remove_container: Annotated[
        bool, typer.Option("--remove-container", help="Also remove the container, if this run created it.")
    ] = False,
    grace: Annotated[float, typer.Option(help="Seconds between SIGTERM and SIGKILL.")] = 20.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (what was signalled and removed); progress "
                                          "goes to stderr.")
    ] = False,
) -> int:
    """Stop the run's process group (and nothing else)."""
    from rich.console import Console

    from verlctl.orchestrator.runs import stop_run

    check_seconds(grace, "--grace", allow_zero=True)
    result = stop_run(run, remove_container=remove_container, grace=grace, console=Console(stderr=as_json))
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2, default=str) + "\n")
    return 0


def list_runs(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON array of the runs ([] when none).")] = False,
) -> int:
    """The recorded runs, newest last."""
    from verlctl.orchestrator.inspect import list_runs as do_list

    return do_list(as_json)


def export_hf(
    out: Annotated[Path, typer.Option("--out", "-o", help="New (or empty) directory for the Hugging Face model.",
                                      show_default=False, parser=out_path)],
    run: RunArg = None,
    step: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--step", help="Training step of the checkpoint (default: the newest saved).", show_default=False),
    ] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds the conversion may take.")] = 7200.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object (step, backend, output files); progress goes to "
                                          "stderr.")
    ] = False,
) -> int:
    """Convert the run's checkpoint to a Hugging Face model with verl's own verl.model_merger.

    The merger runs inside the run's container (FSDP or Megatron, from the run's spec)."""
    from rich.console import Console

    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.export_hf import export_hf as do_export

    check_seconds(timeout, "--timeout")
    if step is not None and step < 1:
        raise VerlctlError(f"--step must be a training step (1 or more), not {step}")
    result = do_export(run, step, out, timeout, Console(stderr=as_json))
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0
