"""render/render.py: what the written scripts are (modes), as the user's shell and ``ls -l`` see them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from verlctl.render.render import RESOLVED_SPEC, START_SCRIPT, TRAIN_SCRIPT

from conftest import BASE_PATHS
from scripts_harness import render_from


def test_the_scripts_are_executable_and_nothing_is_writable_by_others(tmp_path: Path) -> None:
    """``bash start_verl.sh`` is how verlctl starts them, but a user runs ``./run_training.sh`` by hand: the
    scripts are rwxr-xr-x; the resolved spec is rw-r--r-- (never group- or world-writable: it is what a relaunch
    reads back)."""
    old = os.umask(0o022)
    try:
        written = render_from(dict(BASE_PATHS)).write(tmp_path / "s")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in written}
    assert modes == {START_SCRIPT: 0o755, TRAIN_SCRIPT: 0o755, RESOLVED_SPEC: 0o644}


def test_each_section_of_the_training_command_is_titled_once() -> None:
    """run_training.sh groups the overrides under one comment per section (data, model, parallelism, ...,
    each feature), in the order verl's config reads; a section's lines are never split under repeated titles."""
    from verlctl.render.render import SECTION_TITLES

    script = render_from({**BASE_PATHS, "features.mask": "1111111"}).files[TRAIN_SCRIPT]
    titles = [line.strip()[2:] for line in script.splitlines() if line.startswith("  # ")]
    known = [t for t in titles if t in SECTION_TITLES.values() or t.startswith("feature ")]
    assert len(known) >= 6, titles
    assert len(known) == len(set(known)), known
    assert known[:3] == ["data", "model, optimiser and batch sizes", "parallelism"]
