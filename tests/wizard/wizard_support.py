"""Helpers for the wizard tests: machine states built from real fixtures, real model/parquet files, keystrokes.

Imported by name (pytest puts this folder on sys.path).
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import FIXTURES, ROOT, clean_env, fixture_text
from launch_support import write_model, write_parquet

# Keystrokes as a terminal sends them.
ENTER = "\r"
DOWN = "\x1b[B"
UP = "\x1b[A"
SPACE = " "
CLEAR = "\x15"  # Ctrl-U: delete back to the start of the line (prompt_toolkit's emacs binding)
CTRL_C = "\x03"

#: Round 1's first questions (what runs), and the keys that accept each as pre-filled.
RUN_QUESTIONS = ["verl version", "Algorithm", "Training backend (strategy)", "Mode"]
RUN = ENTER * len(RUN_QUESTIONS)

NPU_8_FREE = "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"
NPU_BUSY = "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt"
NPU_WARNING = "info-docs-WARNING-health-misaligned-redacted-mindcluster.txt"

OTHER_IMAGE = "quay.io/ascend/verl:verl-8.2.rc1-910b-ubuntu22.04-py3.11-v0.6.0"


def npu_info(name: str = NPU_8_FREE) -> Any:
    from verlctl.detect.npu import parse_npu_smi_info

    return parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / name))


def write_model_shape(d: Path, heads: int = 8, kv: int = 4, layers: int = 8) -> Path:
    """A real (tiny) model directory, as launch_support.write_model, with the given attention shape."""
    write_model(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(num_attention_heads=heads, num_key_value_heads=kv, num_hidden_layers=layers)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@dataclass
class World:
    """Real files on disk plus a MachineState that found them (as detect_machine would)."""

    root: Path
    model: Path
    train: Path
    val: Path
    machine: Any


def make_world(tmp_path: Path, *, npu: str = NPU_8_FREE, heads: int = 8, kv: int = 4, layers: int = 8,
               containers: bool = True, images: bool = True) -> World:
    from verlctl.detect.datasets import DatasetFile, inspect_parquet
    from verlctl.detect.docker_probe import ContainerInfo, DockerInfo, ImageInfo
    from verlctl.detect.machine import MachineState
    from verlctl.detect.models import inspect_model
    from verlctl.detect.network import NetInterface, NetworkInfo
    from verlctl.detect.scan import ScanResult

    model = write_model_shape(tmp_path / "models" / "Qwen3-0.6B", heads, kv, layers)
    (tmp_path / "data").mkdir()
    train = tmp_path / "data" / "dapo-math-17k.parquet"
    val = tmp_path / "data" / "aime-2024.parquet"
    write_parquet(train)
    write_parquet(val)
    scan = ScanResult(
        roots=[str(tmp_path)], max_depth=4, budget_s=3.0, elapsed_s=0.01, timed_out=False,
        models=[inspect_model(str(model))],
        parquet_files=[DatasetFile(path=str(train)), DatasetFile(path=str(val))],
    )
    docker = DockerInfo(
        server_version="28.2.2", api_version="1.41",
        containers=[ContainerInfo(id="0123456789ab", name="jins", image=OTHER_IMAGE, state="running",
                                  status="Up 3 hours")] if containers else [],
        images=[ImageInfo(id="fedcba987654", tags=[OTHER_IMAGE])] if images else [],
    )
    network = NetworkInfo(interfaces=[NetInterface(name="eth0", is_up=True)], default_interface="eth0",
                          host_ips=["192.168.1.10"])
    machine = MachineState(npu=npu_info(npu), docker=docker, scan=scan, network=network,
                           datasets=[inspect_parquet(str(train)), inspect_parquet(str(val))])
    return World(tmp_path, model, train, val, machine)


@dataclass
class Driven:
    resolved: Any
    prompter: Any
    text: str  # what the wizard printed (rich console)


def drive(keys: str, machine: Any, *, flags: dict[str, Any] | None = None, names: dict[str, str] | None = None,
          config: Path | None = None, ask_all: bool = False, environ: dict[str, str] | None = None) -> Driven:
    """Run the real wizard with the keystrokes on a prompt_toolkit pipe input (closed after them: a question
    that was not expected ends the run with InputEnded instead of waiting)."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from verlctl.wizard.flow import run_wizard
    from verlctl.wizard.prompter import Prompter

    buf = io.StringIO()
    console = Console(file=buf, width=220, color_system=None)
    with create_pipe_input() as inp:
        inp.send_text(keys)
        inp.close()
        prompter = Prompter(input=inp, output=DummyOutput())
        try:
            resolved = run_wizard(config, dict(flags or {}), dict(names or {}), ask_all, console, machine=machine,
                                  prompter=prompter, environ=environ if environ is not None else {})
        except BaseException as exc:
            exc.driven = Driven(None, prompter, buf.getvalue())  # type: ignore[attr-defined]
            raise
    return Driven(resolved, prompter, buf.getvalue())


# The real entry point (verlctl.cli.main: one-line errors, exit codes). While `init` is not registered in
# verlctl.commands.registry, it is added to the same app the same way before main() runs.
DRIVER = """
import sys
import verlctl.cli as cli
from verlctl.commands.init import init
if "init" not in {c.name for c in cli.app.registered_commands}:
    cli.app.command("init")(init)
cli.main(sys.argv[1:])
"""


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-c", DRIVER, *args]


#: A state directory of this test process: an interrupted wizard keeps its answers there, never in the user's.
_STATE_DIR = tempfile.mkdtemp(prefix="verlctl-test-wizard-state-")


def cli_env(**extra: str) -> dict[str, str]:
    extra.setdefault("VERLCTL_STATE_DIR", _STATE_DIR)
    env = clean_env(COLUMNS="200", LINES="60", TERM="xterm-256color", PROMPT_TOOLKIT_NO_CPR="1", **extra)
    env.pop("NO_COLOR", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env
