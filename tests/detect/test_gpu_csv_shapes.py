"""GPU detection reads every CSV shape `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` prints:
columns in any order, with or without the index column, the header and the units (issue 24). Values are the
real 8 x H100 capture's (tests/fixtures: NVIDIA H100 80GB HBM3, 81559 MiB, 1 MiB used)."""

from __future__ import annotations

import pytest

from verlctl.detect.gpu import parse_nvidia_smi

NAME = "NVIDIA H100 80GB HBM3"


def rows(fmt: str) -> str:
    return "\n".join(fmt.format(i=i, uuid=f"GPU-5c1a7e2b-0f5d-4e7b-9a3c-00000000000{i}") for i in range(8)) + "\n"


SHAPES = {
    "header, units, reordered": "memory.total [MiB], name, index, memory.used [MiB]\n"
                                + rows("81559 MiB, " + NAME + ", {i}, 1 MiB"),
    "header, nounits, no index": "name, memory.total [MiB], memory.used [MiB]\n" + rows(NAME + ", 81559, 1"),
    "header, uuid first, no index": "uuid, memory.used [MiB], name, memory.total [MiB]\n"
                                    + rows("{uuid}, 1 MiB, " + NAME + ", 81559 MiB"),
    "noheader, units, no index": rows(NAME + ", 81559 MiB, 1 MiB"),
    "noheader, index first, short": rows("{i}, " + NAME + ", 1 MiB, 81559 MiB"),
    "noheader, uuid and utilization": rows("{uuid}, " + NAME + ", 0 %, 81559 MiB, 1 MiB"),
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_every_query_gpu_csv_shape_gives_the_eight_gpus(shape: str) -> None:
    info = parse_nvidia_smi(SHAPES[shape])
    assert info.source == "csv", shape
    assert [d.id for d in info.devices] == list(range(8)), (shape, info)
    assert {d.name for d in info.devices} == {NAME}
    assert {d.memory_total_mb for d in info.devices} == {81559}
    assert {d.memory_used_mb for d in info.devices} == {1}
    if "index" not in SHAPES[shape].split("\n", 1)[0] and "index first" not in shape:
        assert any("no index column" in w for w in info.warnings), info.warnings
