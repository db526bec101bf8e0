"""NVIDIA GPUs: ``nvidia-smi --query-*`` CSV parsing, the default-table fallback parser, the probe.

The live probe asks for machine-readable CSV (``--format=csv,noheader,nounits``). The table parser
exists for saved output (``verlctl detect gpu --from-file``) and for drivers whose query fails; it
splits rows on ``|`` and understands the 79-column layout (drivers <= 525), the 87/89-column layout
(535+) and the ``+---`` line under the header of driver 580.
"""

from __future__ import annotations

import csv
import io
import re
from typing import Literal

from pydantic import BaseModel

from verlctl.detect.common import (
    ProbeModel,
    Unavailable,
    run_tool,
    split_cells,
    to_float,
    to_int,
    tool_failure,
    unquote_line,
)

#: What the live probe asks ``nvidia-smi --query-gpu`` for (the brief's list plus the driver version).
QUERY_GPU_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "temperature.gpu",
    "power.draw",
    "driver_version",
)
QUERY_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")


class GpuDevice(BaseModel):
    id: int  # nvidia-smi index
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    persistence_mode: str | None = None
    fan_percent: int | None = None
    temp_c: float | None = None
    perf_state: str | None = None
    power_w: float | None = None
    power_cap_w: float | None = None
    memory_used_mb: int | None = None  # MiB, as nvidia-smi reports
    memory_total_mb: int | None = None
    util: int | None = None  # percent
    compute_mode: str | None = None
    complete: bool = True  # False when a row of this GPU was cut in the input


class GpuProcess(BaseModel):
    device: int | None = None  # GPU index; None when the output does not say
    gpu_uuid: str | None = None
    pid: int
    name: str
    memory_mb: int | None = None
    type: str | None = None  # C, G, C+G (table only)


class GpuInfo(ProbeModel):
    tool_version: str | None = None  # 'NVIDIA-SMI <version>' (always equal to the driver version)
    driver_version: str | None = None
    cuda_version: str | None = None
    source: Literal["csv", "table"] = "table"
    devices: list[GpuDevice] = []
    processes: list[GpuProcess] = []
    process_table_seen: bool = False
    warnings: list[str] = []

    @property
    def gpu_ids(self) -> list[int]:
        return sorted({d.id for d in self.devices})

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_ids)


_NONE_VALUES = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "ERR!", "[Unknown Error]"}
_NUMBER_WITH_UNIT = re.compile(r"^([-+]?\d+(?:\.\d+)?)\s*[A-Za-z%]*$")


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text in _NONE_VALUES else text


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    m = _NUMBER_WITH_UNIT.match(text.strip())
    return float(m.group(1)) if m else None


def _whole(text: str | None) -> int | None:
    value = _number(text)
    return int(value) if value is not None else None


# --------------------------------------------------------------------------------------------------
# CSV (--query-gpu / --query-compute-apps)
# --------------------------------------------------------------------------------------------------

_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_.]*(\s*\[[^\]]*\])?$")
_GPU_FIELD_TO_ATTR = {
    "index": "id",
    "name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "pci.bus_id": "bus_id",
    "gpu_bus_id": "bus_id",
    "memory.used": "memory_used_mb",
    "memory.total": "memory_total_mb",
    "utilization.gpu": "util",
    "temperature.gpu": "temp_c",
    "power.draw": "power_w",
    "power.limit": "power_cap_w",
    "persistence_mode": "persistence_mode",
    "pstate": "perf_state",
    "fan.speed": "fan_percent",
    "compute_mode": "compute_mode",
}
_INT_ATTRS = {"id", "memory_used_mb", "memory_total_mb", "util", "fan_percent"}
_FLOAT_ATTRS = {"temp_c", "power_w", "power_cap_w"}


#: Field names of a header row besides the GPU ones (the apps query's, and the GPU query's informational ones).
_OTHER_HEADER_FIELDS = {"pid", "process_name", "used_memory", "used_gpu_memory", "driver_version", "count",
                        "serial", "vbios_version", "timestamp", "clocks.sm", "clocks.mem", "memory.free"}


