"""Ascend NPUs: the ``npu-smi info`` table parser and the live probe.

The table is read row by row, splitting on ``|`` and tokenising each cell on whitespace; column
offsets are never used (they change between npu-smi versions). Three families are understood:

* ``910``: 910/910A/910ProB/910B* (A2) -- rows ``NPU Name | Health | Power Temp Hugepages`` and
  ``Chip | Bus-Id | AICore Memory-Usage HBM-Usage``;
* ``a3``: Atlas A3 -- the second row is ``Chip Phy-ID``; every NPU has two chip blocks;
* ``310``: 310/310B/310P -- the second row is ``Chip Device`` and there is no HBM column.

Pasted captures are often partial: a capture may start or end mid-table, carry shell prompts,
markdown quote prefixes, ``...`` lines an author put in place of rows, or a row cut half-way.
The parser keeps what is visible and says in ``warnings`` what is not.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from verlctl.detect.common import (
    ProbeModel,
    ToolOutput,
    Unavailable,
    run_probes_concurrently,
    run_tool,
    split_cells,
    to_float,
    to_int,
    tool_failure,
    unquote_line,
)
from verlctl.detect.npu_kv import NpuBoard, parse_npu_board

NpuFamily = Literal["910", "a3", "310"]

#: Health values documented for ``npu-smi info``; others are kept verbatim.
KNOWN_HEALTH = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")


class NpuDevice(BaseModel):
    """One chip of one NPU (A2/910/310 NPUs have one chip, A3 NPUs two)."""

    id: int  # the NPU id as npu-smi shows it (need not start at 0 nor be contiguous)
    chip: int | None = None  # chip index within the NPU; None when the chip row is not in the input
    phy_id: int | None = None  # A3 'Chip Phy-ID' (counts chips across NPUs)
    device_id: int | None = None  # 310 'Chip Device'
    name: str | None = None
    health: str | None = None
    power_w: float | None = None
    temp_c: float | None = None
    hugepages_used: int | None = None
    hugepages_total: int | None = None
    bus_id: str | None = None
    aicore_util: int | None = None  # percent
    memory_used_mb: int | None = None  # DDR ("Memory-Usage(MB)")
    memory_total_mb: int | None = None
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None
    complete: bool = True  # False when a row of this chip was cut or missing in the input

    @property
    def healthy(self) -> bool:
        return self.health == "OK"


class NpuProcess(BaseModel):
    device: int  # NPU id
    chip: int | None = None
    pid: int
    name: str
    memory_mb: int | None = None
    pid_in_container: int | None = None  # npu-smi >= 26.0 'Process id in container' ('NA' -> None)


class NpuInfo(ProbeModel):
    """Everything ``npu-smi info`` (and optionally ``-t board``) showed."""

    tool_version: str | None = None  # 'npu-smi <tool_version>'
    driver_version: str | None = None  # 'Version: <driver_version>'
    family: NpuFamily | None = None
    devices: list[NpuDevice] = []
    processes: list[NpuProcess] = []
    idle_npus: list[int] = []  # 'No running processes found in NPU N'
    process_table_seen: bool = False
    boards: list[NpuBoard] = []
    warnings: list[str] = []

    @property
    def npu_ids(self) -> list[int]:
        return sorted({d.id for d in self.devices})

    @property
    def npu_count(self) -> int:
        return len(self.npu_ids)

    @property
    def chip_count(self) -> int:
        return len(self.devices)

    def unhealthy(self) -> list[NpuDevice]:
        return [d for d in self.devices if d.health is not None and d.health != "OK"]

    def busy_npus(self) -> list[int]:
        return sorted({p.device for p in self.processes})


# --------------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------------

_VERSION_RE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)")
_NO_PROC_RE = re.compile(r"^No running processes found in NPU\s*(\d+)\s*$")
_BUS_ID_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")
_PAIR_RE = re.compile(r"(\S+)\s*/\s*(\S+)")
_NONE_VALUES = {"-", "NA", "N/A", "--"}


def _is_bus_id(cell: str) -> bool:
    return bool(_BUS_ID_RE.match(cell)) or cell in _NONE_VALUES


def _scalars_and_pairs(cell: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``'327.1  54  0 / 0'`` -> (['327.1', '54'], [('0', '0')]); pairs are ``used / total``."""
    pairs = [(m.group(1), m.group(2)) for m in _PAIR_RE.finditer(cell)]
    rest = _PAIR_RE.sub(" ", cell).split()
    return rest, pairs


