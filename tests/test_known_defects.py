"""The known-defect gate (issue 23): a data table matched against the versions read inside the image.

The versions come from the real probe snippet (``VERSIONS_SNIPPET``, run with python3) over an "image" made of
installed-distribution metadata (``*.dist-info``) and a CANN install record, never from an image tag.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verlctl.checks.defects import known_defect_findings
from verlctl.checks.findings import Severity
from verlctl.detect.check_probes import VERSIONS_SNIPPET, ImageVersions, parse_versions
from verlctl.spec.resolve import load_spec
from verlctl.verl import known_defects

from conftest import BASE_PATHS


def installed(tmp: Path, dists: dict[str, str], cann: str | None = None) -> ImageVersions:
    """The real probe over a site dir holding these distributions' metadata (and a CANN toolkit record)."""
    site = tmp / "site"
    site.mkdir(parents=True, exist_ok=True)
    for name, version in dists.items():
        d = site / f"{name}-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}
    if cann:
        home = tmp / "Ascend" / "ascend-toolkit" / "latest"
        (home / "aarch64-linux").mkdir(parents=True)
        (home / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\nversion={cann}\narch=aarch64\n", encoding="utf-8")
        env["ASCEND_TOOLKIT_HOME"] = str(home)
    else:
        env["ASCEND_TOOLKIT_HOME"] = str(tmp / "no-toolkit")
    res = subprocess.run([sys.executable, "-S", "-c", VERSIONS_SNIPPET], capture_output=True, text=True, env=env,
                         timeout=60, check=True)
    v = parse_versions(res.stdout, "container verl-test")
    assert v is not None, res.stdout
    return v


def spec(**flags):
    return load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "cluster.devices": list(range(8)), **flags},
                     environ={}).spec


def codes(findings):
    return [(f.severity, f.message.split(":")[0]) for f in findings if f.code == "known_defect"]


def test_the_probe_reads_the_stack_in_the_image(tmp_path: Path) -> None:
    v = installed(tmp_path, {"verl": "0.9.0", "torch_npu": "2.8.0.post2", "vllm_ascend": "0.11.0rc1"}, cann="8.3.RC1")
    assert v.stack["verl"] == "0.9.0" and v.stack["torch_npu"] == "2.8.0.post2"
    assert v.stack["vllm_ascend"] == "0.11.0rc1" and v.stack["cann"] == "8.3.RC1"
    assert v.stack["vllm"] is None and v.stack["torch"] is None


@pytest.mark.parametrize("mode", ["one_step_off_policy", "separate_async", "fully_async"])
def test_verl_090_on_npu_breaks_hccl_weight_sync_in_every_disaggregated_mode(tmp_path: Path, mode: str) -> None:
    bad = installed(tmp_path / "a", {"verl": "0.9.0"})
    good = installed(tmp_path / "b", {"verl": "0.9.1"})
    f = known_defect_findings(spec(mode=mode), set(), bad)
    assert codes(f) == [(Severity.ERROR, "known defect verl_090_npu_hccl_weight_sync (verl 0.9.0 in container verl-test)")]
    assert "#7416" in f[0].message and "#7487" in f[0].message and "0.9.1" in (f[0].hint or "")
    assert "#7488 on main" in f[0].message and "release/v0.9.0 only" not in f[0].message  # the fix is on both
    assert codes(known_defect_findings(spec(mode=mode), set(), good)) == []
    assert codes(known_defect_findings(spec(mode=mode, device="gpu"), set(), bad)) == []
    assert codes(known_defect_findings(spec(mode="sync"), set(), bad)) == []


def test_the_tag_is_never_read(tmp_path: Path) -> None:
    """An image whose TAG says v0.9.0 but whose installed verl is 0.9.1 does not match the 0.9.0 entry."""
    s = spec(mode="separate_async", **{"container.image": "quay.io/ascend/verl:v0.9.0-cann9.0.0-a3-ubuntu22.04"})
    assert codes(known_defect_findings(s, set(), installed(tmp_path, {"verl": "0.9.1"}))) == []
    # ... and with nothing read there is no claim either way
    assert codes(known_defect_findings(s, set(), installed(tmp_path / "x", {}))) == []


