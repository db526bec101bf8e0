"""``npu-smi`` parsers against every real capture in tests/fixtures/npu-smi (expected values read off
each capture by hand), plus robustness variants derived from those captures."""

from __future__ import annotations

import pytest

from detect_helpers import capture, fixture_names
from verlctl.detect.npu import NpuInfo, parse_npu_smi_info
from verlctl.detect.npu_kv import parse_npu_board, parse_npu_list, parse_npu_mapping, parse_npu_usages

# (id, chip, name, health, hbm_used_mb, hbm_total_mb) per chip row, as the capture shows them.
DevRow = tuple[int, "int | None", str, str, "int | None", "int | None"]


def rows(info: NpuInfo) -> list[tuple[object, ...]]:
    return [(d.id, d.chip, d.name, d.health, d.hbm_used_mb, d.hbm_total_mb) for d in info.devices]


def procs(info: NpuInfo) -> list[tuple[object, ...]]:
    return [(p.device, p.chip, p.pid, p.name, p.memory_mb) for p in info.processes]


def has_warning(info: NpuInfo, *fragments: str) -> bool:
    return any(all(f in w for f in fragments) for w in info.warnings)


TABLE_FIXTURES = [n for n in fixture_names("npu-smi") if not n.startswith(("info-l-", "info-m-", "info-t-"))]
KV_FIXTURES = [n for n in fixture_names("npu-smi") if n.startswith(("info-l-", "info-m-", "info-t-"))]


def test_every_npu_fixture_has_a_test() -> None:
    tested = set(EXPECTED_TABLES) | set(KV_TESTED)
    assert set(fixture_names("npu-smi")) == tested
    assert len(tested) == 19


# --------------------------------------------------------------------------------------------------
# the info table: one entry per capture
# --------------------------------------------------------------------------------------------------