def _num(token: str | None) -> float | None:
    if token is None or token in _NONE_VALUES:
        return None
    return to_float(token)


def _int(token: str | None) -> int | None:
    if token is None or token in _NONE_VALUES:
        return None
    return to_int(token)


class _State:
    def __init__(self) -> None:
        self.info = NpuInfo()
        self.warnings: list[str] = []
        self.family: NpuFamily | None = None
        self.has_hbm: bool | None = None  # from the header; None = not seen
        self.header_seen = False
        self.pending: dict[str, object] | None = None  # the NPU row waiting for its chip row
        self.pending_cut = False
        self.proc_columns: list[str] = []
        self.elided = False
        self.last_row_cut: str | None = None
        self.ended_on_border = True

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)


def parse_npu_smi_info(text: str) -> NpuInfo:
    """Parse ``npu-smi info`` output (whole or partial) into :class:`NpuInfo`. Never raises."""
    st = _State()
    for raw in text.splitlines():
        line = unquote_line(raw).strip()
        if not line:
            continue
        if line.startswith("+"):
            # borders: '+====' between NPUs, '+----' between A3 chips and around sections;
            # one that does not end with '+' was cut short
            st.ended_on_border = line.endswith("+")
            continue
        if not line.startswith("|"):
            if line in ("...", "…") or re.fullmatch(r"\.{3,}", line):
                st.elided = True
            continue  # shell prompts, 'NPU:' labels, code fences, prose
        st.ended_on_border = False
        _parse_row(st, line)
    _flush_pending(st, at_end=True)
    return _finish(st)


def _parse_row(st: _State, line: str) -> None:
    cells, closed = split_cells(line)
    first = cells[0]
    m = _VERSION_RE.search(line)
    if m:
        st.info.tool_version, st.info.driver_version = m.group(1), m.group(2)
        return
    m = _NO_PROC_RE.match(first)
    if m:
        _flush_pending(st)
        st.info.process_table_seen = True
        npu = int(m.group(1))
        if npu not in st.info.idle_npus:
            st.info.idle_npus.append(npu)
        if not closed:
            st.last_row_cut = f"the 'No running processes found in NPU {npu}' row"
        return
    if first.startswith("No running processes") or (first.startswith("No ") and not closed):
        st.info.process_table_seen = True
        st.warn("a 'No running processes found in NPU …' row is cut; its NPU id is not visible")
        return
    if first.startswith("NPU") and "Name" in first:
        st.header_seen = True
        return
    if first.startswith("NPU") and "Chip" in first and len(cells) > 1 and "Process" in cells[1]:
        _flush_pending(st)
        st.info.process_table_seen = True
        st.proc_columns = [c.lower() for c in cells]
        return
    if first.startswith("Chip") and len(cells) > 1 and "Bus" in cells[1]:
        st.header_seen = True
        if "Phy-ID" in first:
            st.family = "a3"
        elif "Device" in first:
            st.family = "310"
        else:
            st.family = "910"
        st.has_hbm = len(cells) > 2 and "HBM" in cells[2]
        return
    tokens = first.split()
    if _looks_like_process_row(cells, tokens):
        _parse_process_row(st, cells, tokens, closed)
        return
    if tokens and to_int(tokens[0]) is not None:
        _parse_device_row(st, cells, tokens, closed)
        return
    st.warn(f"unrecognised row ignored: {line[:80]!r}")


def _looks_like_process_row(cells: list[str], tokens: list[str]) -> bool:
    return (
        len(tokens) == 2
        and all(to_int(t) is not None for t in tokens)
        and len(cells) >= 2
        and to_int(cells[1]) is not None
    )