def _header_fields(row: list[str]) -> list[str] | None:
    """The field names of a header row (``name, memory.total [MiB], ...``: units dropped), in its order; None
    for a data row. Any column order, any subset of the query fields."""
    cells = [c.strip() for c in row]
    names = [re.sub(r"\s*\[.*\]$", "", c) for c in cells]
    if (
        cells
        and all(_HEADER_CELL.match(c) for c in cells)
        and any(n in _GPU_FIELD_TO_ATTR or n in _OTHER_HEADER_FIELDS for n in names)
    ):
        return names
    return None


_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("uuid", re.compile(r"^(GPU|MIG)-[0-9A-Fa-f-]+$")),
    ("pci.bus_id", re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")),
    ("memory", re.compile(r"^\d+\s*MiB$")),
    ("utilization.gpu", re.compile(r"^\d+\s*%$")),
    ("temperature.gpu", re.compile(r"^\d+(\.\d+)?\s*C$")),
    ("power", re.compile(r"^\d+(\.\d+)?\s*W$")),
    ("pstate", re.compile(r"^P\d{1,2}$")),
    ("persistence_mode", re.compile(r"^(Enabled|Disabled)$")),
)


def _shape_fields(row: list[str]) -> list[str] | None:
    """The fields of a header-less ``--query-gpu`` row in some other order than the probe's, from what each
    value looks like (a leading whole number is the index; values with units name themselves: MiB memory, %
    utilization, W power, C temperature; GPU-... the UUID; the first other text the name). With two memory
    values the smaller is memory.used; with two powers the first is the draw. None when no name is found."""
    fields: list[str] = []
    memory: list[int] = []
    powers = 0
    named = False
    for i, raw in enumerate(row):
        cell = raw.strip()
        kind = next((k for k, rx in _SHAPES if rx.match(cell)), None)
        if kind is None and i == 0 and re.fullmatch(r"\d+", cell):
            kind = "index"
        if kind == "memory":
            memory.append(i)
            fields.append("memory")
        elif kind == "power":
            fields.append("power.draw" if powers == 0 else "power.limit")
            powers += 1
        elif kind is not None:
            fields.append(kind)
        elif not named and cell and not re.fullmatch(r"[-+]?\d+(\.\d+)?", cell):
            fields.append("name")
            named = True
        else:
            fields.append("")
    if not named:
        return None
    if len(memory) == 1:
        fields[memory[0]] = "memory.total"
    elif len(memory) >= 2:
        a, b = memory[0], memory[1]
        if (_whole(row[a]) or 0) <= (_whole(row[b]) or 0):
            small, large = a, b
        else:
            small, large = b, a
        fields[small], fields[large] = "memory.used", "memory.total"
        for extra in memory[2:]:
            fields[extra] = ""
    return fields


def _csv_rows(text: str) -> list[list[str] | None]:
    """CSV rows; ``None`` marks a blank line (a section break)."""
    out: list[list[str] | None] = []
    for raw in text.splitlines():
        line = unquote_line(raw)
        if not line.strip():
            out.append(None)
            continue
        out.extend(csv.reader(io.StringIO(line), skipinitialspace=True))
    return out


def _gpu_from_fields(fields: list[str], row: list[str], info: GpuInfo, position: int = 0) -> GpuDevice | None:
    data: dict[str, object] = {}
    for field, raw in zip(fields, row):
        value = _value(raw)
        if field == "driver_version":
            if value:
                info.driver_version = value
            continue
        attr = _GPU_FIELD_TO_ATTR.get(field)
        if attr is None:
            continue
        if attr in _INT_ATTRS:
            data[attr] = _whole(value)
        elif attr in _FLOAT_ATTRS:
            data[attr] = _number(value)
        else:
            data[attr] = value
    if data.get("id") is None:
        if "index" not in fields:  # a query without the index column: nvidia-smi lists the GPUs in index order
            data["id"] = position
            if position == 0:
                info.warnings.append("the CSV has no index column: the GPUs are numbered in the order listed")
        else:
            info.warnings.append(f"a GPU row without an index was skipped: {', '.join(row)[:80]!r}")
            return None
    if len(row) < len(fields):
        data["complete"] = False
        info.warnings.append(f"GPU {data['id']}: the CSV row has {len(row)} of {len(fields)} fields")
    return GpuDevice.model_validate(data)