EXPECTED_TABLES: dict[str, dict[str, object]] = {
    "info-310-1card-23.0.0-noproc.txt": {
        "version": ("23.0.0", "23.0.0"),
        "family": "310",
        "rows": [(0, 0, "310", "OK", None, None)],
        "procs": [],
        "idle": [0],
        "warnings": [],
    },
    "info-910-proB-8card-24.1.0.txt": {
        "version": ("24.1.0", "24.1.0"),
        "family": "910",
        "rows": [
            (0, 0, "910B", "OK", 1365, 32768),
            (1, 0, "910B", "OK", 4, 32768),
            (2, 0, "910B", "OK", 4, 32768),
            (3, 0, "910B", "OK", 3, 32768),
            (4, 0, "910B", "OK", 3, 32768),
            (5, 0, "910B", "OK", 5, 32768),
            (6, 0, "910B", "OK", 5, 32768),
            (7, 0, "910B", "OK", 4, 32768),
        ],
        "procs": [],
        "idle": [],
        "warnings": [("no process table",)],
    },
    "info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt": {
        "version": ("23.0.rc3", "23.0.rc3"),
        "family": "910",
        "rows": [(1, 0, "910A", "Warning", 1, 32768)],
        "procs": [],
        "idle": [1],
        "warnings": [],
    },
    "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt": {
        "version": ("23.0.rc2.b090", "23.0.rc2.b090"),
        "family": "910",
        "rows": [(0, 0, "910B1", "OK", 64293, 65536), (7, 0, "910B1", "OK", 64114, 65536)],
        "procs": [
            (0, 0, 2441447, "python", 59618),
            (1, 0, 2441448, "python", 59834),
            (7, 0, 2441454, "python", 59802),
        ],
        "idle": [],
        "warnings": [("elided",), ("ends inside the process table",)],
    },
    "info-910B2-24.1.0.3-partial-vllm-ascend-issue1767.txt": {
        "version": ("24.1.0.3", "24.1.0.3"),
        "family": "910",
        "rows": [
            (0, 0, "910B2", "OK", 3397, 65536),
            (1, 0, "910B2", "OK", 3395, 65536),
            (2, 0, "910B2", "OK", 3396, 65536),
        ],
        "procs": [],
        "idle": [],
        "warnings": [("chip row of NPU 2", "cut"), ("ends inside the device table",), ("no process table",)],
    },
    "info-910B3-partial-noversion-vllm-ascend-issue1130.txt": {
        "version": (None, None),
        "family": "910",
        "rows": [
            (0, 0, "910B3", "OK", 3379, 65536),
            (1, 0, "910B3", "OK", 3385, 65536),
            (2, 0, "910B3", "OK", 3380, 65536),
            (3, None, "910B3", "OK", None, None),
        ],
        "procs": [],
        "idle": [],
        "warnings": [("no 'npu-smi",), ("NPU 3", "only its first row"), ("no process table",)],
    },
    "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt": {
        "version": ("25.0.rc1.1", "25.0.rc1.1"),
        "family": "910",
        "rows": [(i, 0, "910B4", "OK", 2654, 32768) for i in range(7)] + [(7, 0, "910B4", "OK", 2653, 32768)],
        "procs": [],
        "idle": [0, 1, 2, 3, 4, 5, 6, 7],
        "warnings": [],
    },
    "info-910ProB-1card-23.0.rc1-narrow-name-col-with-proc.txt": {
        "version": ("23.0.rc1", "23.0.rc1"),
        "family": "910",
        "rows": [(0, 0, "910ProB", "OK", 30711, 32768)],
        "procs": [(0, 0, 55115, "python", 30784)],
        "idle": [],
        "warnings": [("ends inside the process table",)],
    },
    "info-a3-24.1.rc3.7-collect-env-partial-vllm-ascend-issue2035.txt": {
        "version": ("24.1.rc3.7", "24.1.rc3.7"),
        "family": "a3",
        "rows": [
            (0, 0, "Ascend910", "OK", 3397, 65536),
            (0, 1, "Ascend910", "OK", 3186, 65536),
            (1, 0, "Ascend910", "OK", None, None),  # cut after Memory-Usage: no HBM value visible
        ],
        "procs": [],
        "idle": [],
        "warnings": [("chip row of NPU 1", "cut"), ("NPU 1: 1 of the 2 chips",), ("no process table",)],
    },
    "info-a3-26.0.rc2-tail-process-section-with-container-pid-vllm-ascend-issue12980.txt": {
        "version": (None, None),
        "family": "a3",
        "rows": [(7, 1, "Ascend910", "OK", 31877, 65536)],
        "procs": [(0, 0, 632268, "python3.1", 197)],
        "idle": [1, 2],
        "warnings": [
            ("no 'npu-smi",),
            ("no device table header",),
            ("NPU 7: 1 of the 2 chips",),
            ("ends inside the process table",),
        ],
    },
    "info-a3-Ascend910-25.2.1-partial-ucm-issue748.txt": {
        "version": ("25.2.1", "25.2.1"),
        "family": "a3",
        "rows": [
            (0, 0, "Ascend910", "OK", 3131, 65536),
            (0, 1, "Ascend910", "OK", 2886, 65536),
            (1, 0, "Ascend910", "OK", 3125, 65536),
        ],
        "procs": [],
        "idle": [],
        "warnings": [("NPU 1: 1 of the 2 chips",), ("ends inside the device table",)],
    },
    "info-a3-Ascend910-npu2-3-table-end-partial-trl-issue3545.txt": {
        "version": (None, None),
        "family": "a3",
        "rows": [
            (2, 0, "Ascend910", "OK", 3416, 65536),
            (2, 1, "Ascend910", "OK", 3204, 65536),
            (3, 0, "Ascend910", "OK", 3417, 65536),
            (3, 1, "Ascend910", "OK", 3204, 65536),
        ],
        "procs": [],
        "idle": [],
        "warnings": [("no device table header",), ("no process table",), ("ends inside the device table",)],
    },
    "info-docs-WARNING-health-misaligned-redacted-mindcluster.txt": {
        "version": ("23.0.5", "23.0.5"),
        "family": "910",
        "rows": [(0, 0, "xxx", "Warning", 0, 32768), (7, 0, "xxx", "OK", 0, 32768)],
        "procs": [],
        "idle": [0],
        "warnings": [("elided",)],
    },
    "info-process-section-no-running-processes-partial-vllm-ascend-issue1209.txt": {
        "version": (None, None),
        "family": None,
        "rows": [],
        "procs": [],
        "idle": [1, 2, 3, 4, 5, 6],
        "warnings": [("no NPU device rows",), ("row is cut",)],
    },
}


