"""``nvidia-smi`` parsers against every real capture in tests/fixtures/nvidia-smi (expected values read
off each capture by hand), plus wrappers derived from those captures."""

from __future__ import annotations

import pytest

from detect_helpers import capture, fixture_names
from verlctl.detect.gpu import GpuInfo, parse_nvidia_smi, parse_nvidia_smi_csv, parse_nvidia_smi_table


def rows(info: GpuInfo) -> list[tuple[object, ...]]:
    return [(d.id, d.name, d.memory_used_mb, d.memory_total_mb, d.util) for d in info.devices]


def has_warning(info: GpuInfo, *fragments: str) -> bool:
    return any(all(f in w for f in fragments) for w in info.warnings)


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"

EXPECTED: dict[str, dict[str, object]] = {
    "default-450-a100-80gb-busy-partial-spark-issue8.txt": {
        "versions": ("450.191.01", "450.191.01", "11.3"),
        "rows": [
            (0, "A100-SXM-80GB", 33717, 81252, 84),
            (1, "A100-SXM-80GB", 33695, 81252, 89),
            (2, "A100-SXM-80GB", None, None, None),  # cut at '|  336'
        ],
        "temps": [61, 52, 55],
        "power": [(175, 400), (174, 400), (191, 400)],
        "warnings": [("second row of GPU 2", "cut"), ("ends inside the GPU table",), ("no process table",)],
    },
    "default-525-rtx-a6000-79col-partial-ray-issue32725.txt": {
        "versions": ("525.85.05", "525.85.05", "12.0"),
        "rows": [(0, "NVIDIA RTX A6000", 797, 49140, 0), (1, "NVIDIA RTX A6000", 773, 49140, 0)],
        "temps": [45, 38],
        "power": [(27, 300), (22, 300)],
        "warnings": [("ends inside the GPU table",), ("no process table",)],
    },
    "default-550-1gpu-tesla-p4-partial-wyoming-pr20.txt": {
        "versions": ("550.135", "550.135", "12.4"),
        "rows": [(0, "Tesla P4", 7719, 8192, 6)],
        "temps": [49],
        "power": [(24, 75)],
        "warnings": [("ends inside the process table",)],
    },
    "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt": {
        "versions": ("555.42.02", "555.42.02", "12.5"),
        "rows": [(i, A100, 1, 81920, 0) for i in range(4)],
        "temps": [25, 22, 23, 23],
        "power": [(59, 500), (60, 500), (58, 500), (58, 500)],
        "warnings": [],
    },
    "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt": {
        "versions": ("565.57.01", "565.57.01", "12.7"),
        "rows": [(i, H100, 1, 81559, 0) for i in range(8)],
        "temps": [30, 30, 31, 30, 28, 30, 29, 29],
        "power": [(100, 700), (82, 700), (85, 700), (85, 700), (84, 700), (85, 700), (86, 700), (75, 700)],
        "warnings": [],
    },
    "default-570-h100-idle-partial-unsloth-issue2.txt": {
        "versions": ("570.148.08", "570.148.08", "12.8"),
        "rows": [(0, H100, 0, 81559, 0), (1, H100, 0, 81559, 0)],
        "temps": [28, 29],
        "power": [(69, 700), (74, 700)],
        "warnings": [("ends inside the GPU table",), ("no process table",)],
    },
    "processes-rows-only-many-pids-dle-issue776.txt": {
        "versions": (None, None, None),
        "rows": [],
        "temps": [],
        "power": [],
        "warnings": [("no GPU rows",), ("ends inside the process table",)],
    },
    "query-gpu-and-query-compute-apps-csv-1gpu-l40s-credresolve.txt": {
        "versions": (None, None, None),
        "rows": [(0, "NVIDIA L40S", 9123, 46068, None)],
        "temps": [None],
        "power": [(None, None)],
        "warnings": [("attributed to the only GPU",)],
    },
    # real captures from verlctl's own device check on an H200 host (driver 580)
    "default-580-1gpu-h200-idle-verlctl-device-check.txt": {
        "versions": ("580.159.04", "580.159.04", "13.0"),
        "rows": [(0, "NVIDIA H200", 0, 143771, 0)],
        "temps": [33],
        "power": [(116, 700)],
        "warnings": [],
    },
    "default-580-1gpu-h200-busy-1proc-verlctl-device-check.txt": {
        "versions": ("580.159.04", "580.159.04", "13.0"),
        "rows": [(0, "NVIDIA H200", 2575, 143771, 0)],
        "temps": [34],
        "power": [(123, 700)],
        "warnings": [],
    },
    "query-gpu-noheader-nounits-h200-580-verlctl-device-check.txt": {
        "versions": ("580.159.04", "580.159.04", None),
        "rows": [(0, "NVIDIA H200", 0, 143771, 0)],
        "temps": [32],
        "power": [(80.58, None)],
        "warnings": [],
    },
    "query-gpu-units-header-h200-580-verlctl-device-check.txt": {
        "versions": ("580.159.04", "580.159.04", None),
        "rows": [(0, "NVIDIA H200", 0, 143771, 0)],
        "temps": [32],
        "power": [(80.58, None)],
        "warnings": [],
    },
    "query-compute-apps-noheader-nounits-h200-580-verlctl-device-check.txt": {
        "versions": (None, None, None),
        "rows": [],
        "temps": [],
        "power": [],
        "warnings": [("1 process row(s) do not name their GPU",)],
    },
}


