"""Ray's NPU accelerator probe complains about a missing pyACL (`No module named 'acl'`) on every start on a
host with Ascend device nodes, then runs on: it must not be reported as a failure (it once made the watcher
call a healthy run failed)."""

from __future__ import annotations

from pathlib import Path

from verlctl.monitor.catalogue import classify_lines

from conftest import fixture_text

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "ray" / "ray-start-npu-probe-no-acl-benign-captured.txt"


def test_ray_npu_probe_without_acl_is_not_a_failure() -> None:
    text = fixture_text(FIXTURE)
    assert "No module named 'acl'" in text
    assert classify_lines(text.splitlines()) == []


def test_other_missing_modules_still_are() -> None:
    lines = ["ModuleNotFoundError: No module named 'aclnn_ext'", "ModuleNotFoundError: No module named 'acl.rt'"]
    found = classify_lines(lines)
    assert [f.category for f in found] == ["missing_module"]
    assert "aclnn_ext" in found[0].message


def test_diagnose_of_the_capture_finds_nothing(tmp_path: Path) -> None:
    from conftest import run_cli

    log = tmp_path / "ray.log"
    log.write_text(fixture_text(FIXTURE))
    res = run_cli("diagnose", str(log), "--json")
    assert res.code == 0, res.out
    assert res.json()["findings"] == []