@pytest.mark.parametrize("name", sorted(EXPECTED_TABLES))
def test_info_table_capture(name: str) -> None:
    exp = EXPECTED_TABLES[name]
    info = parse_npu_smi_info(capture("npu-smi", name))
    assert (info.tool_version, info.driver_version) == exp["version"]
    assert info.family == exp["family"]
    assert rows(info) == exp["rows"]
    assert len(info.devices) == len(exp["rows"])  # type: ignore[arg-type]
    assert procs(info) == exp["procs"]
    assert info.idle_npus == exp["idle"]
    expected_warnings = exp["warnings"]
    if not expected_warnings:
        assert info.warnings == []
    for fragments in expected_warnings:  # type: ignore[attr-defined]
        assert has_warning(info, *fragments), (fragments, info.warnings)


def test_310_layout_values() -> None:
    d = parse_npu_smi_info(capture("npu-smi", "info-310-1card-23.0.0-noproc.txt")).devices[0]
    assert (d.device_id, d.phy_id, d.bus_id) == (0, None, "0000:01:00.0")
    assert (d.power_w, d.temp_c, d.aicore_util) == (12.8, 61, 0)
    assert (d.hugepages_used, d.hugepages_total) == (0, 969)
    assert (d.memory_used_mb, d.memory_total_mb) == (577, 7759)  # DDR; the 310 has no HBM column


def test_910_pro_b_ddr_and_power_columns() -> None:
    info = parse_npu_smi_info(capture("npu-smi", "info-910-proB-8card-24.1.0.txt"))
    assert [d.memory_used_mb for d in info.devices] == [1197, 2411, 2306, 2472, 2904, 1694, 1987, 1777]
    assert [d.memory_total_mb for d in info.devices] == [
        13553,
        15665,
        15665,
        15567,
        13553,
        15665,
        15665,
        15567,
    ]
    assert [d.power_w for d in info.devices] == [70.0, 66.9, 69.8, 67.2, 68.9, 66.3, 70.1, 65.6]
    assert [d.temp_c for d in info.devices] == [34, 34, 34, 33, 33, 34, 34, 33]
    assert [d.bus_id for d in info.devices] == [
        "0000:C1:00.0", "0000:81:00.0", "0000:41:00.0", "0000:01:00.0",
        "0000:C2:00.0", "0000:82:00.0", "0000:42:00.0", "0000:02:00.0",
    ]  # fmt: skip
    assert info.npu_ids == list(range(8))
    assert all(d.complete for d in info.devices)


def test_busy_910b1_aicore_and_power() -> None:
    info = parse_npu_smi_info(capture("npu-smi", "info-910B1-8card-23.0.rc2.b090-training-busy-elided.txt"))
    assert [(d.power_w, d.temp_c, d.aicore_util) for d in info.devices] == [(327.1, 54, 57), (451.6, 76, 68)]
    assert [(d.memory_used_mb, d.memory_total_mb) for d in info.devices] == [(0, 0), (0, 0)]
    assert info.busy_npus() == [0, 1, 7]


def test_warning_health_is_reported_unhealthy() -> None:
    info = parse_npu_smi_info(capture("npu-smi", "info-910A-1card-WARNING-health-23.0.rc3-modelarts.txt"))
    assert [d.id for d in info.unhealthy()] == [1]
    d = info.devices[0]
    assert (d.power_w, d.temp_c, d.memory_used_mb, d.memory_total_mb, d.bus_id) == (
        69.6, 35, 2681, 15137, "0000:81:00.0",
    )  # fmt: skip


def test_misaligned_health_column_keeps_the_row() -> None:
    info = parse_npu_smi_info(
        capture("npu-smi", "info-docs-WARNING-health-misaligned-redacted-mindcluster.txt")
    )
    d0 = info.devices[0]
    assert (d0.health, d0.power_w, d0.temp_c, d0.memory_used_mb, d0.memory_total_mb) == (
        "Warning",
        73.1,
        37,
        920,
        13553,
    )
    assert info.devices[1].bus_id == "0000:3D:00.0"


