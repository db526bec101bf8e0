"""The confirmation checklist: the blocking point of the first seed (its stage 3).

A short summary (hardware, container, paths, hyperparameters, features, SwanLab with the key masked, verl
version), then the full table of every value with its source (``report.print_checklist``), the findings,
and the numbered list of actions that a yes will take. Nothing is done before the answer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verlctl.checks.findings import Finding
from verlctl.report import MASK, display, print_checklist, print_findings, print_glance, print_words
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import TrainingCommand

#: The settings the Summary shows with their source (the at-a-glance list leaves them out).
SUMMARY_PATHS = ("cluster.devices", "cluster.nodes", "container.name", "container.image", "paths.model",
                 "paths.train_files", "paths.val_files", "paths.checkpoints")


def glance(console: Any, resolved: ResolvedSpec, command: TrainingCommand, verbose: bool = False) -> None:
    """The checklist before the Summary: the full table (``verbose``) or what differs from the defaults."""
    if verbose:
        print_checklist(console, resolved, command)
    else:
        print_glance(console, resolved, command, SUMMARY_PATHS)


def summary_lines(resolved: ResolvedSpec, command: TrainingCommand) -> list[tuple[str, str]]:
    spec = resolved.spec
    c, t, sw = spec.cluster, spec.train, spec.logging.swanlab
    src = resolved.origin
    nodes = (f"{len(c.nodes)} nodes ({', '.join(c.nodes)}), head {c.master_addr}" if c.nodes
             else "this machine (single node)")
    rows = [
        ("hardware", f"{spec.device.upper()} × {len(c.devices)} per node: {display(c.devices)} "
                     f"({src('cluster.devices')}); nodes: {nodes}"),
    ]
    from verlctl.wizard.rounds import disaggregated

    if disaggregated(spec.mode) and t.trainer_devices and t.rollout_devices:
        rows.append(("split", f"{t.trainer_devices} training + {t.rollout_devices} rollout device(s) per node "
                              f"({src('train.trainer_devices')})"))
    if spec.container.runtime == "docker":
        pull = " (pulled if missing)" if spec.container.pull else ""
        rows.append(("container", f"{spec.container.name} ({src('container.name')}), image {spec.container.image}"
                                  f"{pull} ({src('container.image')})"))
    else:
        rows.append(("container", "none: runs on this host"))
    proxy = spec.container.proxy
    if proxy.http or proxy.https:
        rows.append(("proxy", f"http {proxy.http or '-'}, https {proxy.https or '-'}"))
    rows += [
        ("model", f"{spec.paths.model} ({src('paths.model')})"),
        ("train data", f"{display(spec.paths.train_files)} ({src('paths.train_files')})"),
        ("val data", f"{display(spec.paths.val_files)} ({src('paths.val_files')})"),
        ("checkpoints", f"{spec.paths.checkpoints} ({src('paths.checkpoints')}): {_where(spec)}"),
        ("hyperparameters", f"steps {t.steps}, batch {t.train_batch_size}, lr {t.lr:g}, TP {t.tensor_parallel}, "
                            + (f"PP {t.pipeline_parallel}, " if spec.strategy == "megatron" else "")
                            + f"n {t.responses_per_prompt}"),
    ]
    on = [n for n, s in command.features.items() if s.on and s.applicable]
    rows.append(("features", ", ".join(on) or "none"))
    if sw.enabled:
        key = MASK if sw.api_key is not None and sw.api_key.get_secret_value() else "(none)"
        workspace = sw.workspace or "your own (SwanLab's default)"
        rows.append(("SwanLab", f"on: {sw.host}, mode {sw.mode}, workspace {workspace}, project "
                                f"{spec.logging.project}, key {key}"))
    else:
        rows.append(("SwanLab", "off"))
    rows.append(("verl", f"{command.version} ({spec.algorithm}, {spec.mode}, {spec.strategy}): "
                         f"{command.entry.module} --config-name {command.entry.config_name}"))
    return rows


def _where(spec: Any) -> str:
    path, workdir = spec.paths.checkpoints or "", spec.container.workdir.rstrip("/")
    if spec.container.runtime == "docker" and (path == workdir or path.startswith(workdir + "/")):
        return "inside the container, lost when it is removed"
    return "on the host" + (", mounted at the same path" if spec.container.runtime == "docker" else "")


def print_summary(console: Any, resolved: ResolvedSpec, command: TrainingCommand) -> None:
    """Seed 1's "Configuration Confirmation" items, one line each (wrapped between words)."""
    console.print("[bold]Summary[/bold]", highlight=False)
    rows = summary_lines(resolved, command)
    width = max(len(what) for what, _ in rows)
    for what, value in rows:
        print_words(console, f"  {what:<{width}}  {value}", 0, width + 4)


def show_checklist(console: Any, resolved: ResolvedSpec, command: TrainingCommand, findings: list[Finding],
                   actions: list[str], verbose: bool = False) -> None:
    """The checklist: by default what differs from the defaults (``verbose``: the full table of every
    value), the Summary, the findings and the actions. Lines break between words only (a long path stays
    whole on its own line)."""
    glance(console, resolved, command, verbose)
    print_summary(console, resolved, command)
    print_findings(console, findings)
    console.print("[bold]These actions will be taken, in order (nothing has been done yet):[/bold]")
    for i, a in enumerate(actions, 1):
        print_words(console, f"  {i:2}. {a}", 0, 6)


def init_actions(resolved: ResolvedSpec, out: Path) -> list[str]:
    acts = [f"write the spec to {out} (mode 0644): every value not left at its default; "
            "`verlctl launch -c FILE --yes` repeats the run"]
    key = resolved.spec.logging.swanlab.api_key
    if key is not None and key.get_secret_value():
        acts.append("the SwanLab API key is not written to the file: export SWANLAB_API_KEY when launching")
    acts.append("nothing else: no container is created, no image pulled, no training started")
    from verlctl.runtime.workdirs import directories_to_create

    acts += [f"later, `verlctl launch` will {d}" for d in directories_to_create(resolved.spec, "<run id>")]
    return acts
