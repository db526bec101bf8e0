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
    assert {"feature offload", "feature recompute"} <= set(known), known  # a feature's lines under its name
    lines = script.splitlines()
    after = lines[lines.index("  # parallelism") + 1]
    assert after.strip().startswith("actor_rollout_ref.actor.megatron.tensor_model_parallel_size="), after


def test_a_note_shared_by_several_overrides_is_written_once_above_them() -> None:
    """DAPO's loss settings are six overrides with one reason: the comment comes once, right above the first."""
    lines = render_from(dict(BASE_PATHS)).files[TRAIN_SCRIPT].splitlines()
    note = "  # DAPO: no KL, clip-higher (0.2 / 0.28), token-level loss"
    assert lines.count(note) == 1
    at = lines.index(note)
    assert lines[at + 1] == "  algorithm.kl_ctrl.kl_coef=0.0"
    assert [ln for ln in lines[at + 1 : at + 7] if ln.startswith("  #")] == []


def test_the_start_script_speaks_the_devices_own_runtime() -> None:
    """NPU: CANN's environment sourced, the NPUs as a Ray resource, HCCL/GLOO/TP socket interfaces; GPU: none of
    CANN, ``--num-gpus``, NCCL/GLOO."""
    from verlctl.verl.environment import CANN_ENV_SCRIPTS

    npu = render_from(dict(BASE_PATHS)).files[START_SCRIPT]
    gpu = render_from({**BASE_PATHS, "device": "gpu", "strategy": "fsdp", "algorithm": "grpo"}).files[START_SCRIPT]
    assert """--resources='{"NPU": 8}'""" in npu and "--num-gpus" not in npu
    assert "--num-gpus=8" in gpu and '"NPU"' not in gpu
    assert CANN_ENV_SCRIPTS[0] in npu and CANN_ENV_SCRIPTS[0] not in gpu
    for name in ("HCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"):
        assert f'export {name}="$IFNAME"' in npu
    assert 'export NCCL_SOCKET_IFNAME="$IFNAME"' in gpu and 'export GLOO_SOCKET_IFNAME="$IFNAME"' in gpu
    assert "HCCL_SOCKET_IFNAME" not in gpu and "NCCL_SOCKET_IFNAME" not in npu


def test_the_ray_temp_dir_is_short_and_per_run() -> None:
    """Ray puts its Unix sockets under --temp-dir (a path limit of 107 bytes): the per-run directory is
    /tmp/verlctl-ray- and 8 hex digits of the experiment and checkpoint dir, different for another run."""
    import re

    def ray_tmp(**flags: object) -> str:
        script = render_from({**BASE_PATHS, **flags}).files[START_SCRIPT]
        m = re.search(r'RAY_TMP="\$\{VERLCTL_RAY_TMP:-(?P<dir>[^}]*)\}"', script)
        assert m is not None
        return m.group("dir")

    one = ray_tmp()
    assert re.fullmatch(r"/tmp/verlctl-ray-[0-9a-f]{8}", one), one
    assert ray_tmp(**{"logging.experiment": "another"}) != one