def test_a3_phy_ids_and_second_chip_power() -> None:
    info = parse_npu_smi_info(
        capture("npu-smi", "info-a3-Ascend910-npu2-3-table-end-partial-trl-issue3545.txt")
    )
    assert [d.phy_id for d in info.devices] == [4, 5, 6, 7]
    assert [d.power_w for d in info.devices] == [187.0, None, 175.2, None]  # the 2nd chip shows '-'
    assert [d.bus_id for d in info.devices] == [
        "0000:95:00.0",
        "0000:97:00.0",
        "0000:91:00.0",
        "0000:93:00.0",
    ]
    assert info.npu_count == 2 and info.chip_count == 4


def test_a3_collect_env_cut_row_keeps_visible_values() -> None:
    info = parse_npu_smi_info(
        capture("npu-smi", "info-a3-24.1.rc3.7-collect-env-partial-vllm-ascend-issue2035.txt")
    )
    last = info.devices[-1]
    assert (last.id, last.chip, last.phy_id, last.power_w, last.bus_id) == (1, 0, 2, 185.4, "0000:99:00.0")
    assert (last.memory_used_mb, last.memory_total_mb, last.complete) == (0, 0, False)


def test_26_process_table_with_container_pid_column() -> None:
    info = parse_npu_smi_info(
        capture(
            "npu-smi", "info-a3-26.0.rc2-tail-process-section-with-container-pid-vllm-ascend-issue12980.txt"
        )
    )
    p = info.processes[0]
    assert (p.device, p.pid, p.name, p.memory_mb, p.pid_in_container) == (0, 632268, "python3.1", 197, None)
    d = info.devices[0]
    assert (d.phy_id, d.power_w, d.temp_c, d.bus_id) == (15, None, 35, "0000:83:00.0")


def test_partial_910b3_last_npu_only_first_row() -> None:
    info = parse_npu_smi_info(capture("npu-smi", "info-910B3-partial-noversion-vllm-ascend-issue1130.txt"))
    last = info.devices[-1]
    assert (last.id, last.power_w, last.temp_c, last.bus_id, last.complete) == (3, 92.7, 41, None, False)


# --------------------------------------------------------------------------------------------------
# wrappers around real captures: quoted, TAB-indented, CRLF, shell prompts, other health values
# --------------------------------------------------------------------------------------------------

BASE = "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"


def _same(a: NpuInfo, b: NpuInfo) -> None:
    assert a.model_dump() == b.model_dump()


def test_markdown_quoted_capture_parses_the_same() -> None:
    text = capture("npu-smi", BASE)
    quoted = "".join("> " + line for line in text.splitlines(keepends=True))
    _same(parse_npu_smi_info(quoted), parse_npu_smi_info(text))


def test_nested_quote_and_tab_indent_and_crlf_parse_the_same() -> None:
    text = capture("npu-smi", "info-910ProB-1card-23.0.rc1-narrow-name-col-with-proc.txt")
    variants = [
        "".join(">> " + line for line in text.splitlines(keepends=True)),
        "".join("\t" + line for line in text.splitlines(keepends=True)),
        text.replace("\n", "\r\n"),
        "[root@node1 ~]# npu-smi info\n" + text + "[root@node1 ~]# \n",
    ]
    for v in variants:
        _same(parse_npu_smi_info(v), parse_npu_smi_info(text))


@pytest.mark.parametrize("health", ["Alarm", "Critical", "UNKNOWN"])
def test_other_health_values_are_kept_verbatim(health: str) -> None:
    # derived from a real capture: NPU 3's health cell replaced (no real Alarm/Critical capture exists)
    text = capture("npu-smi", BASE)
    line = next(ln for ln in text.splitlines() if ln.startswith("| 3     910B4"))
    changed = text.replace(line, line.replace("| OK            |", f"| {health:<13} |"))
    info = parse_npu_smi_info(changed)
    assert [d.health for d in info.devices] == ["OK"] * 3 + [health] + ["OK"] * 4
    assert [d.id for d in info.unhealthy()] == [3]