def _app_from_fields(fields: list[str], row: list[str], info: GpuInfo) -> GpuProcess | None:
    values = {f: _value(v) for f, v in zip(fields, row)}
    pid = to_int(values.get("pid"))
    if pid is None:
        info.warnings.append(f"a process row without a pid was skipped: {', '.join(row)[:80]!r}")
        return None
    name = values.get("process_name") or values.get("name") or ""
    memory = values.get("used_memory") or values.get("used_gpu_memory")
    return GpuProcess(
        pid=pid,
        name=name,
        memory_mb=_whole(memory),
        gpu_uuid=values.get("gpu_uuid"),
        device=None,
    )


def _attach_devices(info: GpuInfo) -> None:
    by_uuid = {d.uuid: d.id for d in info.devices if d.uuid}
    unattributed = 0
    for p in info.processes:
        if p.device is None and p.gpu_uuid in by_uuid:
            p.device = by_uuid[p.gpu_uuid]
        if p.device is None:
            unattributed += 1
    if unattributed and len(info.devices) == 1:
        for p in info.processes:
            if p.device is None:
                p.device = info.devices[0].id
        info.warnings.append("the process rows do not name their GPU; attributed to the only GPU listed")
    elif unattributed:
        info.warnings.append(f"{unattributed} process row(s) do not name their GPU")


def parse_nvidia_smi_csv(
    text: str,
    gpu_fields: tuple[str, ...] | list[str] | None = None,
    app_fields: tuple[str, ...] | list[str] | None = None,
) -> GpuInfo:
    """Parse ``--query-gpu`` and/or ``--query-compute-apps`` CSV output (with or without header).

    Sections are separated by blank lines or recognised by their header row. Without a header the
    rows are read with ``gpu_fields`` (default :data:`QUERY_GPU_FIELDS`); pass ``app_fields`` to
    read header-less ``--query-compute-apps`` output instead.
    """
    info = GpuInfo(source="csv")
    fields: list[str] | None = None
    kind: str | None = None
    position = 0  # of the GPU row in its section (its index when the query has no index column)
    for row in _csv_rows(text):
        if row is None:
            fields, kind = None, None
            continue
        header = _header_fields(row)
        if header is not None:
            fields, kind = header, ("apps" if "pid" in header else "gpus")
            position = 0
            if kind == "apps":
                info.process_table_seen = True
            continue
        if fields is None:
            if app_fields is not None:
                fields, kind = list(app_fields), "apps"
                info.process_table_seen = True
            elif gpu_fields is None and (len(row) != len(QUERY_GPU_FIELDS) or to_int(row[0]) is None):
                # not the probe's own query: read the fields from the values' shapes
                fields, kind = _shape_fields(row) or list(QUERY_GPU_FIELDS), "gpus"
            else:
                fields, kind = list(gpu_fields or QUERY_GPU_FIELDS), "gpus"
        if kind == "apps":
            proc = _app_from_fields(fields, row, info)
            if proc is not None:
                info.processes.append(proc)
        else:
            dev = _gpu_from_fields(fields, row, info, position)
            position += 1
            if dev is not None:
                info.devices.append(dev)
    if info.driver_version:
        info.tool_version = info.driver_version
    _attach_devices(info)
    return info


# --------------------------------------------------------------------------------------------------
# the default table
# --------------------------------------------------------------------------------------------------

_SMI_HEADER = re.compile(r"NVIDIA-SMI\s+(\S+)\s+Driver Version:\s*(\S+)(?:\s+CUDA Version:\s*(\S+))?")
_RAY_PREFIX = re.compile(r"^\s*\([^)]*\)\s*(?=[|+])")
_GPU_ROW_A = re.compile(r"^(\d+)\s+(.+?)(?:\s+(On|Off|WDDM|TCC))?$")
_GPU_ROW_B = re.compile(r"^(\d+%|N/A|ERR!)\s+(\d+)C\s+(P\d+|N/A)\b")
_POWER = re.compile(r"(\d+(?:\.\d+)?|N/A)\s*W?\s*/\s*(\d+(?:\.\d+)?|N/A)\s*W?")
_MEMORY = re.compile(r"^(\d+)MiB\s*/\s*(\d+)MiB$")
_UTIL = re.compile(r"^(\d+)%\s*(\S.*)?$")
_PROC_NEW = re.compile(r"^(\d+)\s+(N/A|\d+)\s+(N/A|\d+)\s+(\d+)\s+(C|G|C\+G|M|M\+C)\s+(.+?)\s+(\d+MiB|N/A)$")
_PROC_OLD = re.compile(r"^(\d+)\s+(\d+)\s+(C|G|C\+G)\s+(.+?)\s+(\d+MiB|N/A)$")


