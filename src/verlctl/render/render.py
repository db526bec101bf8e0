"""Render the two launch scripts and the resolved spec from a spec and its training command.

Templates hold layout only; every value reaching a script goes through the ``q`` filter (shell quoting),
and every Hydra value through :func:`verlctl.verl.hydra_syntax.hydra_value`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl import __version__
from verlctl.spec.resolve import ResolvedSpec
from verlctl.verl.compose import OverrideLine, TrainingCommand
from verlctl.verl.entrypoints import CORE_CONFIG_LOCATOR, RECIPE_HINT
from verlctl.verl.environment import CANN_ENV_SCRIPTS, ENV_ROWS, NOFILE_LIMIT
from verlctl.verl.hydra_syntax import shell_quote

START_SCRIPT = "start_verl.sh"
TRAIN_SCRIPT = "run_training.sh"
RESOLVED_SPEC = "spec.resolved.yaml"
ENV_FILE = "verlctl.env"
#: The run's own SwanLab login store beside the env file (a 0700 directory holding SwanLab's 0600 ``.netrc``,
#: its ``SWANLAB_ROOT``): start_verl.sh moves the API key there, out of the environment of Ray's processes.
SWANLAB_STORE = "verlctl.swanlab"

SECTION_TITLES = {
    "config group": "config group selection",
    "data": "data",
    "model": "model, optimiser and batch sizes",
    "parallelism": "parallelism",
    "rollout": "rollout",
    "algorithm": "algorithm",
    "reward": "reward",
    "one-step-off": "one-step-off-policy resources",
    "trainer": "trainer, logging and checkpoints (resume_mode=auto resumes from the last checkpoint)",
    "extra": "extra_overrides from the spec (passed as written)",
}


@dataclass
class Rendered:
    files: dict[str, str]  # name -> content, safe to write anywhere (no secrets)
    env_file: str  # content of the 0600 env file (may hold secrets): written only by the launcher
    log_file: str
    command: TrainingCommand
    extra: dict[str, Any] = field(default_factory=dict)

    def write(self, out_dir: str | Path, force: bool = False) -> list[Path]:
        """Write the files into ``out_dir`` as one set: atomically, never through a planted symlink; files
        already there are replaced only with ``force`` (:mod:`verlctl.files`)."""
        from verlctl.files import write_set

        return write_set(
            out_dir,
            {name: (content.encode("utf-8"), 0o755 if name.endswith(".sh") else 0o644)
             for name, content in self.files.items()},
            force=force,
        )

    def write_env_file(self, path: str | Path) -> Path:
        """Write the env file with mode 0600 from the start (never world-readable, even briefly), atomically
        and without following a symlink at ``path``."""
        from verlctl.files import write_file

        return write_file(path, self.env_file.encode("utf-8"), 0o600)


def jinja_env(loader_dir: Path) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(loader_dir)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["q"] = lambda v: shell_quote(str(v))
    return env


TEMPLATES = Path(__file__).parent / "templates"


def _comment(text: str | None) -> str | None:
    if not text:
        return None
    return " ".join(text.split())


def _groups(lines: list[OverrideLine]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    for line in lines:
        if line.section.startswith("feature:"):
            title = f"feature {line.section.partition(':')[2]}"
        else:
            title = SECTION_TITLES.get(line.section, line.section)
        if not groups or groups[-1]["title"] != title:
            groups.append({"title": title, "overrides": []})
        groups[-1]["overrides"].append({"text": line.text, "note": _comment(line.note)})
    # A note shared by consecutive lines is shown once.
    for g in groups:
        prev = None
        for o in g["overrides"]:
            if o["note"] == prev:
                o["note"] = None
            else:
                prev = o["note"]
    return groups


def log_file_for(resolved: ResolvedSpec) -> str:
    logs = (resolved.spec.paths.logs or "").rstrip("/") or "."
    return f"{logs}/{resolved.spec.logging.experiment}.log"


def render(resolved: ResolvedSpec, command: TrainingCommand, ray_args: tuple[str, ...] = ()) -> Rendered:
    """``ray_args``: more ``ray start`` arguments for every node (a scheduler's job adds its own ports)."""
    spec = resolved.spec
    env = jinja_env(TEMPLATES)
    log_file = log_file_for(resolved)
    common = {
        "verlctl_version": __version__,
        "algorithm": spec.algorithm,
        "mode": spec.mode,
        "strategy": spec.strategy,
        "device": spec.device,
        "verl_version": command.version,
    }
    train = env.get_template("run_training.sh.j2").render(
        **common,
        module=command.entry.module,
        config_name=command.entry.config_name,
        entry_note=_comment(command.entry.note),
        workdir=spec.container.workdir,
        log_dir=spec.paths.logs,
        log_file=log_file,
        python="python3",
        groups=_groups(command.overrides),
        overrides_count=len(command.overrides),
        source_file=command.entry.source_file,
        recipe_hint=RECIPE_HINT,
        core_searchpath=command.entry.core_searchpath,
        locator=CORE_CONFIG_LOCATOR,
    )
    notes = {row.name: row.note for row in ENV_ROWS}
    npu = spec.device == "npu"
    resource = "NPU" if npu else "GPU"
    n = len(spec.cluster.devices)
    resource_args = f"--resources='{{\"NPU\": {n}}}'" if npu else f"--num-gpus={n}"
    from verlctl.verl.ray_cpus import cpu_demand

    cpus = cpu_demand(command.version, command.entry.module, command.override_texts(), n)
    digest = hashlib.sha256(f"{spec.logging.experiment}|{spec.paths.checkpoints}".encode()).hexdigest()[:8]
    start = env.get_template("start_verl.sh.j2").render(
        **common,
        cann_scripts=CANN_ENV_SCRIPTS if npu else (),
        env=[{"name": k, "value": v, "note": _comment(notes.get(k))} for k, v in command.env.items()],
        nnodes=spec.cluster.node_count,
        devices_per_node=n,
        master_addr=spec.cluster.master_addr or "",
        ray_port=spec.cluster.ray_port,
        dashboard_port=spec.cluster.dashboard_port,
        join_timeout=spec.cluster.join_timeout_s,
        join_retries=10,
        ray_resource=resource,
        ray_resource_args=resource_args,
        ray_start_args=[*spec.cluster.ray_start_args, *ray_args],
        ray_cpus_head=cpus.head,
        ray_cpus_worker=cpus.worker,
        ray_cpus_items=[(what, n) for what, n in cpus.items if n],
        ray_tmp=f"/tmp/verlctl-ray-{digest}",
        checkpoints=spec.paths.checkpoints or "",  # locked for the attempt's lifetime (checks/ownership.py)
        # Ray's dashboard runs code for anyone who reaches it (no auth): this machine only, unless other
        # nodes are in the run (the launch checklist says so then).
        dashboard_host="127.0.0.1" if spec.cluster.node_count == 1 else "0.0.0.0",
        workdir=spec.container.workdir,  # where the training runs: SwanLab reads <cwd>/.swanlab/.netrc first
        swanlab_store=SWANLAB_STORE,
        nofile=NOFILE_LIMIT,
        socket_ifname=spec.cluster.socket_ifname,
        ifname_vars=("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")
        if npu
        else ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"),
    )
    from verlctl.render.resolved_yaml import resolved_yaml

    files = {
        START_SCRIPT: start,
        TRAIN_SCRIPT: train,
        RESOLVED_SPEC: resolved_yaml(resolved, command),
    }
    env_text = "".join(f"{k}={shell_quote(v)}\n" for k, v in command.env_file.items())
    return Rendered(files, env_text, log_file, command)
