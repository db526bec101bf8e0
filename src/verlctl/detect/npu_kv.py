"""The non-table ``npu-smi info`` formats: ``-t board``, ``-l``, ``-m`` and ``-t usages``.

``-t board``/``-l``/``-t usages`` print ``Key<padding>: value`` lines (indented by spaces or a TAB,
blocks separated by blank lines); ``-m`` prints whitespace columns whose last column (``Chip Name``)
may contain a space.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from verlctl.detect.common import to_int, unquote_line

_KV_RE = re.compile(r"^([A-Za-z][A-Za-z0-9 ()%./+_-]*?)\s*:\s?(.*)$")


def parse_key_value_blocks(text: str) -> list[list[tuple[str, str]]]:
    """``Key : value`` lines grouped into blank-line separated blocks (other lines are skipped)."""
    blocks: list[list[tuple[str, str]]] = []
    current: list[tuple[str, str]] = []
    for raw in text.splitlines():
        line = unquote_line(raw).strip()
        if not line:
            if current:
                blocks.append(current)
                current = []
            continue
        m = _KV_RE.match(line)
        if not m or ":" not in line:
            continue  # the command line, prompts
        current.append((m.group(1).strip(), m.group(2).strip()))
    if current:
        blocks.append(current)
    return blocks


class NpuBoard(BaseModel):
    """``npu-smi info -t board -i N [-c C]``: the raw fields plus the ones verlctl uses."""

    npu_id: int | None = None
    chip_id: int | None = None  # set for the chip-level form (``-c C``)
    software_version: str | None = None  # the driver version
    firmware_version: str | None = None
    chip_name: str | None = None
    chip_type: str | None = None
    chip_count: int | None = None
    bus_id: str | None = None
    pci_device_id: str | None = None
    board_id: str | None = None
    fields: dict[str, str] = {}


def parse_npu_board(text: str) -> NpuBoard:
    fields: dict[str, str] = {}
    for block in parse_key_value_blocks(text):
        for key, value in block:
            fields.setdefault(key, value)

    def get(key: str) -> str | None:
        value = fields.get(key)
        return value if value not in (None, "") else None

    return NpuBoard(
        npu_id=to_int(get("NPU ID")),
        chip_id=to_int(get("Chip ID")),
        software_version=get("Software Version"),
        firmware_version=get("Firmware Version"),
        chip_name=get("Chip Name"),
        chip_type=get("Chip Type"),
        chip_count=to_int(get("Chip Count")),
        bus_id=get("PCIe Bus Info"),
        pci_device_id=get("PCI Device ID"),
        board_id=get("Board ID"),
        fields=fields,
    )


class NpuListEntry(BaseModel):
    npu_id: int
    chip_count: int | None = None


class NpuList(BaseModel):
    """``npu-smi info -l``."""

    total_count: int | None = None
    npus: list[NpuListEntry] = []
    warnings: list[str] = []


def parse_npu_list(text: str) -> NpuList:
    out = NpuList()
    for block in parse_key_value_blocks(text):
        values = dict(block)
        if "Total Count" in values:
            out.total_count = to_int(values["Total Count"])
        if "NPU ID" in values and to_int(values["NPU ID"]) is not None:
            out.npus.append(
                NpuListEntry(npu_id=int(values["NPU ID"]), chip_count=to_int(values.get("Chip Count")))
            )
    if out.total_count is not None and out.total_count != len(out.npus):
        out.warnings.append(
            f"Total Count is {out.total_count} but {len(out.npus)} NPU blocks are in the input"
        )
    return out


class NpuChipMapping(BaseModel):
    npu_id: int
    chip_id: int
    chip_logic_id: int | None = None  # '-' for Mcu rows
    chip_name: str


def parse_npu_mapping(text: str) -> list[NpuChipMapping]:
    """``npu-smi info -m``: one row per chip (and per Mcu on 910B boards)."""
    rows: list[NpuChipMapping] = []
    for raw in text.splitlines():
        tokens = unquote_line(raw).split()
        if len(tokens) < 4 or to_int(tokens[0]) is None or to_int(tokens[1]) is None:
            continue
        rows.append(
            NpuChipMapping(
                npu_id=int(tokens[0]),
                chip_id=int(tokens[1]),
                chip_logic_id=to_int(tokens[2]),
                chip_name=" ".join(tokens[3:]),
            )
        )
    return rows


class NpuChipUsage(BaseModel):
    chip_id: int | None = None
    values: dict[str, str] = {}

    def percent(self, key: str) -> int | None:
        return to_int(self.values.get(key))


class NpuUsages(BaseModel):
    """``npu-smi info -i N -t usages``: the ``Chip ID`` line closes each chip's block."""

    npu_id: int | None = None
    chip_count: int | None = None
    chips: list[NpuChipUsage] = []


def parse_npu_usages(text: str) -> NpuUsages:
    out = NpuUsages()
    pending: dict[str, str] = {}
    for block in parse_key_value_blocks(text):
        for key, value in block:
            if key == "NPU ID" and out.npu_id is None and not pending:
                out.npu_id = to_int(value)
            elif key == "Chip Count" and out.chip_count is None and not pending:
                out.chip_count = to_int(value)
            elif key == "Chip ID":
                out.chips.append(NpuChipUsage(chip_id=to_int(value), values=pending))
                pending = {}
            else:
                pending[key] = value
    if pending:  # a block with no closing 'Chip ID' (cut input)
        out.chips.append(NpuChipUsage(chip_id=None, values=pending))
    return out
