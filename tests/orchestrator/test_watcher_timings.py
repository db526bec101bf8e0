"""The watcher's timings and bounds are the ones docs/recovery.md tells users ("What the watcher waits for"): a
change to one of them in `orchestrator/watcher.py` (or to the stop's default grace the table quotes) without the guide fails
here."""

from __future__ import annotations

import re

from verlctl.orchestrator import watcher
from verlctl.runtime.executor import HostExecutor

from conftest import ROOT


def _table() -> dict[str, str]:
    text = (ROOT / "docs" / "recovery.md").read_text(encoding="utf-8")
    section = text.split("\n## What the watcher waits for\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (.+?) \| ([^|]+?) \|$", section, flags=re.M)
    return {what: value for what, value in rows if what != "what" and not set(what) <= {"-"}}


def _row(starts: str) -> str:
    found = [v for k, v in _table().items() if k.startswith(starts)]
    assert len(found) == 1, (starts, _table())
    return found[0]


def test_the_guide_s_table_is_the_watcher_s_values() -> None:
    assert _row("`--notify-cmd` is killed") == f"{watcher.NOTIFY_TIMEOUT_S} s"
    assert _row("an attempt whose Ray head died") == f"{watcher.HEAD_DIED_GRACE_S} s"
    assert _row("a failed attempt's Ray daemons") == f"{watcher.TEARDOWN_RAY_GRACE_S} s"
    assert _row("before giving up on an attempt") == f"{watcher.GIVE_UP_WAIT_S:g} s"
    assert _row("a restarting Docker engine") == f"{watcher.ENGINE_WAIT_S:g} s"
    assert _row("the run log is checked") == f"{watcher.LOG_CHECK_EVERY_S:g} s"
    assert _row("a run that ended without an error line") == f"{watcher.DISK_FULL_BELOW_KIB} KiB"
    assert _row("`df` may take") == f"{watcher.DF_TIMEOUT_S} s"
    assert _row("the device tool") == f"{watcher.DEVICE_TOOL_TIMEOUT_S} s, {watcher.MEMORY_POLL_S} s"
    assert _row("read of verl's checkpoint tracker") == f"{watcher.TRACKER_MAX_BYTES} bytes"
    assert _row("a Docker engine's error message") == f"{watcher.ENGINE_ERROR_CHARS} characters"
    assert _row("a stall is called once it still holds") == f"{watcher.STALL_CONFIRM_S:g} s"


def test_the_training_s_grace_the_table_quotes_is_the_stop_s_default() -> None:
    """The teardown leaves the training's grace to the executor's default ("SIGKILL after 20 s")."""
    import inspect

    default = inspect.signature(HostExecutor.stop_group).parameters["grace_s"].default
    assert f"then SIGKILL after {default:g} s)" in next(k for k in _table() if k.startswith("a failed attempt's"))

