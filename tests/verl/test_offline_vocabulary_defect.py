"""verl 0.7.0 with vLLM exactly 0.12.0 downloads a vocabulary when its rollout server module is imported: the
known-defect gate (verlctl/verl/known_defects.yaml, matched by ``check`` and ``launch`` against the stack read
inside the image) warns and names both fixes (a local copy through TIKTOKEN_ENCODINGS_BASE, or vLLM 0.11.0 as verl
0.7.0's own Ascend image). The citation is checked against verl 0.7.0's own source under .cache/verl."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_known_defects import codes, installed
from verlctl.checks.defects import known_defect_findings
from verlctl.checks.findings import Severity
from verlctl.spec.resolve import load_spec
from verlctl.verl import known_defects

from conftest import BASE_PATHS, ROOT

ENTRY = "verl_070_vllm_0120_downloads_harmony_vocabulary"
ASYNC_SERVER = ROOT / ".cache" / "verl" / "0.7.0" / "verl" / "workers" / "rollout" / "vllm_rollout" / "vllm_async_server.py"


def spec(**flags):  # type: ignore[no-untyped-def]
    return load_spec(None, flags={**BASE_PATHS, "verl_version": "0.7.0", "device": "gpu", "strategy": "fsdp2",
                                  "algorithm": "dapo", **flags}, environ={}).spec


def test_verl_070_calls_get_encoding_at_import_with_vllm_0120_only() -> None:
    """The lines the entry cites (vllm_async_server.py:62-69) say what the entry says."""
    lines = ASYNC_SERVER.read_text(encoding="utf-8").splitlines()
    assert lines[62 - 1] == 'if _VLLM_VERSION > version.parse("0.11.0"):'
    assert lines[66 - 1].strip() == 'if _VLLM_VERSION == version.parse("0.12.0"):'
    assert lines[67 - 1].strip() == "from vllm.entrypoints.harmony_utils import get_encoding"
    assert lines[69 - 1].strip() == "get_encoding()"
    assert lines[70 - 1] == "else:" and "from vllm.utils import FlexibleArgumentParser" in lines[71 - 1]
    entry = next(d for d in known_defects.load() if d.id == ENTRY)
    assert "vllm_async_server.py:62-69" in entry.issue


@pytest.mark.parametrize("vllm", ["0.12.0", "0.12.0+cpu", "0.12.0+empty"])
def test_verl_070_with_vllm_0120_is_warned_with_both_fixes(tmp_path: Path, vllm: str) -> None:
    stack = installed(tmp_path, {"verl": "0.7.0", "vllm": vllm})
    f = known_defect_findings(spec(), set(), stack)
    assert codes(f) == [(Severity.WARNING, f"known defect {ENTRY} (verl 0.7.0, vllm {vllm} in container verl-test)")]
    assert f[0].field == "container.image"
    assert "openaipublic.blob.core.windows.net" in f[0].message and "offline" in f[0].message
    hint = f[0].hint or ""
    assert "TIKTOKEN_ENCODINGS_BASE" in hint and "o200k_base.tiktoken" in hint
    assert "vLLM 0.11.0" in hint and "Ascend image" in hint


@pytest.mark.parametrize(("dists", "flags"), [
    ({"verl": "0.7.0", "vllm": "0.11.0+cpu"}, {}),  # verl takes its else branch: no get_encoding()
    ({"verl": "0.7.0", "vllm": "0.12.1"}, {}),  # only == 0.12.0 calls it
    ({"verl": "0.9.1", "vllm": "0.12.0", "TransferQueue": "0.1.10"}, {"verl_version": "0.9.1"}),
    ({"verl": "0.7.0", "vllm": "0.12.0"}, {"env": {"TIKTOKEN_ENCODINGS_BASE": "/opt/tiktoken"}}),  # the fix
    ({"verl": "0.7.0", "vllm": "0.12.0"}, {"train.rollout_engine": "sglang"}),
    ({"verl": "0.7.0"}, {}),  # no vLLM read in the image: no claim
])
def test_no_warning_where_verl_does_not_download(tmp_path: Path, dists: dict[str, str], flags: dict) -> None:
    assert codes(known_defect_findings(spec(**flags), set(), installed(tmp_path, dists))) == []


def test_an_empty_tiktoken_base_is_not_the_fix(tmp_path: Path) -> None:
    stack = installed(tmp_path, {"verl": "0.7.0", "vllm": "0.12.0"})
    assert [c[1].split(" (")[0] for c in codes(known_defect_findings(
        spec(env={"TIKTOKEN_ENCODINGS_BASE": " "}), set(), stack))] == [f"known defect {ENTRY}"]


def test_unless_env_set_must_be_a_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "bad.yaml"
    table.write_text("defects:\n  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: warning\n"
                     "    when: {unless_env_set: TIKTOKEN_ENCODINGS_BASE}\n", encoding="utf-8")
    monkeypatch.setenv("VERLCTL_KNOWN_DEFECTS", str(table))
    f = known_defect_findings(spec(), set(), None)
    assert [x.code for x in f] == ["known_defect_table"]
    assert "when.unless_env_set must be a list" in f[0].message and "\n" not in f[0].message