class _TableState:
    def __init__(self) -> None:
        self.info = GpuInfo(source="table")
        self.current: dict[str, object] | None = None
        self.in_processes = False
        self.last_row_cut: str | None = None
        self.warnings: list[str] = []


def parse_nvidia_smi_table(text: str) -> GpuInfo:
    """Parse the default ``nvidia-smi`` table (whole or partial). Never raises."""
    st = _TableState()
    ended_on_border = True
    for raw in text.splitlines():
        line = _RAY_PREFIX.sub("", unquote_line(raw)).strip()
        if not line:
            continue
        if line.startswith("+") or line.startswith("|=") or line.startswith("|-"):
            if st.current is not None:
                _flush_gpu(st)
            ended_on_border = line.endswith(("+", "|"))  # a border cut short does not end the table
            continue
        if not line.startswith("|"):
            continue  # shell prompts, the timestamp line
        ended_on_border = False
        m = _SMI_HEADER.search(line)
        if m:
            st.info.tool_version, st.info.driver_version = m.group(1), m.group(2)
            st.info.cuda_version = m.group(3) if m.group(3) and m.group(3) != "N/A" else None
            continue
        cells, closed = split_cells(line)
        if cells[0].startswith("Processes"):
            if st.current is not None:
                _flush_gpu(st)
            st.in_processes = True
            st.info.process_table_seen = True
            continue
        if "No running processes found" in cells[0]:
            st.info.process_table_seen = True
            continue
        if len(cells) == 1:
            _process_row(st, cells[0], closed)
            continue
        _gpu_row(st, cells, closed)
    if st.current is not None:
        _flush_gpu(st)
    info = st.info
    warnings: list[str] = []
    if info.devices and info.tool_version is None:
        warnings.append("no 'NVIDIA-SMI … Driver Version' header in the input")
    if not info.devices:
        warnings.append("no GPU rows in the input")
    if info.devices and not info.process_table_seen:
        warnings.append("no process table in the input; running processes are unknown")
    if st.last_row_cut:
        warnings.append(f"{st.last_row_cut} is cut short in the input; its values may be incomplete")
    if not ended_on_border:
        if st.in_processes or (info.process_table_seen and not info.devices):
            warnings.append("the input ends inside the process table; later process rows may be missing")
        else:
            warnings.append("the input ends inside the GPU table; later GPUs may be missing")
    info.warnings = warnings + st.warnings
    return info


def _gpu_row(st: _TableState, cells: list[str], closed: bool) -> None:
    first = cells[0]
    if not first:
        return  # the 'MIG M.' row of a GPU block (or a cut spacer)
    if first.startswith("GPU") or first.startswith("Fan"):
        return  # column headers
    m = _GPU_ROW_A.match(first)
    bus_ok = (
        len(cells) < 2 or ":" in cells[1] or not cells[1]
    )  # row A's 2nd cell is the Bus-Id (MIG rows are not)
    if m and bus_ok and not _GPU_ROW_B.match(first):
        if st.current is not None:
            _flush_gpu(st)
        st.current = {"id": int(m.group(1)), "name": m.group(2).strip(), "persistence_mode": m.group(3)}
        if len(cells) > 1:
            bus = cells[1].split()
            st.current["bus_id"] = bus[0] if bus and ":" in bus[0] else None
        st.current["complete"] = closed and len(cells) >= 3
        if not st.current["complete"]:
            st.last_row_cut = f"the row of GPU {m.group(1)}"
        return
    b = _GPU_ROW_B.match(first)
    if b and st.current is not None:
        cur = st.current
        cur["fan_percent"] = to_int(b.group(1).rstrip("%"))
        cur["temp_c"] = to_float(b.group(2))
        cur["perf_state"] = b.group(3) if b.group(3) != "N/A" else None
        p = _POWER.search(first[b.end() :])
        if p:
            cur["power_w"] = to_float(p.group(1))
            cur["power_cap_w"] = to_float(p.group(2))
        memory = _MEMORY.match(cells[1]) if len(cells) > 1 else None
        if memory:
            cur["memory_used_mb"], cur["memory_total_mb"] = int(memory.group(1)), int(memory.group(2))
        util = _UTIL.match(cells[2]) if len(cells) > 2 else None
        if util:
            cur["util"] = int(util.group(1))
            cur["compute_mode"] = util.group(2).strip() if util.group(2) else None
        if not (closed and memory and util and p):
            cur["complete"] = False
            st.last_row_cut = f"the second row of GPU {cur['id']}"
        cur["_second_row_seen"] = True
        return


