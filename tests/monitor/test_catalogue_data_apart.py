"""The error catalogue is two rooms: its data (``monitor/categories.py``: the categories, their signatures,
hints and recovery) and its matcher (``monitor/catalogue.py``: Matcher, Classifier, grep's ERE). The data
imports nothing of verlctl, so a reader of the categories (the guides, the watcher's hints) does not load the
matcher, and the matcher imports the data one way. Every name callers import from the catalogue still is there."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import verlctl.monitor.catalogue as matcher
import verlctl.monitor.categories as data

MONITOR = Path(data.__file__).parent


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_categories_import_nothing_of_verlctl_and_the_matcher_imports_them() -> None:
    assert not {m for m in _imports(MONITOR / "categories.py") if m.split(".")[0] == "verlctl"}
    assert "verlctl.monitor.categories" in _imports(MONITOR / "catalogue.py")


def test_reading_the_categories_does_not_load_the_matcher() -> None:
    code = ("import sys, verlctl.monitor.categories as c; assert c.CATALOGUE; "
            "print(sorted(m for m in sys.modules if m.startswith('verlctl.monitor')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['verlctl.monitor', 'verlctl.monitor.categories']"


def test_the_data_is_importable_from_the_catalogue_as_before() -> None:
    """Callers import the categories from ``verlctl.monitor.catalogue`` (the watcher, the guides, the tests):
    the matcher hands them the same objects, not copies."""
    for name in ("CATALOGUE", "CATEGORY_NAMES", "RANK", "RECOVERY", "RAY_DAEMONS_EXITED", "Category", "Signature",
                 "Silence", "all_anchors", "oom_hint", "recovery_for"):
        assert getattr(matcher, name) is getattr(data, name), name
    assert matcher.Matcher().catalogue is data.CATALOGUE