def test_every_gpu_fixture_has_a_test() -> None:
    assert set(fixture_names("nvidia-smi")) == set(EXPECTED)
    assert len(EXPECTED) == 13


def test_driver_580_busy_process_row_and_uuid() -> None:
    busy = parse_nvidia_smi(
        capture("nvidia-smi", "default-580-1gpu-h200-busy-1proc-verlctl-device-check.txt")
    )
    assert [(p.device, p.pid, p.type, p.name, p.memory_mb) for p in busy.processes] == [
        (0, 431, "C", "python3", 2566)
    ]
    assert busy.devices[0].bus_id == "00000000:00:06.0"
    idle = parse_nvidia_smi(capture("nvidia-smi", "default-580-1gpu-h200-idle-verlctl-device-check.txt"))
    assert idle.process_table_seen and idle.processes == []
    q = parse_nvidia_smi(
        capture("nvidia-smi", "query-gpu-noheader-nounits-h200-580-verlctl-device-check.txt")
    )
    assert q.devices[0].uuid == "GPU-abc577fc-50c1-7edc-6bec-496d1da1d162"
    apps = parse_nvidia_smi(
        capture("nvidia-smi", "query-compute-apps-noheader-nounits-h200-580-verlctl-device-check.txt")
    )
    assert [(p.gpu_uuid, p.pid, p.name, p.memory_mb) for p in apps.processes] == [
        ("GPU-abc577fc-50c1-7edc-6bec-496d1da1d162", 431, "python3", 2566)
    ]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture(name: str) -> None:
    exp = EXPECTED[name]
    info = parse_nvidia_smi(capture("nvidia-smi", name))
    assert (info.tool_version, info.driver_version, info.cuda_version) == exp["versions"]
    assert rows(info) == exp["rows"]
    assert [d.temp_c for d in info.devices] == exp["temps"]
    assert [(d.power_w, d.power_cap_w) for d in info.devices] == exp["power"]
    if not exp["warnings"]:
        assert info.warnings == []
    for fragments in exp["warnings"]:  # type: ignore[attr-defined]
        assert has_warning(info, *fragments), (fragments, info.warnings)


def test_complete_tables_show_an_empty_process_table() -> None:
    for name in (
        "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt",
        "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt",
    ):
        info = parse_nvidia_smi(capture("nvidia-smi", name))
        assert info.source == "table"
        assert info.process_table_seen and info.processes == []
        assert all(d.complete for d in info.devices)


def test_555_bus_ids_persistence_and_mode() -> None:
    info = parse_nvidia_smi(
        capture("nvidia-smi", "default-555-4gpu-a100-complete-noproc-thamada-nvidia-smi.txt")
    )
    assert [d.bus_id for d in info.devices] == [
        "00000000:68:00.0", "00000000:9E:00.0", "00000000:C2:00.0", "00000000:D4:00.0",
    ]  # fmt: skip
    assert {(d.persistence_mode, d.perf_state, d.compute_mode, d.fan_percent) for d in info.devices} == {
        ("On", "P0", "Default", None)
    }


def test_525_fan_and_perf_state() -> None:
    info = parse_nvidia_smi(capture("nvidia-smi", "default-525-rtx-a6000-79col-partial-ray-issue32725.txt"))
    assert [(d.fan_percent, d.perf_state) for d in info.devices] == [(30, "P8"), (30, "P8")]


