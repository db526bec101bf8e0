"""Free space for the checkpoints and the logs (U22): `check` (and `launch`, the same verdict) compares the free
space of paths.checkpoints with one checkpoint as verl saves it by default for the spec's strategy (Megatron:
bf16 weights + fp32 master weights + Adam m and v = 14 bytes per parameter; FSDP: fp32 weights + Adam m and v =
12), and of paths.logs with the run's logs (plus a checkpoint when both share a file system), with the numbers
and the path in the message. Real tmpfs mounts, real statvfs, real model directories."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from test_check_machine import mount_tmpfs, run_check, write_big_model
from verlctl.checks.checkpoints import (
    CHECKPOINT_LAYOUT,
    LOG_BYTES_PER_STEP,
    LOG_BYTES_START,
    check_checkpoints,
    checkpoint_bytes,
    log_bytes,
)
from verlctl.detect.check_probes import probe_checkpoint_dir
from verlctl.detect.models import inspect_model
from verlctl.spec.resolve import load_spec

from launch_support import write_model, write_run_files


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Any]:
    made: list[Path] = []

    def make(name: str, size: str) -> Path:
        target = tmp_path / name
        mount_tmpfs(target, f"size={size}")
        made.append(target)
        return target

    yield make
    for t in reversed(made):
        subprocess.run(["umount", "-l", str(t)], check=False)


def resolve(**flags: Any) -> Any:
    return load_spec(None, flags=flags, environ={})


def workspace(tmp_path: Path, **more: Any) -> dict[str, Any]:
    return {**write_run_files(tmp_path), "container.runtime": "host", "train.tensor_parallel": 2,
            "train.pipeline_parallel": 1, **more}


def test_the_field_case_a_full_disk_for_checkpoints_and_logs_is_refused_with_numbers(
        tmp_path: Path, tiny_disk: Any) -> None:
    """U22's repro: checkpoints and logs on a 1 MiB tmpfs with 64 KiB free; a model of a million parameters
    (a safetensors header that declares them)."""
    disk = tiny_disk("tiny", "1m")
    (disk / "filler").write_bytes(b"\0" * (1024 - 64) * 1024)
    model = write_big_model(tmp_path / "models" / "big", 1_000_000)
    ws = workspace(tmp_path, **{"paths.checkpoints": str(disk / "ckpt"), "paths.logs": str(disk / "logs"),
                                "paths.model": str(model)})
    found = {f.code: f for f in run_check(resolve(**ws))}
    ck = found["checkpoint_space"]
    assert ck.severity.value == "error" and ck.field == "paths.checkpoints"
    assert ck.message.startswith(f"0.1 MiB free at {disk}") and "one megatron checkpoint" in ck.message
    assert "about 13.4 MiB" in ck.message  # 1,000,000 x 14 bytes
    assert "would fail at its first save" in ck.message
    log = found["log_space"]
    assert log.severity.value == "error" and log.field == "paths.logs" and str(disk) in log.message
    assert "and one checkpoint on the same file system" in log.message


@pytest.mark.parametrize("strategy", ["megatron", "fsdp", "fsdp2"])
def test_one_checkpoint_is_sized_by_strategy_as_verl_saves_it(tmp_path: Path, tiny_disk: Any, strategy: str) -> None:
    params = 100_000
    model = inspect_model(str(write_big_model(tmp_path / "models" / "big", params)))
    per_param = {"megatron": 14, "fsdp": 12, "fsdp2": 12}[strategy]
    assert checkpoint_bytes(params, strategy) == params * per_param
    assert sum(CHECKPOINT_LAYOUT[strategy][:2]) == per_param
    # a disk between the FSDP and the Megatron size tells them apart: 1.3 MB free
    disk = tiny_disk("d", "1300k")
    spec = resolve(**{"paths.checkpoints": str(disk / "exp"), "strategy": strategy,
                      "paths.model": str(tmp_path / "models" / "big"), "train.tensor_parallel": 1,
                      "train.pipeline_parallel": 1}).spec
    probe = probe_checkpoint_dir(str(disk / "exp"))
    codes = [f.code for f in check_checkpoints(spec, probe, model)]
    assert ("checkpoint_space" in codes) is (strategy == "megatron"), codes


def test_a_model_without_safetensors_is_sized_from_its_config(tmp_path: Path) -> None:
    d = tmp_path / "models" / "cfg-only"
    write_model(d)
    for f in d.glob("*.safetensors*"):
        f.unlink()
    assert inspect_model(str(d)).param_count_source != "safetensors"
    spec = resolve(**{"paths.model": str(d), "paths.checkpoints": str(tmp_path / "ck")}).spec
    probe = probe_checkpoint_dir(str(tmp_path / "ck"))
    probe.free_bytes = 1  # a real probe of a directory, its free space set to one byte
    (f,) = check_checkpoints(spec, probe, None)
    assert f.code == "checkpoint_space" and "parameter model is about" in f.message


def test_an_unknown_size_or_free_space_is_a_warning_never_a_silent_pass(tmp_path: Path) -> None:
    spec = resolve(**{"paths.model": str(tmp_path / "nothing"), "paths.checkpoints": str(tmp_path / "ck")}).spec
    probe = probe_checkpoint_dir(str(tmp_path / "ck"))
    (f,) = check_checkpoints(spec, probe, None)
    assert (f.code, f.severity.value) == ("checkpoint_size_unknown", "warning")
    probe.free_bytes = None
    (g,) = check_checkpoints(spec, probe, None)
    assert (g.code, g.severity.value) == ("checkpoint_space_unknown", "warning")


def test_logs_alone_on_their_own_disk(tmp_path: Path, tiny_disk: Any) -> None:
    disk = tiny_disk("logs", "2m")
    ws = workspace(tmp_path, **{"paths.checkpoints": str(tmp_path / "ckpt"), "paths.logs": str(disk / "logs"),
                                "train.steps": 4})
    found = [f for f in run_check(resolve(**ws)) if f.code.startswith("log_")]
    assert [f.code for f in found] == ["log_space"]
    assert "and one checkpoint" not in found[0].message  # the checkpoints are elsewhere
    assert log_bytes(resolve(**ws).spec) == LOG_BYTES_START + 4 * LOG_BYTES_PER_STEP
    big = tiny_disk("logs-big", "128m")
    ws["paths.logs"] = str(big / "logs")
    assert not [f for f in run_check(resolve(**ws)) if f.code.startswith("log_")]


def test_checkpoint_cites_name_what_verl_saves() -> None:
    from verlctl.checks.checkpoints import CHECKPOINT_CITES

    assert {c.version for c in CHECKPOINT_CITES} == {"0.7.0", "0.9.1"}
    assert any("save_contents" in c.text for c in CHECKPOINT_CITES)