def _parse_process_row(st: _State, cells: list[str], tokens: list[str], closed: bool) -> None:
    _flush_pending(st)
    st.info.process_table_seen = True
    npu, chip = int(tokens[0]), int(tokens[1])
    pid = int(cells[1])
    name = cells[2] if len(cells) > 2 else ""
    memory = _int(cells[3]) if len(cells) > 3 else None
    in_container = _int(cells[4]) if len(cells) > 4 else None
    st.info.processes.append(
        NpuProcess(device=npu, chip=chip, pid=pid, name=name, memory_mb=memory, pid_in_container=in_container)
    )
    if not closed or len(cells) < 4:
        st.last_row_cut = f"the process row of pid {pid} on NPU {npu}"


def _parse_device_row(st: _State, cells: list[str], tokens: list[str], closed: bool) -> None:
    second = cells[1] if len(cells) > 1 else None
    if second is not None:
        is_chip_row = _is_bus_id(second)
    else:  # cut right after the first cell: decide by what is expected next
        is_chip_row = st.pending is not None
    if not is_chip_row:
        _flush_pending(st)
        st.pending = _npu_row(tokens, cells)
        st.pending_cut = not closed or len(cells) < 3
        if st.pending_cut:
            st.last_row_cut = f"the row of NPU {tokens[0]}"
        return
    # the chip row: 'Chip [Phy-ID|Device] | Bus-Id | AICore Memory [HBM]'
    if st.pending is None:
        st.warn(
            f"a chip row ({' '.join(tokens)} | {second}) has no NPU row before it "
            "(the input starts mid-table); it is not reported"
        )
        return
    row = st.pending
    st.pending = None
    chip = to_int(tokens[0])
    second_id = to_int(tokens[1]) if len(tokens) > 1 else None
    family = st.family or _guess_family(row, tokens, cells)
    st.family = family
    row["chip"] = chip
    if second_id is not None:
        if family == "310":
            row["device_id"] = second_id
        else:
            row["phy_id"] = second_id
    row["bus_id"] = second if second and second not in _NONE_VALUES else None
    scalars, pairs = _scalars_and_pairs(cells[2]) if len(cells) > 2 else ([], [])
    row["aicore_util"] = _int(scalars[0]) if scalars else None
    expect_hbm = st.has_hbm if st.has_hbm is not None else (len(pairs) >= 2 or family != "310")
    if pairs:
        row["memory_used_mb"], row["memory_total_mb"] = _int(pairs[0][0]), _int(pairs[0][1])
    if expect_hbm and len(pairs) >= 2:
        row["hbm_used_mb"], row["hbm_total_mb"] = _int(pairs[1][0]), _int(pairs[1][1])
    cut = st.pending_cut or not closed or len(cells) < 3 or (expect_hbm and len(pairs) < 2) or not pairs
    row["complete"] = not cut
    if not closed or len(cells) < 3 or (expect_hbm and len(pairs) < 2) or not pairs:
        st.last_row_cut = f"the chip row of NPU {row['id']}"
    st.info.devices.append(NpuDevice.model_validate(row))


def _npu_row(tokens: list[str], cells: list[str]) -> dict[str, object]:
    row: dict[str, object] = {"id": int(tokens[0]), "name": " ".join(tokens[1:]) or None}
    if len(cells) > 1 and cells[1]:
        row["health"] = cells[1].split()[0]
    if len(cells) > 2:
        scalars, pairs = _scalars_and_pairs(cells[2])
        row["power_w"] = _num(scalars[0]) if scalars else None
        row["temp_c"] = _num(scalars[1]) if len(scalars) > 1 else None
        if pairs:
            row["hugepages_used"], row["hugepages_total"] = _int(pairs[0][0]), _int(pairs[0][1])
    return row


