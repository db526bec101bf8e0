"""A launch is a list of stages walked by one loop (``backends.base.walk``); a relaunch walks fewer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.backends.base import RELAUNCH_STAGES, Stage
from verlctl.orchestrator.stages import walk


def test_walk_runs_each_stage_in_order_and_refuses_a_stage_without_a_step() -> None:
    seen: list[Stage] = []
    walk((Stage.COPY, Stage.START_HEAD), {s: (lambda s=s: seen.append(s)) for s in Stage})
    assert seen == [Stage.COPY, Stage.START_HEAD]
    with pytest.raises(ValueError, match="start_head"):
        walk((Stage.COPY, Stage.START_HEAD), {Stage.COPY: lambda: seen.append(Stage.COPY)})
    assert seen == [Stage.COPY, Stage.START_HEAD]  # nothing ran: the whole list is checked first


def test_a_relaunch_creates_no_container_and_checks_no_readiness() -> None:
    assert Stage.PREPARE_TARGET not in RELAUNCH_STAGES and Stage.READINESS not in RELAUNCH_STAGES
    assert RELAUNCH_STAGES.index(Stage.COPY) < RELAUNCH_STAGES.index(Stage.START_HEAD)


def _launcher(tmp_path: Path, **options: Any) -> Any:
    from rich.console import Console

    from verlctl.orchestrator.launch import Launcher, LaunchOptions
    from verlctl.spec.resolve import load_spec

    spec = {"paths": {"model": "/m/M", "train_files": ["/d/t.parquet"], "val_files": ["/d/v.parquet"],
                      "checkpoints": str(tmp_path / "ckpt"), "logs": str(tmp_path / "logs")},
            "container": {"runtime": "host"}, "device": "gpu"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    return Launcher(load_spec(tmp_path / "spec.yaml", environ={}), LaunchOptions(yes=True, **options),
                    Console(file=open("/dev/null", "w"), width=200))  # noqa: SIM115


@pytest.mark.parametrize("canary", [False, True])
def test_every_stage_a_launch_plans_has_its_step(tmp_path: Path, canary: bool) -> None:
    from verlctl.runtime.records import RunRecord

    launcher = _launcher(tmp_path, canary=canary)
    stages = launcher.launch_stages()
    assert (Stage.CANARY in stages) is canary and Stage.START_WORKERS not in stages  # one node
    assert stages[0] is Stage.PREPARE_TARGET and stages[-1] is Stage.RECORD
    assert stages.index(Stage.START_HEAD) < stages.index(Stage.PREFLIGHT) < stages.index(Stage.OPEN_GATE)
    record = RunRecord(run_id="r1", created_at=0, runtime="host", workdir=str(tmp_path), scripts_dir="/s",
                       run_log="/l/r1.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0")
    from verlctl.plan import make_plan

    steps = launcher._launch_steps(record, _walk_state(make_plan(launcher.resolved)), "/s", str(tmp_path))
    assert set(stages) <= set(steps)


def _walk_state(plan: Any) -> Any:
    from verlctl.orchestrator import launch

    return launch._Walk(plan)  # noqa: SLF001 - the loop's state, built as _execute builds it


def test_relaunch_walks_the_relaunch_stages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The relaunch goes through the same loop with fewer stages; the steps run with the prepared attempt."""
    from verlctl.orchestrator import launch
    from verlctl.plan import make_plan
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import RunRecord

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    launcher = _launcher(tmp_path)
    walked: list[tuple[Stage, ...]] = []
    ran: list[str] = []

    def spy(stages: tuple[Stage, ...], steps: Any) -> None:
        walked.append(stages)
        steps[Stage.PREFLIGHT]()  # the attempt was prepared: nothing to do
        steps[Stage.START_WORKERS]()  # one node: nothing to do

    monkeypatch.setattr(launch, "walk", spy)
    monkeypatch.setattr(launcher, "prepare_relaunch", lambda *a: ran.append("prepare_relaunch"))
    record = RunRecord(run_id="r1", created_at=0, runtime="host", workdir=str(tmp_path), scripts_dir="/s",
                       run_log="/l/r1.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0")
    the_plan = make_plan(launcher.resolved)
    launcher.relaunch(HostExecutor(), record, "test", None, prepared=(the_plan, the_plan.render()))
    assert walked == [RELAUNCH_STAGES] and ran == []
