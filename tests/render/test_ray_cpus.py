"""Ray's logical CPU count against what verl's actors hold (verl/ray_cpus.py, rule ray_cpus, start_verl.sh).

Real verl 0.9.1 with Ray counting too few CPUs deadlocks without a message (reference/realverl.md, run r1: the
TransferQueue storage units never scheduled). The script test runs the rendered start_verl.sh with the `ray`
TEST DOUBLE of tests/doubles/bin (it records `ray start`'s arguments) and an `nproc` TEST DOUBLE that says how
many cores the node has; the rule tests go through the real plan.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.verl.ray_cpus import cpu_demand

from conftest import BASE_PATHS
from scripts_harness import DOUBLES, render_from, run_start_script

MAIN = "verl.trainer.main_ppo"


def test_demand_per_version_and_entry_point() -> None:
    # 0.9.1 main_ppo (V1): 3 CPUs per device bundle + TransferQueue controller + 8 storage units + headroom
    assert cpu_demand("0.9.1", MAIN, [], 1).head == 3 + 1 + 8 + 1
    assert cpu_demand("0.9.1", MAIN, [], 8).head == 24 + 1 + 8 + 1
    assert cpu_demand("0.9.1", MAIN, [], 8).worker == 24
    units = "transfer_queue.backend.SimpleStorage.num_data_storage_units=1"
    assert cpu_demand("0.9.1", MAIN, [units], 1).head == 3 + 1 + 1 + 1
    assert cpu_demand("0.9.1", MAIN, ["trainer.use_v1=False"], 1).head == 3 + 1  # legacy trainer: no TQ
    # 0.7.0: the task runner holds 1; one-step-off (both versions) holds 10
    assert cpu_demand("0.7.0", MAIN, [], 8).head == 24 + 1 + 1
    assert cpu_demand("0.7.0", "recipe.dapo.main_dapo", [], 8).head == 24 + 1 + 1
    for v, m in (("0.9.1", "verl.experimental.one_step_off_policy.main_ppo"),
                 ("0.7.0", "recipe.one_step_off_policy.main_ppo")):
        assert cpu_demand(v, m, [], 8).head == 24 + 10 + 1


def _findings(**flags):  # type: ignore[no-untyped-def]
    plan = make_plan(load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "algorithm": "grpo", **flags},
                               environ={}))
    return [f for f in plan.findings if f.code in ("ray_cpus_short", "ray_init_on_started_ray")]


def test_an_explicit_num_cpus_below_the_demand_is_an_error_naming_the_field_and_the_number() -> None:
    (f,) = _findings(**{"cluster.ray_start_args": ["--num-cpus=2"]})
    assert f.code == "ray_cpus_short" and f.severity.value == "error" and f.field == "cluster.ray_start_args"
    assert "--num-cpus=2" in f.message and "34 logical CPUs" in f.message and "storage units" in f.message
    assert "verl 0.9.1 verl/single_controller/ray/base.py:146" in f.message
    assert "--num-cpus=34" in (f.hint or "")
    (f,) = _findings(**{"cluster.ray_start_args": ["--num-cpus=33"]})
    assert f.code == "ray_cpus_short"
    # no trigger: enough, or not given (start_verl.sh sizes it)
    assert _findings(**{"cluster.ray_start_args": ["--num-cpus=34"]}) == []
    assert _findings() == []
    # fewer storage units lower the demand
    fewer = ["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]
    assert _findings(**{"cluster.ray_start_args": ["--num-cpus=27"], "extra_overrides": fewer}) == []


def test_ray_init_cpus_in_extra_overrides_is_an_error() -> None:
    (f,) = _findings(extra_overrides=["ray_kwargs.ray_init.num_cpus=16"])
    assert f.code == "ray_init_on_started_ray" and f.field == "extra_overrides"
    assert "cluster.ray_start_args: [--num-cpus=N]" in (f.hint or "")
    assert _findings(extra_overrides=["ray_kwargs.ray_init.num_cpus=null"]) == []


def _start(tmp_path: Path, cores: int, **flags):  # type: ignore[no-untyped-def]
    workdir = tmp_path / "verl"
    workdir.mkdir(parents=True, exist_ok=True)
    rendered = render_from({**BASE_PATHS, "verl_version": "0.9.1", "algorithm": "grpo",
                            "container.workdir": str(workdir), "paths.logs": str(tmp_path / "logs"), **flags})
    scripts = tmp_path / "s"
    rendered.write(scripts)
    nproc_dir = tmp_path / "nproc-double"
    nproc_dir.mkdir(exist_ok=True)
    (nproc_dir / "nproc").write_text(f"#!/bin/sh\n# TEST DOUBLE: a node with {cores} cores\necho {cores}\n")
    (nproc_dir / "nproc").chmod(0o755)
    ray_log = tmp_path / "ray.log"
    rec = run_start_script(scripts, tmp_path / "rec", [], {
        "PATH": f"{nproc_dir}:{DOUBLES}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "VERLCTL_TEST_RAY_LOG": str(ray_log), "VERLCTL_TEST_RAY_DEVICES": "8"})
    assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
    (start,) = [ln for ln in ray_log.read_text().splitlines() if "--head" in ln]
    return start.split(), rec.proc.stdout + rec.proc.stderr


def _cgroup_quota_cpus() -> int | None:
    for quota_file, period_file in (("/sys/fs/cgroup/cpu.max", None),
                                    ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")):
        try:
            text = Path(quota_file).read_text().split()
            quota, period = (text[0], text[1]) if period_file is None else (text[0], Path(period_file).read_text())
            if int(quota) > 0:
                return int(quota) // int(period)
        except (OSError, ValueError, IndexError):
            continue
    return None


def test_start_script_raises_rays_cpu_count_to_the_demand_on_a_small_node(tmp_path: Path) -> None:
    argv, out = _start(tmp_path, cores=2)
    assert "--num-cpus=34" in argv, argv
    assert "Ray would count 2 CPUs on this node but verl's actors hold 34 here" in out


def test_start_script_leaves_rays_count_alone_on_a_big_node_or_when_the_spec_gives_it(tmp_path: Path) -> None:
    quota = _cgroup_quota_cpus()
    if quota is not None and quota < 1000:
        pytest.skip(f"this machine's cgroup CPU quota ({quota}) lowers what Ray counts below the node's cores")
    argv, _ = _start(tmp_path, cores=1000)
    assert not [a for a in argv if a.startswith("--num-cpus")], argv
    argv, _ = _start(tmp_path / "given", cores=2, **{"cluster.ray_start_args": ["--num-cpus=40"]})
    assert [a for a in argv if a.startswith("--num-cpus")] == ["--num-cpus=40"], argv
