"""Every test that waits for "the watcher has scanned it" goes through one mechanism,
``host_launch_support.scanned_after``: a single status write later than a moment is not a scan after it (the
watcher writes its status at the top of a turn and scans after the write), and a hand-written comparison of
``updated_at`` once hung a CI run for 900 s. This enumerates the callers: no test file compares it itself."""

from __future__ import annotations

import re

from docker_support import REPO_ROOT

HAND_WAIT = re.compile(r"""get\(\s*["']updated_at["']\s*,\s*0\s*\)\s*>""")


def test_no_test_compares_the_watchers_status_time_by_hand() -> None:
    tests = REPO_ROOT / "tests"
    found = [f"{p.relative_to(REPO_ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
             for p in sorted(tests.rglob("*.py"))
             if p.name != "test_scan_waits.py"  # the mechanism (host_launch_support) is checked too
             for text in [p.read_text(encoding="utf-8")] for m in HAND_WAIT.finditer(text)]  # across lines too
    assert found == [], f"wait with host_launch_support.scanned_after instead: {found}"


def test_the_pattern_finds_the_hand_written_wait_it_replaced() -> None:
    old = """_until("a scan of it", lambda: (record.read_status() or {}).get("updated_at", 0) > seen_at + 0.5)"""
    assert HAND_WAIT.search(old)
    split = """(load_run(run_id).read_status() or {}).get("updated_at", 0)\n               > alert["time"], proc)"""
    assert HAND_WAIT.search(split)  # a wait broken over two lines