def test_old_torch_npu_silently_loses_expandable_segments(tmp_path: Path) -> None:
    old = installed(tmp_path / "a", {"verl": "0.9.1", "torch_npu": "2.8.0.post2"})
    new = installed(tmp_path / "b", {"verl": "0.9.1", "torch_npu": "2.9.0"})
    f = known_defect_findings(spec(), set(), old)
    assert codes(f) == [(Severity.WARNING, "known defect torch_npu_expandable_segments_off (verl 0.9.1, torch_npu "
                                           "2.8.0.post2 in container verl-test)")]
    assert codes(known_defect_findings(spec(), set(), new)) == []
    # The fix does not send the user into another defect: it no longer advises exporting expandable segments
    # (vLLM-Ascend's sleep mode refuses it), and says so.
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in (f[0].hint or "")
    assert "Do not export" in (f[0].hint or "") and "sleep mode" in (f[0].hint or "")
    assert "no longer sets PYTORCH_NPU_ALLOC_CONF" not in f[0].message  # no verl release ever set it
    assert "set_allocator_settings" in f[0].message and "platform_npu.py:100-107" in f[0].message
    env = {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}}
    assert codes(known_defect_findings(spec(**env), set(), old)) == [
        (Severity.ERROR, "known defect vllm_ascend_sleep_mode_expandable_segments")]


@pytest.mark.parametrize(("device", "name", "entry"), [
    ("npu", "PYTORCH_NPU_ALLOC_CONF", "vllm_ascend_sleep_mode_expandable_segments"),
    ("gpu", "PYTORCH_CUDA_ALLOC_CONF", "vllm_sleep_mode_expandable_segments"),
])
def test_expandable_segments_in_the_env_break_vllms_sleep_mode(device: str, name: str, entry: str) -> None:
    """vLLM's (and vLLM-Ascend's) sleep-mode allocator asserts 'Expandable segments are not compatible with memory
    pool'; verl turns sleep mode on by default. ``plan`` decides it (no version needed)."""
    from verlctl.commands.check import spec_findings

    def found(**flags):
        resolved = load_spec(None, flags={**BASE_PATHS, "device": device, "strategy": "fsdp", **flags}, environ={})
        return [f for f in spec_findings(resolved)[0] if f.code == "known_defect"]

    bad = found(env={name: "max_split_size_mb:256,expandable_segments:True"})
    assert [(f.severity, f.field) for f in bad] == [(Severity.ERROR, f"env.{name}")]
    assert entry in bad[0].message and "memory pool" in bad[0].message and "enable_sleep_mode=False" in (bad[0].hint or "")
    assert found(env={name: "expandable_segments:False"}) == []
    assert found() == []
    off = "actor_rollout_ref.rollout.enable_sleep_mode=False"
    assert found(env={name: "expandable_segments:True"}, extra_overrides=[off]) == []
    assert found(env={name: "expandable_segments:True"}, **{"train.rollout_engine": "sglang"}) == []


def test_device_ids_out_of_order_are_refused_by_plan() -> None:
    from verlctl.commands.check import spec_findings

    def found(devices):
        resolved = load_spec(None, flags={**BASE_PATHS, "cluster.devices": devices, "strategy": "fsdp"}, environ={})
        return [f for f in spec_findings(resolved)[0] if f.code == "known_defect"]

    bad = found([1, 0, 2, 3, 4, 5, 6, 7])
    assert [(f.severity, f.field) for f in bad] == [(Severity.ERROR, "cluster.devices")]
    assert "ascending" in bad[0].message and "Trinity-RFT PR #618" in bad[0].message
    assert found(list(range(8))) == []


