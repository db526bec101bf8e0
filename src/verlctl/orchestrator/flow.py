"""The launch flow around the Launcher: spec sources, the interactive rounds, confirmation, the watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verlctl.errors import SpecError, VerlctlError
from verlctl.wizard.flow import missing_message, stdin_is_terminal


def no_watcher_line(run_id: str) -> str:
    """Said once by a launch without ``--watch``: nothing recovers the run (the spec's ``recovery`` settings
    are the watcher's), and how to start one."""
    return (f"no watcher: out-of-memory recovery and the spec's `recovery` settings are off; turn them on with "
            f"`verlctl watch {run_id}` (or `verlctl launch --watch` next time)")


def env_name_for(path: str) -> str:
    """The environment variable that sets spec ``path`` (a seed script's name when one maps to it)."""
    from verlctl.spec.sources import SEED_ENV

    seed = next((name for name, p in SEED_ENV.items() if p == path), None)
    return seed or "VERLCTL_" + path.upper().replace(".", "__")


def in_env_words(text: str | None) -> str | None:
    """``text`` with each spec key it names (``container.image``) followed by its environment variable:
    quickstart takes no spec file and no flags, so the variable is what a user can set."""
    import re

    if not text:
        return text
    keys = r"(?<![\w.=-])((?:paths|container|cluster|train|logging|features|recovery)\.[a-z_.]*[a-z_]|strategy|algorithm)"

    def name(m: re.Match[str]) -> str:
        key = m.group(1)
        return f"{env_name_for(key)} ({key})"

    # the `--set KEY=… or VAR` alternatives of the missing-values message: quickstart has no --set
    text = re.sub(r"\s*\(--set \S+=\S+ or \w+\)", "", text)
    return re.sub(keys, name, text)


def launch_flow(
    config: Path | None,
    flags: dict[str, Any],
    names: dict[str, str],
    *,
    yes: bool,
    dry_run: bool,
    out: Path | None,
    force: bool = False,
    pull: bool,
    watch: bool,
    notify_cmd: str | None,
    verify_timeout: float,
    ask_all: bool,
    as_json: bool = False,
    canary: bool = False,
    canary_timeout: float = 3600.0,
    verbose: bool = False,
    quickstart: bool = False,
) -> int:
    """Launch (``launch``, ``quickstart``). With ``as_json`` nothing is asked, the progress lines go to
    stderr and one object goes to stdout: ``outcome`` ("launched", "dry_run", or "error" beside the error
    object), ``run_id`` (null unless launched), ``actions``, ``findings``, ``run`` (the recorded run, or
    null), ``watcher_pid``."""
    from rich.console import Console

    from verlctl.errors import ExitCode
    from verlctl.orchestrator.interrupts import launch_guard
    from verlctl.orchestrator.launch import LaunchOptions
    from verlctl.orchestrator.runs import LocalRun
    from verlctl.spec.resolve import load_spec

    if quickstart:
        try:
            return launch_flow(config, flags, names, yes=yes, dry_run=dry_run, out=out, pull=pull, watch=watch,
                               notify_cmd=notify_cmd, verify_timeout=verify_timeout, ask_all=ask_all,
                               as_json=as_json, verbose=verbose)
        except VerlctlError as exc:
            exc.message = in_env_words(exc.message) or exc.message
            exc.message = exc.message.replace("missing required values and stdin is not a terminal, so nothing "
                                              "can be asked", "missing required values (quickstart asks nothing)")
            exc.hint = in_env_words(exc.hint)
            raise
    console = Console(stderr=as_json)
    if as_json and not (yes or dry_run):
        raise VerlctlError("--json asks no question: add --yes to launch (or --dry-run to list the actions)")
    resolved = load_spec(config, flags=flags, flag_names=names)
    interactive = stdin_is_terminal() and not yes and not dry_run
    missing = resolved.missing_required()
    asked = False
    if missing or ask_all:
        if not interactive:
            if missing:
                raise SpecError(missing_message(missing))
        else:
            from verlctl.orchestrator.machine_facts import wizard_facts
            from verlctl.wizard.flow import run_wizard

            resolved = run_wizard(config, flags, names, ask_all=ask_all, console=console, facts_for=wizard_facts)
            asked = True
    if not yes and not dry_run and not interactive:
        raise VerlctlError("confirmation needed but stdin is not a terminal: pass --yes to launch without asking")

    confirm = None
    if interactive:
        from verlctl.wizard.flow import confirm_launch

        # The answers can be saved as a spec file (offered after the launch question) when rounds were asked.
        confirm = confirm_launch(console, resolved, offer_save=asked, verbose=verbose)
    options = LaunchOptions(yes=yes, dry_run=dry_run, pull=pull, verify_timeout=verify_timeout, out_dir=out,
                            canary=canary, canary_timeout=canary_timeout, out_force=force)
    backend = LocalRun(console)
    try:
        # One guard from the first change to the watcher's start: a launch that ends in between by a signal
        # or an unexpected error is cleaned up (orchestrator/interrupts.py); past it, the run is recorded and watched.
        with launch_guard(backend.abort):
            record = backend.submit(backend.prepare(resolved, options, confirm))
            pid = _start_watcher(record, notify_cmd) if record is not None and watch else None
    except VerlctlError as exc:
        launcher = backend.launcher
        if as_json and exc.details is None and launcher is not None:
            exc.details = {**_json_doc(launcher, None, None), "outcome": "error"}
        raise
    launcher = backend.launcher
    if record is None:
        if as_json:
            _print_json(_json_doc(launcher, None, None))
        # Declined at "Launch with these settings?": nothing changed, and a script can tell.
        return ExitCode.DECLINED if launcher.declined else ExitCode.OK
    if pid is not None:
        console.print(f"watcher started (pid {pid}): it stays silent while training is healthy", highlight=False)
    console.print(f"[bold green]training is running[/bold green]: run [bold]{record.run_id}[/bold]", highlight=False)
    if record.swanlab_url:
        console.print(f"SwanLab: {record.swanlab_url} (experiment {record.experiment})", highlight=False)
    console.print("follow it with `verlctl status`, `verlctl logs -f`; stop it with `verlctl stop`", highlight=False)
    if not watch:
        console.print(no_watcher_line(record.run_id), highlight=False)
    if as_json:
        _print_json(_json_doc(launcher, record, pid))
    return 0


def _start_watcher(record: Any, notify_cmd: str | None) -> int:
    """The detached watcher of ``launch --watch`` (inside the launch guard: if it cannot start, the run is
    stopped rather than left training unwatched)."""
    from verlctl.orchestrator.watcher_process import spawn_watcher

    return spawn_watcher(record, notify_cmd)


def _json_doc(launcher: Any, record: Any, watcher_pid: int | None) -> dict[str, Any]:
    findings = launcher.findings or []
    return {
        "outcome": "launched" if record is not None else ("dry_run" if launcher.options.dry_run else "not_launched"),
        "run_id": record.run_id if record is not None else None,
        "actions": list(launcher.actions or []),
        "findings": [f.model_dump(mode="json") for f in findings],
        "not_checked": launcher.not_checked(),
        "run": record.model_dump(mode="json") if record is not None else None,
        "watcher_pid": watcher_pid,
        "request": launcher.request.to_json() if launcher.request is not None else None,
    }


def _print_json(doc: dict[str, Any]) -> None:
    import json
    import sys

    sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")


def launch_slurm_flow(config: Path | None, flags: dict[str, Any], names: dict[str, str], opts: Any, *,
                      yes: bool, dry_run: bool, watch: bool, notify_cmd: str | None, verify_timeout: float,
                      as_json: bool = False) -> int:
    """``launch --backend slurm``. With ``as_json`` the progress goes to stderr and one object to stdout, as
    for a local launch: ``outcome``, ``run_id``, ``actions``, ``findings``, ``run``, ``watcher_pid``, and
    ``slurm_job`` ({job_id, job_name, output} of the submitted job, or null)."""
    import json
    import sys

    from rich.console import Console

    from verlctl.spec.resolve import load_spec

    console = Console(stderr=as_json)
    if as_json and not (yes or dry_run):
        raise VerlctlError("--json asks no question: add --yes to submit (or --dry-run to list the actions)")
    resolved = load_spec(config, flags=flags, flag_names=names)
    missing = resolved.missing_required()
    if missing:
        from verlctl.errors import SpecError

        raise SpecError(missing_message(missing))
    actions: list[str] = []

    def doc(record: Any, pid: int | None) -> dict[str, Any]:
        job = record.slurm_jobs[-1] if record is not None and record.slurm_jobs else None
        return {"outcome": "launched" if record is not None else "dry_run", "run_id": record.run_id if record else None,
                "actions": actions, "findings": [], "run": record.model_dump(mode="json") if record else None,
                "watcher_pid": pid,
                "slurm_job": {"job_id": job.job_id, "job_name": job.job_name, "output": job.output} if job else None,
                "request": backend.request.to_json() if backend.request is not None else None}

    from verlctl.orchestrator.interrupts import launch_guard
    from verlctl.orchestrator.runs import SlurmLaunch, SlurmRun

    backend = SlurmRun(console)
    try:
        with launch_guard(backend.abort):  # as for a local launch: every way it ends cleans up, watcher included
            request = backend.prepare(resolved, SlurmLaunch(opts, yes=yes, dry_run=dry_run,
                                                            verify_timeout=verify_timeout))
            actions.extend(request.actions())
            record = backend.submit(request)
            pid = _start_watcher(record, notify_cmd) if record is not None and watch else None
    except VerlctlError as exc:
        if as_json and exc.details is None:
            exc.details = {**doc(None, None), "outcome": "error"}
        raise
    if record is None:
        if as_json:
            sys.stdout.write(json.dumps(doc(None, None), indent=2, default=str) + "\n")
        return 0
    if pid is not None:
        console.print(f"watcher started (pid {pid}): it stays silent while training is healthy", highlight=False)
    console.print(f"[bold green]submitted[/bold green]: run [bold]{record.run_id}[/bold]", highlight=False)
    console.print("follow it with `verlctl status`, `verlctl logs -f`; stop it with `verlctl stop`", highlight=False)
    if not watch:
        console.print(no_watcher_line(record.run_id), highlight=False)
    if as_json:
        sys.stdout.write(json.dumps(doc(record, pid), indent=2, default=str) + "\n")
    return 0


def launch_kuberay_flow(config: Path | None, flags: dict[str, Any], names: dict[str, str], out: Path | None,
                        force: bool, nodes: int | None, *, dry_run: bool, as_json: bool = False,
                        fmt: str = "rayjob") -> int:
    """``launch --backend kuberay|volcano -o FILE``: the manifest backend's request; "submitting" writes the
    manifest and names the ``kubectl apply`` (``export rayjob`` / ``export volcano`` do the same with their own
    options). ``--json``: one object, ``outcome`` (dry_run, written, error), ``actions``, ``findings``,
    ``request``, ``manifest``."""
    import json
    import sys

    from rich.console import Console

    from verlctl.backends.kuberay import KubeRayExport, resolve
    from verlctl.files import check_out_file
    from verlctl.orchestrator.runs import ManifestRun
    from verlctl.report import print_findings

    run = ManifestRun(fmt)
    example = "volcano-job.yaml" if fmt == "volcano" else "rayjob.yaml"
    if out is None:
        raise VerlctlError(f"--backend {run.name}: give -o, the manifest file to write, e.g. -o {example}")
    target = check_out_file(out, force, example=example).absolute()
    flags, names = dict(flags), dict(names)
    flags.pop("cluster.nnodes", None)  # --nodes: worker pods (resolve names them)
    names.pop("cluster.nnodes", None)
    resolved, nodes = resolve(config, flags, names, nodes, fmt)
    console = Console(stderr=as_json)
    request = run.prepare(resolved, KubeRayExport(target, nodes, dry_run))
    print_findings(console, run.findings)
    doc: dict[str, Any] = {"outcome": "dry_run" if dry_run else "written", "run_id": None,
                           "actions": request.actions(), "request": request.to_json(), "manifest": None,
                           "findings": [f.model_dump(mode="json") for f in run.findings]}
    if request.blocked:
        exc = VerlctlError("the spec has errors (listed above): nothing was written")
        exc.details = {**doc, "outcome": "error"} if as_json else None
        raise exc
    console.print("[bold]dry run[/bold]: these actions would be taken, in order (nothing is changed):"
                  if dry_run else f"launch --backend {run.name}:")
    for i, a in enumerate(request.actions(), 1):  # unwrapped: the kubectl command must survive copy and paste
        console.print(f"  {i:2}. {a}", highlight=False, markup=False, soft_wrap=True)
    if not dry_run:
        doc["manifest"] = str(run.submit(request))
        console.print(f"wrote {target}; apply it with: {run.extra['apply']}", highlight=False, markup=False,
                      soft_wrap=True)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    return 0
