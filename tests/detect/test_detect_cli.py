"""`verlctl detect` through the real CLI entry (verlctl.cli.main) in a subprocess: --from-file JSON for
every NPU/GPU capture, summaries, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from detect_helpers import FIXTURES, REPO, fixture_names, run_verlctl
from verlctl.detect.gpu import parse_nvidia_smi
from verlctl.detect.npu import parse_npu_smi_info

NPU_TABLES = [n for n in fixture_names("npu-smi") if not n.startswith(("info-l-", "info-m-", "info-t-"))]


def _one_line_error(run: object, fragment: str) -> None:
    assert run.code == 2, (run.code, run.out, run.err)  # type: ignore[attr-defined]
    err = run.err.strip().splitlines()  # type: ignore[attr-defined]
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], err
    assert "Traceback" not in run.err  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", NPU_TABLES)
def test_npu_from_file_json(name: str) -> None:
    path = FIXTURES / "npu-smi" / name
    run = run_verlctl("detect", "npu", "--from-file", str(path), "--json")
    assert run.code == 0, run.err
    data = run.json()
    assert isinstance(data, dict)
    assert {"tool_version", "devices", "processes", "warnings"} <= set(data)
    for d in data["devices"]:
        assert {"id", "chip", "name", "health", "hbm_used_mb", "hbm_total_mb", "aicore_util"} <= set(d)
    for p in data["processes"]:
        assert {"device", "pid", "name", "memory_mb"} <= set(p)
    # the CLI strips the fixture's provenance header and gives exactly the parser's result
    expected = parse_npu_smi_info(path.read_text().split("# ---\n", 1)[1])
    assert data == expected.model_dump(mode="json")


def test_npu_from_file_values_spot_check() -> None:
    path = FIXTURES / "npu-smi" / "info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt"
    data = run_verlctl("detect", "npu", "--from-file", str(path), "--json").json()
    assert data["tool_version"] == "23.0.rc3"  # type: ignore[index]
    dev = data["devices"][0]  # type: ignore[index]
    assert (dev["id"], dev["chip"], dev["name"], dev["health"], dev["hbm_used_mb"], dev["hbm_total_mb"]) == (
        1, 0, "910A", "Warning", 1, 32768,
    )  # fmt: skip
    assert data["processes"] == [] and data["warnings"] == []  # type: ignore[index]


@pytest.mark.parametrize("name", fixture_names("nvidia-smi"))
def test_gpu_from_file_json(name: str) -> None:
    path = FIXTURES / "nvidia-smi" / name
    run = run_verlctl("detect", "gpu", "--from-file", str(path), "--json")
    assert run.code == 0, run.err
    data = run.json()
    assert isinstance(data, dict)
    assert {"tool_version", "devices", "processes", "warnings"} <= set(data)
    for d in data["devices"]:
        assert {"id", "name", "memory_used_mb", "memory_total_mb", "util"} <= set(d)
    for p in data["processes"]:
        assert {"device", "pid", "name", "memory_mb"} <= set(p)
    assert data == parse_nvidia_smi(path.read_text().split("# ---\n", 1)[1]).model_dump(mode="json")


def test_from_file_without_provenance_header(tmp_path: object) -> None:
    from pathlib import Path

    raw = (FIXTURES / "npu-smi" / "info-910ProB-1card-23.0.rc1-narrow-name-col-with-proc.txt").read_text()
    saved = Path(str(tmp_path)) / "npu.txt"
    saved.write_text(raw.split("# ---\n", 1)[1])  # what a user saves: the bare npu-smi output
    data = run_verlctl("detect", "npu", "--from-file", str(saved), "--json").json()
    assert [p["pid"] for p in data["processes"]] == [55115]  # type: ignore[index]


def test_board_and_network_from_file() -> None:
    board = FIXTURES / "npu-smi" / "info-t-board-i0-910A-23.0.5-TAB-indented-mindcluster.txt"
    data = run_verlctl("detect", "npu", "--board", "--from-file", str(board), "--json").json()
    assert (data["software_version"], data["pci_device_id"]) == ("23.0.5", "0xD801")  # type: ignore[index]
    net = FIXTURES / "network" / "ip-addr-multi-nic-bond-partial-sglang-issue3514.txt"
    ndata = run_verlctl("detect", "network", "--from-file", str(net), "--json").json()
    assert [i["name"] for i in ndata["interfaces"]][:2] == ["lo", "ens8f0np0"]  # type: ignore[index]
    assert ndata["warnings"] == ["ens16f2: the line is cut inside its flags; its state is unknown"]  # type: ignore[index]


def test_summaries_without_json() -> None:
    npu = run_verlctl(
        "detect",
        "npu",
        "--from-file",
        str(FIXTURES / "npu-smi" / "info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt"),
    )
    assert npu.code == 0 and "Warning" in npu.out and "910A" in npu.out and "23.0.rc3" in npu.out
    gpu = run_verlctl(
        "detect",
        "gpu",
        "--from-file",
        str(FIXTURES / "nvidia-smi" / "default-450-a100-80gb-busy-partial-spark-issue8.txt"),
    )
    assert gpu.code == 0 and "A100-SXM-80GB" in gpu.out and "cut short" in gpu.out


def test_missing_from_file_is_a_one_line_error(tmp_path: object) -> None:
    _one_line_error(run_verlctl("detect", "npu", "--from-file", f"{tmp_path}/nope.txt"), "does not exist")
    _one_line_error(run_verlctl("detect", "npu", "--from-file", str(tmp_path)), "is not a regular file")


def test_unknown_what_is_a_one_line_error() -> None:
    _one_line_error(run_verlctl("detect", "tpu"), "unknown thing to detect 'tpu'")


def test_from_file_with_a_live_only_probe_is_an_error() -> None:
    path = FIXTURES / "npu-smi" / "info-310-1card-23.0.0-noproc.txt"
    _one_line_error(run_verlctl("detect", "models", "--from-file", str(path)), "--from-file works with")
    _one_line_error(run_verlctl("detect", "--from-file", str(path)), "not with 'all'")


def test_bad_budget_is_an_error() -> None:
    _one_line_error(run_verlctl("detect", "models", "--budget", "0"), "--budget must be a positive")


def test_models_and_datasets_live(tmp_path: object) -> None:
    from pathlib import Path

    from detect_modeldirs import make_model

    root = Path(str(tmp_path))
    make_model(root / "m" / "Qwen-tiny", shards=1)
    (root / "d").mkdir()
    (root / "d" / "x.parquet").write_text("junk")
    models = run_verlctl("detect", "models", "--json", "--scan-root", str(root), "--budget", "5").json()
    assert [m["name"] for m in models["scan"]["models"]] == ["Qwen-tiny"]  # type: ignore[index]
    assert models["scan"]["parquet_files"] == []  # type: ignore[index]
    data = run_verlctl("detect", "datasets", "--json", "--scan-root", str(root), "--budget", "5").json()
    assert [f["path"] for f in data["scan"]["parquet_files"]] == [str(root / "d" / "x.parquet")]  # type: ignore[index]
    assert data["scan"]["models"] == []  # type: ignore[index]
    assert data["datasets"][0]["findings"][0]["code"] == "dataset.unreadable"  # type: ignore[index]
    text = run_verlctl("detect", "models", "--scan-root", str(root), "--budget", "5")
    assert text.code == 0 and "Qwen-tiny" in text.out


def test_command_module_imports_only_typer_and_stdlib() -> None:
    code = (
        "import sys, verlctl.commands.detect\n"
        "heavy = [m for m in ('docker', 'pyarrow', 'psutil', 'verlctl.detect', 'jinja2', 'questionary') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    assert out.strip() == ""
