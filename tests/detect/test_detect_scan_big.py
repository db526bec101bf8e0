"""A scan of a synthetic host tree of >= 200,000 files (bench/bench_scan.py's builder) finishes within
its budget and finds exactly the models and parquet files it should."""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

import pytest

from detect_helpers import REPO
from verlctl.detect.scan import DEFAULT_BUDGET_S, ScanOptions, scan

#: The 200k-file tree is module-scoped: one xdist worker runs the module, so it is built once, not per worker.
pytestmark = pytest.mark.xdist_group("detect-big-tree")


def _bench_module():  # bench/ is not a package: load the script by path
    spec = importlib.util.spec_from_file_location("bench_scan", REPO / "bench" / "bench_scan.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def big_tree(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    return _bench_module().build_tree(str(tmp_path_factory.mktemp("big")), 200_000)


def test_tree_has_at_least_200k_files(big_tree: dict[str, object]) -> None:
    assert big_tree["files"] >= 200_000  # type: ignore[operator]
    count = sum(len(files) for _, _, files in os.walk(str(big_tree["base"])))
    assert count == big_tree["files"]


def test_full_scan_within_default_budget(big_tree: dict[str, object]) -> None:
    opts = ScanOptions(roots=big_tree["roots"])  # type: ignore[arg-type]
    assert opts.budget_s == DEFAULT_BUDGET_S == 10.0
    t = time.monotonic()
    result = scan(opts)
    took = time.monotonic() - t
    assert not result.timed_out and result.complete
    assert took < opts.budget_s and result.elapsed_s < opts.budget_s
    assert sorted(m.path for m in result.models if m.is_model) == big_tree["expected_models"]
    assert sorted(f.path for f in result.parquet_files) == big_tree["expected_parquet"]
    assert all(m.param_count_source == "safetensors" for m in result.models)
    assert result.unreadable == [] and result.missing_roots == []


def test_tight_budget_returns_on_time_with_a_report(big_tree: dict[str, object]) -> None:
    t = time.monotonic()
    result = scan(ScanOptions(roots=big_tree["roots"], budget_s=0.01, inspect_models=False))  # type: ignore[arg-type]
    took = time.monotonic() - t
    assert took < 1.5
    if result.timed_out:  # a very fast machine might finish; then there is nothing to report
        assert result.incomplete_roots and (result.unreached_count or result.unfinished)


def test_worst_case_tree_nothing_to_prune_within_budget(tmp_path: Path) -> None:
    # every one of the >= 200k files within depth 4 and nothing prunable: the scan lists them all
    tree = _bench_module().build_flat_tree(str(tmp_path), 200_000)
    assert tree["files"] >= 200_000
    result = scan(ScanOptions(roots=tree["roots"]))  # type: ignore[arg-type]
    assert not result.timed_out and result.elapsed_s < 10.0
    assert result.entries_seen >= 200_000
    assert [m.path for m in result.models] == tree["expected_models"]
    assert [f.path for f in result.parquet_files] == tree["expected_parquet"]