def _guess_family(row: dict[str, object], tokens: list[str], cells: list[str]) -> NpuFamily:
    name = str(row.get("name") or "")
    if name.startswith("Ascend910"):
        return "a3"
    if name.startswith("310"):
        return "310"
    pairs = _scalars_and_pairs(cells[2])[1] if len(cells) > 2 else []
    if len(tokens) > 1 and len(pairs) < 2:
        return "310"
    return "a3" if len(tokens) > 1 else "910"


def _flush_pending(st: _State, at_end: bool = False) -> None:
    """An NPU row without its chip row: report what it showed, flagged incomplete."""
    if st.pending is None:
        return
    row = st.pending
    st.pending = None
    row["complete"] = False
    st.info.devices.append(NpuDevice.model_validate(row))
    where = "the input ends" if at_end else "the next row starts"
    st.warn(f"NPU {row['id']}: only its first row is in the input ({where} before its chip row)")


def _finish(st: _State) -> NpuInfo:
    info = st.info
    info.family = st.family
    warnings: list[str] = []
    if info.devices or info.process_table_seen:
        if info.tool_version is None:
            warnings.append("no 'npu-smi <version>  Version: <version>' header in the input")
        if info.devices and not st.header_seen:
            warnings.append("no device table header in the input; column meanings were inferred")
    if not info.devices:
        warnings.append("no NPU device rows in the input")
    if info.devices and not info.process_table_seen:
        warnings.append("no process table in the input; running processes are unknown")
    if info.devices and info.process_table_seen:
        listed = {p.device for p in info.processes} | set(info.idle_npus)
        unlisted = [n for n in info.npu_ids if n not in listed]
        if unlisted:
            ids = ", ".join(str(n) for n in unlisted)
            warnings.append(f"NPU {ids}: not in the process table of the input; their processes are unknown")
    if st.elided:
        warnings.append("the input has elided rows ('...'); devices or processes in them are not reported")
    if st.last_row_cut:
        warnings.append(f"{st.last_row_cut} is cut short in the input; its last values may be incomplete")
    if not st.ended_on_border and (info.devices or info.process_table_seen):
        if info.process_table_seen:
            warnings.append("the input ends inside the process table; later process rows may be missing")
        else:
            warnings.append("the input ends inside the device table; later NPUs or chips may be missing")
    if st.family == "a3":
        for npu in info.npu_ids:
            chips = [d for d in info.devices if d.id == npu]
            if len(chips) != 2:
                warnings.append(f"NPU {npu}: {len(chips)} of the 2 chips of an A3 NPU are in the input")
    info.warnings = warnings + st.warnings
    return info


# --------------------------------------------------------------------------------------------------
# live probe
# --------------------------------------------------------------------------------------------------


def probe_npu(timeout: float = 20.0, board: bool = False, binary: str = "npu-smi") -> NpuInfo | Unavailable:
    """Run ``npu-smi info`` (and ``npu-smi info -t board -i N`` per NPU when ``board``)."""
    out = run_tool("npu", [binary, "info"], timeout)
    if isinstance(out, Unavailable):
        return out
    if out.returncode != 0:
        return tool_failure("npu", out)
    info = parse_npu_smi_info(out.stdout)
    if board and info.npu_ids:
        _read_boards(info, binary, timeout)
    return info


def _read_boards(info: NpuInfo, binary: str, timeout: float) -> None:
    """``npu-smi info -t board -i N`` for every NPU, all at once (each with its own timeout)."""

    def board_call(npu: int) -> Callable[[], object]:
        return lambda: run_tool("npu", [binary, "info", "-t", "board", "-i", str(npu)], timeout)

    results = run_probes_concurrently({str(n): (board_call(n), timeout + 1.0) for n in info.npu_ids})
    for npu in info.npu_ids:
        res = results[str(npu)]
        what = f"npu-smi info -t board -i {npu}"
        if isinstance(res, Unavailable):
            info.warnings.append(f"{what}: {res.reason}")
        elif isinstance(res, ToolOutput):
            if res.returncode == 0:
                info.boards.append(parse_npu_board(res.stdout))
            else:
                info.warnings.append(f"{what} exited with {res.returncode}")
        else:
            info.warnings.append(f"{what}: {res}")
