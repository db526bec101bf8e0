"""`verlctl check` on the command line: exit codes, --json, and a machine without any device tool or engine.

The real entry point (verlctl.cli.main: one-line errors, exit codes) runs in a subprocess. While `check`
is not yet registered in verlctl.commands.registry, the driver adds it to the same app the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import FIXTURES, ROOT, clean_env, fixture_text
from launch_support import free_port, write_model, write_parquet

DRIVER = """
import sys
for name in sys.argv[1].split(","):
    if name:
        sys.modules[name] = None  # this interpreter lacks the package (as a host without verlctl[parquet])
import verlctl.cli as cli
from verlctl.commands.check import check
if "check" not in {c.name for c in cli.app.registered_commands}:
    cli.app.command("check")(check)
cli.main(sys.argv[2:])
"""
NO_PYARROW = "pyarrow,pyarrow.parquet"


class Result:
    def __init__(self, proc: subprocess.CompletedProcess[str]) -> None:
        self.code, self.out, self.err = proc.returncode, proc.stdout, proc.stderr

    def json(self) -> dict[str, Any]:
        return json.loads(self.out)

    def codes(self) -> dict[str, str | None]:
        return {f["code"]: f["field"] for f in self.json()["findings"]}


def run_check_cli(*args: str, env: dict[str, str], block: str = "", timeout: float = 180) -> Result:
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, block, "check", *args],
        capture_output=True, text=True, env=env, timeout=timeout, cwd=str(ROOT),
    )
    return Result(proc)


def dead_docker_socket(tmp_path: Path) -> str:
    """A unix socket file nobody listens on: what a stopped dockerd leaves behind."""
    path = tmp_path / "docker.sock"
    if not path.exists():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(path))
        s.close()
    return f"unix://{path}"


def bare_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """PATH holds an empty directory (no npu-smi, no nvidia-smi, no docker); DOCKER_HOST is a dead socket."""
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    env = {"PATH": str(empty), "DOCKER_HOST": dead_docker_socket(tmp_path), "COLUMNS": "200", **extra}
    return clean_env(**env)


def npu_smi_double(tmp_path: Path, capture: str) -> Path:
    """TEST DOUBLE for `npu-smi info`: prints a real capture (tests/fixtures/npu-smi) through the real parser."""
    bindir = tmp_path / "npu-bin"
    bindir.mkdir(exist_ok=True)
    text = bindir / "capture.txt"
    text.write_text(fixture_text(FIXTURES / "npu-smi" / capture))
    tool = bindir / "npu-smi"
    tool.write_text(f"#!/bin/sh\nexec {shutil.which('cat')} '{text}'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return bindir


def write_spec(tmp_path: Path, **sections: Any) -> Path:
    write_model(tmp_path / "models" / "Qwen3-tiny")
    (tmp_path / "data").mkdir(exist_ok=True)
    write_parquet(tmp_path / "data" / "train.parquet", rows=32)  # one batch (train_batch_size 32): verl needs it
    write_parquet(tmp_path / "data" / "val.parquet")
    spec: dict[str, Any] = {
        "paths": {
            "model": str(tmp_path / "models" / "Qwen3-tiny"),
            "train_files": str(tmp_path / "data" / "train.parquet"),
            "val_files": str(tmp_path / "data" / "val.parquet"),
            "checkpoints": str(tmp_path / "ckpt"),
        },
        "train": {"tensor_parallel": 2, "pipeline_parallel": 1},
        # Free ports, not Ray's 6766 / 8265: on a shared host (and beside the suite's own Ray doubles) a default
        # port can be bound by someone else, and check then rightly says ray_ports_in_use.
        "cluster": {"ray_port": free_port(), "dashboard_port": free_port()},
    }
    for key, value in sections.items():
        spec.setdefault(key, {}).update(value)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_bare_machine_prints_findings_and_exits_2(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    res = run_check_cli("-c", str(spec), env=bare_env(tmp_path))
    assert res.code == 2, res.out + res.err
    assert "Traceback" not in res.err
    assert "npu_smi_missing" in res.out and "device is npu but npu-smi is not on PATH" in res.out
    assert "docker_engine" in res.out and "container.runtime is docker but the Docker engine is not reachable" in res.out
    assert res.err == "error: the check found errors (listed above)\n"


def test_bare_machine_json(tmp_path: Path) -> None:
    spec = write_spec(tmp_path)
    res = run_check_cli("-c", str(spec), "--json", "--set", "device=gpu", env=bare_env(tmp_path))
    assert res.code == 2 and res.err == ""
    doc = res.json()
    assert set(doc) == {"findings", "not_checked", "machine", "memory"}
    codes = res.codes()
    assert codes["nvidia_smi_missing"] == "device" and codes["docker_engine"] == "container.runtime"
    machine = doc["machine"]
    assert machine["device"] == "gpu"
    assert machine["accelerator"] == {"tool": "nvidia-smi", "status": "unavailable", "reason": "nvidia-smi not found"}
    assert machine["docker"]["error"].startswith("the Docker engine is not reachable at unix://")
    assert machine["model"]["num_attention_heads"] == 8 and machine["checkpoints"]["writable"] is True
    assert [d["verl_ok"] for d in machine["datasets"]] == [True, True]


def test_runtime_host_skips_every_docker_check(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, container={"runtime": "host", "image": "verlctl-test-absent:none"})
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path))
    assert res.code == 2  # npu-smi is still missing
    assert not {c for c in res.codes() if c.startswith(("docker", "image", "container"))}
    assert res.json()["machine"]["docker"] == {"status": "not_used (container.runtime: host)"}


def verl_checkout(tmp_path: Path) -> str:
    """A work dir holding the 0.7.0 DAPO recipe entry file (`check` probes that it is there)."""
    workdir = tmp_path / "verl"
    (workdir / "recipe" / "dapo").mkdir(parents=True)
    (workdir / "recipe" / "dapo" / "main_dapo.py").write_text("")
    return str(workdir)


def test_exit_0_when_nothing_is_wrong(tmp_path: Path) -> None:
    bindir = npu_smi_double(tmp_path, "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    spec = write_spec(tmp_path, container={"runtime": "host", "workdir": verl_checkout(tmp_path)})
    res = run_check_cli("-c", str(spec), env=bare_env(tmp_path, PATH=str(bindir)))
    assert res.code == 0, res.out + res.err
    assert "npu-smi: 8 device(s)" in res.out and "error" not in res.out


def test_warnings_do_not_fail_the_check(tmp_path: Path) -> None:
    bindir = npu_smi_double(tmp_path, "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt")
    spec = write_spec(tmp_path, container={"runtime": "host", "workdir": verl_checkout(tmp_path)},
                      cluster={"devices": [0, 7]},
                      train={"tensor_parallel": 2, "pipeline_parallel": 1, "save_freq": -1})
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path, PATH=str(bindir)))
    assert res.code == 0, res.out + res.err
    found = res.json()["findings"]
    assert [f["code"] for f in found if f["code"] == "no_checkpoints"] == ["no_checkpoints"]
    assert not [f for f in found if f["severity"] == "error"]


def test_unset_model_path_is_a_finding_and_the_machine_checks_still_run(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, container={"runtime": "host"})
    doc = yaml.safe_load(spec.read_text())
    del doc["paths"]["model"]
    spec.write_text(yaml.safe_dump(doc))
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path))
    assert res.code == 2
    assert res.codes()["required_path"] == "paths.model"
    assert "npu_smi_missing" in res.codes()


def test_without_pyarrow_and_without_a_container_the_schema_check_is_skipped_with_a_hint(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, container={"runtime": "host"})
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path), block=NO_PYARROW)
    skipped = [f for f in res.json()["findings"] if f["code"] == "dataset_schema_skipped"]
    assert len(skipped) == 1, res.out
    assert skipped[0]["severity"] == "warning" and skipped[0]["field"] == "paths.train_files"
    assert "pyarrow is not installed on this host" in skipped[0]["message"]
    assert "pip install 'verlctl[parquet]'" in skipped[0]["hint"]
    # The file checks that need no pyarrow still ran: a missing file is still an error.
    os.remove(tmp_path / "data" / "val.parquet")
    res = run_check_cli("-c", str(spec), "--json", env=bare_env(tmp_path), block=NO_PYARROW)
    assert res.codes()["dataset_missing"] == "paths.val_files"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--budget", "0"], "error: --budget must be a positive number of seconds, not 0\n"),
        (["-c", "/nonexistent/run.yaml"], "error: spec file not found: /nonexistent/run.yaml\n"),
        (["--set", "train.tensor_parallel=0"], None),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], message: str | None) -> None:
    res = run_check_cli(*args, env=bare_env(tmp_path))
    assert res.code == 2 and res.out == ""
    assert len(res.err.splitlines()) == 1 and res.err.startswith("error: ")
    if message is not None:
        assert res.err == message


def test_the_command_module_imports_only_typer_and_the_standard_library() -> None:
    code = (
        "import sys; import verlctl.commands.check; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('pydantic', 'rich', 'docker', 'yaml', 'pyarrow', 'psutil', 'jinja2')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=str(ROOT))
    assert proc.stdout.strip() == "[]"
