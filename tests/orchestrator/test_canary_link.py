"""A canary whose directory under the checkpoints (``<ckpt>/.verlctl-canary`` or its run's folder) is a
symbolic link (planted, or left by hand) fails at once naming the link: nothing is written through it and no
phase starts (it used to fail two seconds later as "the training did not end well")."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

from verlctl.errors import RuntimeFailure


def _canary(tmp_path: Path):  # type: ignore[no-untyped-def]
    from rich.console import Console

    from verlctl.orchestrator.canary import Canary
    from verlctl.orchestrator.launch import Launcher, LaunchOptions
    from verlctl.plan import make_plan
    from verlctl.runtime.executor import HostExecutor
    from verlctl.runtime.records import RunRecord
    from verlctl.spec.resolve import load_spec

    spec = {"paths": {"model": "/m/M", "train_files": ["/d/t.parquet"], "val_files": ["/d/v.parquet"],
                      "checkpoints": str(tmp_path / "ckpt"), "logs": str(tmp_path / "logs")},
            "container": {"runtime": "host"}, "device": "gpu"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    resolved = load_spec(tmp_path / "spec.yaml", environ={})
    launcher = Launcher(resolved, LaunchOptions(yes=True, canary=True),
                        Console(file=open(os.devnull, "w"), width=200))  # noqa: SIM115
    launcher.executor = HostExecutor()

    def no_phase(*_a: object, **_k: object) -> None:
        raise AssertionError("a canary phase was started")

    launcher.start = no_phase  # type: ignore[method-assign]
    launcher.copy_scripts = no_phase  # type: ignore[method-assign]
    record = RunRecord(run_id="20261206-120000-canary-ab12", created_at=time.time(), runtime="host",
                       workdir=str(tmp_path), scripts_dir=str(tmp_path / "scripts"), run_log=str(tmp_path / "l.log"),
                       train_log="", checkpoints=str(tmp_path / "ckpt"), experiment="canary", verl_version="0.7.0")
    return Canary(launcher, record, make_plan(resolved), timeout_s=30)


@pytest.mark.parametrize("planted", [".verlctl-canary", ".verlctl-canary/20261206-120000-canary-ab12"])
def test_a_canary_dir_that_is_a_link_is_named_and_nothing_starts(tmp_path: Path, planted: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / "ckpt" / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim)
    canary = _canary(tmp_path)
    with pytest.raises(RuntimeFailure) as caught:
        canary.run()
    assert f"{link} is a symbolic link" in caught.value.message and "nothing was written" in caught.value.message
    assert list(victim.iterdir()) == [] and link.is_symlink()