def test_process_rows_only() -> None:
    info = parse_nvidia_smi(capture("nvidia-smi", "processes-rows-only-many-pids-dle-issue776.txt"))
    pids = [12439, 12440, 12441, 12442, 12443, 12444, 12476, 12477]
    assert [(p.device, p.pid) for p in info.processes] == [(3, p) for p in pids] + [(4, p) for p in pids]
    assert [p.memory_mb for p in info.processes[:8]] == [0, 0, 0, 9347, 0, 0, 0, 0]
    assert [p.memory_mb for p in info.processes[8:]] == [0, 0, 0, 0, 9347, 0, 0, 0]
    assert {(p.name, p.type) for p in info.processes} == {("/opt/conda/bin/python3", "C")}


def test_csv_query_gpu_and_compute_apps() -> None:
    info = parse_nvidia_smi(
        capture("nvidia-smi", "query-gpu-and-query-compute-apps-csv-1gpu-l40s-credresolve.txt")
    )
    assert info.source == "csv"
    assert [(p.device, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 44378, "tritonserver", 1836),
        (0, 44966, "/opt/tritonserver/backends/python/triton_python_backend_stub", 974),
        (0, 52114, "/usr/bin/python3", 6294),
    ]


# --------------------------------------------------------------------------------------------------
# wrappers and layout variants derived from the real captures
# --------------------------------------------------------------------------------------------------

H100_8 = "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt"


def test_ray_log_prefix_on_every_line() -> None:
    text = capture("nvidia-smi", H100_8)
    prefixed = "".join("(RayTrainWorker pid=4242) " + ln for ln in text.splitlines(keepends=True))
    assert parse_nvidia_smi(prefixed).model_dump() == parse_nvidia_smi(text).model_dump()


def test_driver_580_plus_border_under_the_header() -> None:
    # driver 580 prints '+-----+' instead of '|-----+' under the NVIDIA-SMI header line
    text = capture("nvidia-smi", H100_8)
    sep = next(ln for ln in text.splitlines() if ln.startswith("|-----"))
    changed = text.replace(sep, "+" + sep[1:], 1)
    assert changed != text
    assert rows(parse_nvidia_smi(changed)) == rows(parse_nvidia_smi(text))


def test_timestamp_and_prompt_lines_are_ignored() -> None:
    text = capture("nvidia-smi", "default-570-h100-idle-partial-unsloth-issue2.txt")
    assert text.startswith("(pythonn3.11) ubuntu@")
    info = parse_nvidia_smi_table(text)
    assert len(info.devices) == 2


def test_csv_without_header_in_the_probe_format() -> None:
    # the live probe's own format (noheader,nounits) for the fields it asks for; a value row per GPU
    text = (
        "0, NVIDIA H100 80GB HBM3, GPU-1b2c3d4e-0000-1111-2222-333344445555, 1, 81559, 0, 30, 100.52, 565.57.01\n"
        "1, NVIDIA H100 80GB HBM3, GPU-1b2c3d4e-0000-1111-2222-333344445556, 40001, 81559, 97, 61, 612.00, 565.57.01\n"
    )
    info = parse_nvidia_smi_csv(text)
    assert rows(info) == [(0, H100, 1, 81559, 0), (1, H100, 40001, 81559, 97)]
    assert [d.power_w for d in info.devices] == [100.52, 612.0]
    assert info.driver_version == "565.57.01"
    apps = parse_nvidia_smi_csv(
        "GPU-1b2c3d4e-0000-1111-2222-333344445556, 777, python3, 39990\n",
        app_fields=("gpu_uuid", "pid", "process_name", "used_memory"),
    )
    info.processes = apps.processes
    from verlctl.detect.gpu import _attach_devices

    _attach_devices(info)
    assert [(p.device, p.pid, p.memory_mb) for p in info.processes] == [(1, 777, 39990)]


def test_not_supported_values_are_none() -> None:
    text = "0, NVIDIA GeForce RTX 4090, GPU-x, 512, 24564, [N/A], 40, [Not Supported], 550.54\n"
    d = parse_nvidia_smi_csv(text).devices[0]
    assert (d.util, d.power_w, d.temp_c) == (None, None, 40)