def test_truncation_at_every_line_never_raises_and_never_invents_npus() -> None:
    text = capture("npu-smi", BASE)
    lines = text.splitlines(keepends=True)
    for cut in range(len(lines)):
        for partial in ("".join(lines[:cut]), "".join(lines[:cut]) + lines[cut][: len(lines[cut]) // 2]):
            info = parse_npu_smi_info(partial)
            assert set(info.npu_ids) <= set(range(8))
            if cut < len(lines) - 1:
                assert info.warnings, f"no warning for a capture cut at line {cut}"


def test_empty_and_garbage_input() -> None:
    assert parse_npu_smi_info("").devices == []
    info = parse_npu_smi_info("dcmi module initialize failed. ret is -8005\n")
    assert info.devices == [] and any("no NPU device rows" in w for w in info.warnings)


# --------------------------------------------------------------------------------------------------
# key:value formats: -l, -m, -t board, -t usages
# --------------------------------------------------------------------------------------------------

KV_TESTED = [
    "info-l-topology-910B4-8card-atlas800IA2.txt",
    "info-m-mapping-910A-8card-TAB-indented-mindcluster.txt",
    "info-t-board-i0-910A-23.0.5-TAB-indented-mindcluster.txt",
    "info-t-board-i0-c0-chip-910A-TAB-indented-mindcluster.txt",
    "info-t-usages-i0-910A-TAB-indented-mindcluster.txt",
]


def test_kv_fixture_list_is_complete() -> None:
    assert sorted(KV_TESTED) == KV_FIXTURES


def test_info_l_device_list() -> None:
    out = parse_npu_list(capture("npu-smi", "info-l-topology-910B4-8card-atlas800IA2.txt"))
    assert out.total_count == 8
    assert [(n.npu_id, n.chip_count) for n in out.npus] == [(i, 1) for i in range(8)]
    assert out.warnings == []


def test_info_m_mapping_tab_indented() -> None:
    rows_ = parse_npu_mapping(capture("npu-smi", "info-m-mapping-910A-8card-TAB-indented-mindcluster.txt"))
    assert [(r.npu_id, r.chip_id, r.chip_logic_id, r.chip_name) for r in rows_] == [
        (i, 0, i, "Ascend 910A") for i in range(8)
    ]


def test_info_t_board() -> None:
    b = parse_npu_board(capture("npu-smi", "info-t-board-i0-910A-23.0.5-TAB-indented-mindcluster.txt"))
    assert b.npu_id == 0 and b.chip_id is None
    assert b.software_version == "23.0.5"
    assert b.firmware_version == "7.1.0.7.220"
    assert (b.board_id, b.bus_id, b.pci_device_id, b.chip_count) == ("0x02", "0000:61:00.0", "0xD801", 1)
    assert b.fields["Compatibility"] == "OK"
    assert b.fields["Class ID"] == "NA"
    assert len(b.fields) == 15


def test_info_t_board_chip_level() -> None:
    b = parse_npu_board(capture("npu-smi", "info-t-board-i0-c0-chip-910A-TAB-indented-mindcluster.txt"))
    assert (b.npu_id, b.chip_id, b.chip_type, b.chip_name) == (0, 0, "Ascend", "910A")
    assert b.fields["VDie ID"] == "42C711D4 20B03704 4A10C8D4 14CC040A D2102003"
    assert b.fields["Chip Version"] == "V1"
    assert b.firmware_version == "7.1.0.7.220"
    assert len(b.fields) == 13


def test_info_t_usages_chip_id_closes_the_block() -> None:
    u = parse_npu_usages(capture("npu-smi", "info-t-usages-i0-910A-TAB-indented-mindcluster.txt"))
    assert (u.npu_id, u.chip_count) == (0, 1)
    assert len(u.chips) == 1
    chip = u.chips[0]
    assert chip.chip_id == 0
    assert chip.values["DDR Capacity(MB)"] == "13553"
    assert chip.values["HBM Capacity(MB)"] == "31129"
    assert chip.percent("DDR Usage Rate(%)") == 6
    assert chip.percent("Aicore Usage Rate(%)") == 0
    assert len(chip.values) == 11