def test_a_new_entry_needs_no_code_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "defects.yaml"
    table.write_text(known_defects.TABLE.read_text(encoding="utf-8") + """
  - id: vllm_ascend_graph_capture
    issue: "vllm-project/vllm-ascend #9596"
    effect: "ACL graph capture fails at engine init with TP 8"
    fix: "set actor_rollout_ref.rollout.enforce_eager=True"
    severity: warning
    when:
      vllm_ascend: ">=0.11.0,<0.12"
      cann: "<9.0"
      device: [npu]
      modes: [sync, separate_async]
      features: [prefix_cache]
""", encoding="utf-8")
    monkeypatch.setenv("VERLCTL_KNOWN_DEFECTS", str(table))
    v = installed(tmp_path, {"verl": "0.9.1", "vllm_ascend": "0.11.0rc1"}, cann="8.3.RC1")
    f = known_defect_findings(spec(mode="separate_async"), {"prefix_cache"}, v)
    assert codes(f) == [(Severity.WARNING, "known defect vllm_ascend_graph_capture (vllm_ascend 0.11.0rc1, cann "
                                           "8.3.RC1 in container verl-test)")]
    assert codes(known_defect_findings(spec(mode="separate_async"), set(), v)) == []  # the feature is off
    assert codes(known_defect_findings(spec(mode="fully_async"), {"prefix_cache"}, v)) == []


@pytest.mark.parametrize(("entry", "says"), [
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: fatal\n", "severity must be error or warning"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {verl: '0.9'}\n",
     "when.verl part '0.9' is not <op><version>"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {cuda: '<12'}\n",
     "unknown condition 'cuda'"),
    ("  - id: x\n    effect: e\n    fix: f\n    severity: error\n", "'issue' is missing"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {env_contains: A}\n",
     "when.env_contains must be a mapping"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {engine: vllm}\n",
     "when.engine must be a list"),
])
def test_a_malformed_table_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str,
                                              says: str) -> None:
    table = tmp_path / "bad.yaml"
    table.write_text("defects:\n" + entry, encoding="utf-8")
    monkeypatch.setenv("VERLCTL_KNOWN_DEFECTS", str(table))
    f = known_defect_findings(spec(), set(), None)
    assert [x.code for x in f] == ["known_defect_table"] and says in f[0].message, f[0].message
    assert "\n" not in f[0].message


def test_the_packaged_table_is_valid_and_ships_with_the_package() -> None:
    ids = [d.id for d in known_defects.load()]
    assert ids[:5] == ["verl_090_npu_hccl_weight_sync", "torch_npu_expandable_segments_off",
                       "vllm_ascend_sleep_mode_expandable_segments", "vllm_sleep_mode_expandable_segments",
                       "ascend_visible_devices_not_ascending"]
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    assert "verl/*.yaml" in pyproject


def test_check_matches_the_table_against_the_image_facts(tmp_path: Path) -> None:
    """`verlctl check`'s machine findings: the versioned entries, from the stack the probe read."""
    from verlctl.checks.facts import CheckFacts
    from verlctl.checks.machine_checks import machine_findings
    from verlctl.detect.machine import MachineState

    flags = {**BASE_PATHS, "verl_version": "0.9.1", "mode": "separate_async", "container.runtime": "host",
             "cluster.devices": list(range(8)), "strategy": "fsdp"}
    resolved = load_spec(None, flags=flags, environ={})
    stack = installed(tmp_path, {"verl": "0.9.0", "ray": "2.49.0"})
    found = [f for f in machine_findings(resolved, CheckFacts(machine=MachineState(), image_versions=stack))
             if f.code == "known_defect"]
    assert [(f.severity, f.field) for f in found] == [(Severity.ERROR, "container.runtime")]
    assert "verl_090_npu_hccl_weight_sync" in found[0].message
    assert not [f for f in machine_findings(resolved, CheckFacts(machine=MachineState(), image_versions=None))
                if f.code == "known_defect"]