def _flush_gpu(st: _TableState) -> None:
    cur = st.current
    st.current = None
    if cur is None:
        return
    if not cur.pop("_second_row_seen", False):
        cur["complete"] = False
        st.warnings.append(f"GPU {cur['id']}: its second row (memory, utilisation) is not in the input")
    st.info.devices.append(GpuDevice.model_validate(cur))


def _process_row(st: _TableState, cell: str, closed: bool) -> None:
    m = _PROC_NEW.match(cell)
    if m:
        gpu, pid, ptype, name, mem = m.group(1), m.group(4), m.group(5), m.group(6), m.group(7)
    else:
        m = _PROC_OLD.match(cell)
        if not m:
            is_header = cell.startswith(("GPU", "ID", "Usage"))
            if cell and not is_header and st.in_processes and not closed:
                st.last_row_cut = "a process row"
            return
        gpu, pid, ptype, name, mem = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
    st.info.process_table_seen = True
    st.info.processes.append(
        GpuProcess(device=int(gpu), pid=int(pid), type=ptype, name=name.strip(), memory_mb=_whole(mem))
    )
    if not closed:
        st.last_row_cut = f"the process row of pid {pid}"


def parse_nvidia_smi(text: str) -> GpuInfo:
    """Parse saved ``nvidia-smi`` output of either kind: the default table or ``--query-*`` CSV."""
    for raw in text.splitlines():
        line = _RAY_PREFIX.sub("", unquote_line(raw)).strip()
        if not line:
            continue
        if line.startswith(("|", "+")):
            return parse_nvidia_smi_table(text)
        row = next(csv.reader(io.StringIO(line), skipinitialspace=True), [])
        if _header_fields(row) is not None or (len(row) >= 3 and to_int(row[0]) is not None):
            return parse_nvidia_smi_csv(text)
        if len(row) == len(QUERY_APPS_FIELDS) and row[0].startswith(("GPU-", "MIG-")):
            return parse_nvidia_smi_csv(
                text, app_fields=QUERY_APPS_FIELDS
            )  # the probe's header-less apps query
        if len(row) >= 2 and _shape_fields(row) is not None and any("MiB" in c for c in row):
            return parse_nvidia_smi_csv(text)  # header-less --query-gpu output in another column order
    return parse_nvidia_smi_table(text)


# --------------------------------------------------------------------------------------------------
# live probe
# --------------------------------------------------------------------------------------------------


def probe_gpu(timeout: float = 20.0, binary: str = "nvidia-smi") -> GpuInfo | Unavailable:
    """``nvidia-smi --query-gpu`` + ``--query-compute-apps``; the default table when the query fails."""
    query = run_tool(
        "gpu",
        [binary, f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv,noheader,nounits"],
        timeout,
    )
    if isinstance(query, Unavailable):
        return query
    if query.returncode == 0:
        info = parse_nvidia_smi_csv(query.stdout, gpu_fields=QUERY_GPU_FIELDS)
        apps = run_tool(
            "gpu",
            [binary, f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}", "--format=csv,noheader,nounits"],
            timeout,
        )
        if isinstance(apps, Unavailable) or apps.returncode != 0:
            info.warnings.append("nvidia-smi --query-compute-apps failed; running processes are unknown")
        else:
            procs = parse_nvidia_smi_csv(apps.stdout, app_fields=QUERY_APPS_FIELDS)
            info.processes = procs.processes
            info.process_table_seen = True
            _attach_devices(info)
        if not info.devices:
            info.warnings.append("nvidia-smi listed no GPUs")
        return info
    table = run_tool("gpu", [binary], timeout)
    if isinstance(table, Unavailable):
        return table
    if table.returncode != 0:
        return tool_failure("gpu", table)
    info = parse_nvidia_smi_table(table.stdout)
    info.warnings.insert(0, "nvidia-smi --query-gpu failed; the default table was parsed instead")
    return info
