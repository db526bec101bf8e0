"""Parquet files written with pyarrow in verl's format and in wrong formats; the in-container snippet run
in a real subprocess; the no-pyarrow path in a real interpreter where pyarrow cannot be imported."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from verlctl.detect.common import Unavailable, UnavailableCode  # noqa: E402
from verlctl.detect.datasets import (  # noqa: E402
    PARQUET_CHECK_SNIPPET,
    DatasetInfo,
    inspect_parquet,
    parquet_check_argv,
    parse_parquet_check_output,
)

REPO = Path(__file__).resolve().parents[2]


def verl_rows(n: int = 3) -> dict[str, list[object]]:
    return {
        "data_source": ["openai/gsm8k"] * n,
        "prompt": [[{"role": "user", "content": f"What is {i}+{i}?"}] for i in range(n)],
        "ability": ["math"] * n,
        "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(n)],
        "extra_info": [{"split": "train", "index": i} for i in range(n)],
    }


def write(path: Path, columns: dict[str, list[object]]) -> str:
    pq.write_table(pa.table(columns), path)
    return str(path)


def codes(info: DatasetInfo) -> set[str]:
    return {f.code for f in info.findings if f.severity.value == "error"}


def test_verl_format(tmp_path: Path) -> None:
    info = inspect_parquet(write(tmp_path / "train.parquet", verl_rows(5)))
    assert isinstance(info, DatasetInfo)
    assert info.verl_ok and info.findings == []
    assert info.num_rows == 5 and info.num_row_groups == 1
    assert info.size_bytes == (tmp_path / "train.parquet").stat().st_size
    assert [c.name for c in info.columns] == [
        "data_source",
        "prompt",
        "ability",
        "reward_model",
        "extra_info",
    ]
    prompt = info.column("prompt")
    assert prompt is not None and prompt.kind == "list" and prompt.item is not None
    assert prompt.item.kind == "struct" and {f.name for f in prompt.item.fields} == {"role", "content"}
    rm = info.column("reward_model")
    assert rm is not None and rm.field("ground_truth") is not None


def test_large_string_and_optional_columns_missing(tmp_path: Path) -> None:
    prompt_type = pa.large_list(pa.struct([("content", pa.large_string()), ("role", pa.large_string())]))
    table = pa.table(
        {
            "data_source": pa.array(["x"], pa.large_string()),
            "prompt": pa.array([[{"content": "hi", "role": "user"}]], prompt_type),
            "reward_model": [{"ground_truth": "1"}],
        }
    )
    pq.write_table(table, tmp_path / "a.parquet")
    info = inspect_parquet(str(tmp_path / "a.parquet"))
    assert isinstance(info, DatasetInfo) and info.verl_ok
    assert {f.code for f in info.findings} == {"dataset.ability_missing", "dataset.extra_info_missing"}


def test_no_prompt_column(tmp_path: Path) -> None:
    cols = verl_rows()
    del cols["prompt"]
    info = inspect_parquet(write(tmp_path / "p.parquet", cols))
    assert isinstance(info, DatasetInfo) and not info.verl_ok
    assert codes(info) == {"dataset.prompt_missing"}


def test_prompt_as_plain_string(tmp_path: Path) -> None:
    cols = verl_rows()
    cols["prompt"] = ["What is 1+1?", "2+2?", "3+3?"]
    info = inspect_parquet(write(tmp_path / "s.parquet", cols))
    assert isinstance(info, DatasetInfo)
    assert codes(info) == {"dataset.prompt_not_chat"}
    assert "plain string" in info.findings[0].message


def test_prompt_list_of_strings_is_not_chat(tmp_path: Path) -> None:
    cols = verl_rows()
    cols["prompt"] = [["hi"], ["there"], ["x"]]
    info = inspect_parquet(write(tmp_path / "l.parquet", cols))
    assert isinstance(info, DatasetInfo) and codes(info) == {"dataset.prompt_not_chat"}


def test_reward_model_without_ground_truth(tmp_path: Path) -> None:
    cols = verl_rows()
    cols["reward_model"] = [{"style": "rule"}] * 3
    info = inspect_parquet(write(tmp_path / "r.parquet", cols))
    assert isinstance(info, DatasetInfo) and codes(info) == {"dataset.ground_truth_missing"}
    assert info.findings[0].field == "reward_model.ground_truth"


def test_reward_model_not_a_struct_and_no_data_source(tmp_path: Path) -> None:
    cols = verl_rows()
    cols["reward_model"] = ["2", "4", "6"]
    del cols["data_source"]
    info = inspect_parquet(write(tmp_path / "w.parquet", cols))
    assert isinstance(info, DatasetInfo)
    assert codes(info) == {"dataset.reward_model_not_struct", "dataset.data_source_missing"}


def test_empty_file_and_not_parquet(tmp_path: Path) -> None:
    table = pa.table(verl_rows(1)).slice(0, 0)
    pq.write_table(table, tmp_path / "empty.parquet")
    info = inspect_parquet(str(tmp_path / "empty.parquet"))
    assert isinstance(info, DatasetInfo) and codes(info) == {"dataset.empty"}
    (tmp_path / "junk.parquet").write_text("not parquet at all")
    bad = inspect_parquet(str(tmp_path / "junk.parquet"))
    assert isinstance(bad, DatasetInfo) and codes(bad) == {"dataset.unreadable"}
    gone = inspect_parquet(str(tmp_path / "gone.parquet"))
    assert isinstance(gone, DatasetInfo) and codes(gone) == {"dataset.unreadable"}


def test_fifo_named_parquet_does_not_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe.parquet")
    out: list[object] = []
    t = threading.Thread(
        target=lambda: out.append(inspect_parquet(str(tmp_path / "pipe.parquet"))), daemon=True
    )
    t.start()
    t.join(5)
    assert out, "inspect_parquet blocked on a FIFO"
    info = out[0]
    assert isinstance(info, DatasetInfo) and "not a regular file" in info.findings[0].message


def test_snippet_in_a_subprocess_gives_the_same_result(tmp_path: Path) -> None:
    good = write(tmp_path / "good.parquet", verl_rows())
    cols = verl_rows()
    cols["prompt"] = ["a", "b", "c"]
    bad = write(tmp_path / "bad.parquet", cols)
    argv = parquet_check_argv([good, bad], python=sys.executable)
    proc = subprocess.run(argv, capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    remote = parse_parquet_check_output(proc.stdout)
    assert all(isinstance(r, DatasetInfo) and r.checked_in == "container" for r in remote)
    local = [inspect_parquet(good), inspect_parquet(bad)]
    assert [r.model_dump(exclude={"checked_in"}) for r in remote] == [
        r.model_dump(exclude={"checked_in"}) for r in local
    ]


def test_snippet_is_stdlib_and_pyarrow_only() -> None:
    import ast

    tree = ast.parse(PARQUET_CHECK_SNIPPET)
    imported = {
        (n.module or "").split(".")[0] if isinstance(n, ast.ImportFrom) else a.name.split(".")[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported <= {"json", "os", "stat", "sys", "pyarrow"}


_NO_PYARROW = textwrap.dedent(
    """
    import importlib.abc, json, sys

    class NoPyarrow(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "pyarrow" or name.startswith("pyarrow."):
                raise ImportError("No module named " + repr(name))
            return None

    sys.meta_path.insert(0, NoPyarrow())
    mode = sys.argv[1]
    if mode == "inspect":
        from verlctl.detect.datasets import inspect_parquet
        print(inspect_parquet(sys.argv[2]).model_dump_json())
    elif mode == "snippet":
        from verlctl.detect.datasets import PARQUET_CHECK_SNIPPET
        sys.argv = ["-c", sys.argv[2]]
        exec(compile(PARQUET_CHECK_SNIPPET, "<snippet>", "exec"), {"__name__": "__main__"})
    """
)


def test_without_pyarrow_the_result_is_typed_unavailable(tmp_path: Path) -> None:
    # a real interpreter in which `import pyarrow` fails, as on a host without the [parquet] extra
    path = write(tmp_path / "d.parquet", verl_rows())
    proc = subprocess.run(
        [sys.executable, "-c", _NO_PYARROW, "inspect", path], capture_output=True, text=True, check=True
    )
    result = Unavailable.model_validate_json(proc.stdout)
    assert result.code is UnavailableCode.MISSING_DEPENDENCY and "pyarrow not installed" in result.reason
    snippet = subprocess.run(
        [sys.executable, "-c", _NO_PYARROW, "snippet", path], capture_output=True, text=True, check=True
    )
    parsed = parse_parquet_check_output(snippet.stdout)
    assert len(parsed) == 1 and isinstance(parsed[0], Unavailable)
    assert parsed[0].code is UnavailableCode.MISSING_DEPENDENCY


def test_parse_output_that_is_not_json() -> None:
    out = parse_parquet_check_output("Traceback (most recent call last):\n  ...\nSyntaxError: x\n")
    assert len(out) == 1 and isinstance(out[0], Unavailable) and out[0].code is UnavailableCode.FAILED
