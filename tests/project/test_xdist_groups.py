"""`--dist loadgroup` keeps an `xdist_group` on one worker (tests/xdist_groups.py): the suite's module-scoped
builds (the 200k-file scan tree, the composed verl cases, shared containers) are made once, not per worker."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_grouped_tests_run_on_one_worker_and_the_others_are_spread(tmp_path: Path) -> None:
    (tmp_path / "test_g.py").write_text(
        "import pytest\n\n"
        "@pytest.mark.xdist_group('g')\n@pytest.mark.parametrize('i', range(6))\ndef test_grouped(i):\n    pass\n\n"
        "@pytest.mark.parametrize('i', range(6))\ndef test_free(i):\n    pass\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist_groups", "-p", "no:cacheprovider", "-n", "2", "--dist",
         "loadgroup", "-v", "-rN", "--rootdir", str(tmp_path), "-c", "/dev/null", str(tmp_path / "test_g.py")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "tests"), "HOME": str(tmp_path)}, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    ran = re.findall(r"\[(gw\d)\] .*PASSED \S*::(test_\w+)\[(\d)\](@\w+)?", proc.stdout)
    assert len(ran) == 12, proc.stdout
    grouped = {(w, tag) for w, name, _, tag in ran if name == "test_grouped"}
    assert len(grouped) == 1 and next(iter(grouped))[1] == "@g", grouped  # one worker, the id tagged
    assert all(tag == "" for _, name, _, tag in ran if name == "test_free")


def test_the_long_work_is_handed_out_first(tmp_path: Path) -> None:
    """Docker, slow and grouped tests before the quick ones, in collection order otherwise: what the two
    workers run first (the order xdist hands out)."""
    (tmp_path / "test_a.py").write_text(
        "import pytest\n\n"
        "def test_quick_1():\n    pass\n\n"
        "@pytest.mark.slow\ndef test_slow():\n    pass\n\n"
        "def test_quick_2():\n    pass\n\n"
        "@pytest.mark.xdist_group('g')\ndef test_grouped():\n    pass\n\n"
        "@pytest.mark.real_verl\ndef test_real():\n    pass\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "xdist_groups", "-p", "no:cacheprovider", "--dist", "loadgroup",
         "--collect-only", "-q", "--rootdir", str(tmp_path), "-c", "/dev/null", "-W", "ignore::pytest.PytestUnknownMarkWarning",
         str(tmp_path / "test_a.py")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "tests"), "HOME": str(tmp_path)}, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    order = re.findall(r"::(test_\w+)", proc.stdout)
    assert order == ["test_real", "test_slow", "test_grouped", "test_quick_1", "test_quick_2"], proc.stdout
