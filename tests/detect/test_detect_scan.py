"""The model/dataset scan on real trees: depth bound (compared with `find -maxdepth`), pruning, roots,
symlinks, pseudo file systems, unreadable directories, and a really stalled mount (FUSE, see
stall_mount.py) that must not hang the scan, `detect_machine` or the `verlctl` process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from detect_helpers import run_verlctl
from detect_modeldirs import make_model
from stall_mount import StalledMount
from verlctl.detect.scan import parse_mountinfo, pseudo_mount_points, scan


def model_paths(result: object) -> list[str]:
    return sorted(m.path for m in result.models)  # type: ignore[attr-defined]


def touch(path: Path, data: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


# --------------------------------------------------------------------------------------------------
# depth, pruning, roots
# --------------------------------------------------------------------------------------------------


def test_depth_bound_matches_find_maxdepth(tmp_path: Path) -> None:
    root = tmp_path / "root"
    chain = root
    for depth in range(1, 7):
        make_model(chain / f"Qwen-d{depth}", shards=1)
        touch(chain / f"data-d{depth}.parquet")
        chain = chain / f"level{depth}"
    result = scan(roots=[str(root)], max_depth=4, budget_s=10)
    assert not result.timed_out and result.complete
    found = subprocess.run(
        ["find", str(root), "-maxdepth", "4", "-type", "d", "-name", "Qwen*"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert model_paths(result) == sorted(found)
    assert [Path(p).name for p in model_paths(result)] == ["Qwen-d1", "Qwen-d2", "Qwen-d3", "Qwen-d4"]
    # files are found down to max_depth + 1 (they sit in the listed directories)
    assert [Path(f.path).name for f in result.parquet_files] == [f"data-d{d}.parquet" for d in range(1, 6)]
    assert all(f.size_bytes == 0 for f in result.parquet_files)


def test_pruned_trees_and_model_subtrees(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_model(root / "models" / "Qwen3-8B", shards=1)
    make_model(root / "models" / "Qwen3-8B" / "nested-draft", shards=1)  # inside a model dir: not searched
    for pruned in (".git", "node_modules", "__pycache__", "site-packages"):
        make_model(root / pruned / "Qwen-hidden", shards=1)
        touch(root / pruned / "hidden.parquet")
    touch(root / "data" / "train.parquet", b"PAR1")
    result = scan(roots=[str(root)], budget_s=10)
    assert model_paths(result) == [str(root / "models" / "Qwen3-8B")]
    assert [f.path for f in result.parquet_files] == [str(root / "data" / "train.parquet")]
    assert result.parquet_files[0].size_bytes == 4


def test_incomplete_model_dirs_are_reported_with_reasons(tmp_path: Path) -> None:
    root = tmp_path / "r"
    make_model(root / "ckpt" / "global_step_50" / "huggingface", weights=False)
    (root / "proj").mkdir(parents=True)
    (root / "proj" / "config.json").write_text("{}")  # a config.json alone is not a model candidate
    result = scan(roots=[str(root)], budget_s=10)
    assert len(result.models) == 1
    m = result.models[0]
    assert not m.is_model and m.missing == ["no weights (*.safetensors or pytorch_model*.bin)"]


def test_overlapping_roots_are_scanned_once_each(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    deep = mnt / "public" / "a" / "b" / "c" / "Qwen2.5-7B"  # depth 4 from mnt/public, 5 from mnt
    make_model(deep, shards=1)
    make_model(mnt / "project" / "Llama", shards=1)
    touch(mnt / "public" / "x.parquet")
    roots = [str(mnt / "public"), str(tmp_path / "mnt2"), str(mnt / "project"), str(mnt)]
    result = scan(roots=roots, budget_s=10)
    assert model_paths(result) == sorted([str(deep), str(mnt / "project" / "Llama")])
    assert [f.path for f in result.parquet_files] == [str(mnt / "public" / "x.parquet")]
    assert result.missing_roots == [str(tmp_path / "mnt2")]


def test_missing_and_file_roots(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    result = scan(roots=[str(tmp_path / "nope"), str(tmp_path / "afile")], budget_s=5)
    assert result.missing_roots == [f"{tmp_path / 'afile'} (not a directory)", str(tmp_path / "nope")]
    assert not result.timed_out and result.models == [] and result.unreadable == []


def test_symlinked_dirs_followed_once_and_cycles_cut(tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "weights"
    make_model(outside / "Qwen-linked", shards=1)
    root = tmp_path / "root"
    (root / "a").mkdir(parents=True)
    (root / "a" / "models").symlink_to(outside)
    (root / "b").mkdir()
    (root / "b" / "same-models").symlink_to(outside)  # the same target twice
    (root / "a" / "loop").symlink_to(root)  # a cycle back to the root
    (root / "a" / "dangling").symlink_to(tmp_path / "does-not-exist")
    result = scan(roots=[str(root)], budget_s=10)
    assert not result.timed_out
    assert [Path(p).name for p in model_paths(result)] == ["Qwen-linked"]
    no_follow = scan(roots=[str(root)], budget_s=10, follow_symlinks=False)
    assert no_follow.models == []


def test_budget_is_kept_and_what_was_not_reached_is_reported(tmp_path: Path) -> None:
    root = tmp_path / "wide"
    for i in range(300):
        for j in range(20):
            (root / f"d{i:03d}" / f"e{j:02d}").mkdir(parents=True)
    t = time.monotonic()
    result = scan(roots=[str(root)], budget_s=0.02, workers=2)
    took = time.monotonic() - t
    assert result.timed_out and not result.complete
    assert took < 1.5
    assert result.incomplete_roots == [str(root)]
    assert result.unreached_count > 0 and len(result.unreached) <= 50
    assert result.dirs_listed + result.unreached_count + len(result.unfinished) <= 1 + 300 + 300 * 20


# --------------------------------------------------------------------------------------------------
# pseudo file systems
# --------------------------------------------------------------------------------------------------


def test_mountinfo_parsing_finds_proc_and_sys_here() -> None:
    mounts = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    types = dict(mounts)
    assert types.get("/proc") == "proc"
    skip = pseudo_mount_points(mounts)
    assert "/proc" in skip and "/sys" in skip
    sample = "36 35 98:0 / /var/lib/docker/overlay2/abc/merged rw - overlay overlay rw\n40 1 0:5 / /my\\040dir rw - ext4 /dev/x rw\n"
    assert pseudo_mount_points(parse_mountinfo(sample)) == {"/var/lib/docker/overlay2/abc/merged"}
    assert ("/my dir", "ext4") in parse_mountinfo(sample)


def test_a_proc_mount_under_a_root_is_not_entered(tmp_path: Path) -> None:
    root = tmp_path / "root"
    target = root / "procfs"
    target.mkdir(parents=True)
    make_model(root / "Qwen-ok", shards=1)
    rc = subprocess.run(["mount", "-t", "proc", "proc", str(target)], capture_output=True, text=True)
    if rc.returncode != 0:
        pytest.skip(f"cannot mount proc here: {rc.stderr.strip()}")
    try:
        result = scan(roots=[str(root)], budget_s=10)
        assert result.skipped == [str(target)]
        assert model_paths(result) == [str(root / "Qwen-ok")]
        assert result.dirs_listed == 2  # the root and the model dir; nothing of /proc
        inside = scan(roots=[str(target)], budget_s=10, max_depth=1)  # an explicit root is honoured
        assert inside.dirs_listed > 1
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


# --------------------------------------------------------------------------------------------------
# unreadable directories: real permission failures. Tests run as root, for whom mode 000 means nothing,
# so the scan runs in a child process whose capability bounding set lacks CAP_DAC_OVERRIDE and
# CAP_DAC_READ_SEARCH (util-linux `setpriv`): a root without them obeys permission bits.
# --------------------------------------------------------------------------------------------------

_SCAN_JSON = textwrap.dedent(
    """
    import json, sys
    from verlctl.detect.scan import scan
    r = scan(roots=[sys.argv[1]], budget_s=10)
    print(json.dumps({"models": [m.path for m in r.models], "unreadable": [u.model_dump() for u in r.unreadable],
                      "timed_out": r.timed_out, "count": r.unreadable_count}))
    """
)


def test_unreadable_directory_is_reported_not_fatal(tmp_path: Path) -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("needs util-linux setpriv to drop CAP_DAC_OVERRIDE")
    root = tmp_path / "root"
    make_model(root / "Qwen-visible", shards=1)
    make_model(root / "locked" / "Qwen-hidden", shards=1)
    (root / "locked").chmod(0o000)
    try:
        argv = [
            setpriv,
            "--bounding-set=-dac_override,-dac_read_search",
            sys.executable,
            "-c",
            _SCAN_JSON,
            str(root),
        ]
        if os.geteuid() != 0:  # an ordinary user obeys permission bits anyway
            argv = [sys.executable, "-c", _SCAN_JSON, str(root)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        (root / "locked").chmod(0o755)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["models"] == [str(root / "Qwen-visible")]
    assert out["unreadable"] == [
        {"path": str(root / "locked"), "error": "PermissionError: Permission denied"}
    ]
    assert out["count"] == 1 and not out["timed_out"]


# --------------------------------------------------------------------------------------------------
# a really stalled mount, and a dead (stale) one
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def fuse_ok(tmp_path: Path) -> None:
    why = StalledMount.available(tmp_path)
    if why:
        pytest.skip(why)


def test_stalled_mount_does_not_hang_the_scan(tmp_path: Path, fuse_ok: None) -> None:
    good = tmp_path / "good"
    make_model(good / "Qwen-good", shards=1)
    other = tmp_path / "other"
    make_model(other / "a" / "Llama-ok", shards=1)
    with StalledMount(tmp_path / "stalled-root") as root_mount, StalledMount(other / "nfs") as nested:
        t = time.monotonic()
        result = scan(roots=[str(good), str(root_mount.target), str(other)], budget_s=1.5, workers=4)
        took = time.monotonic() - t
        assert 1.4 < took < 4.0, took  # the budget, plus scheduling slack on a loaded machine
        assert result.timed_out
        assert model_paths(result) == sorted([str(good / "Qwen-good"), str(other / "a" / "Llama-ok")])
        assert sorted(result.unfinished) == sorted([str(root_mount.target), str(nested.target)])
        assert sorted(result.incomplete_roots) == sorted([str(root_mount.target), str(other)])
        root_mount.abort()
        nested.abort()


def test_spare_workers_take_over_from_listings_stuck_on_stalled_mounts(tmp_path: Path, fuse_ok: None) -> None:
    # Two workers start; both take a stalled root first (roots are queued in order). The good root is
    # listed only because the coordinator starts a spare for each listing stuck past SLOW_LISTING_S.
    from verlctl.detect.scan import BASE_WORKERS

    assert BASE_WORKERS == 2
    good = tmp_path / "good"
    make_model(good / "Qwen-good", shards=1)
    with StalledMount(tmp_path / "stall-a") as a, StalledMount(tmp_path / "stall-b") as b:
        roots = [str(a.target), str(b.target), str(good)]
        with_spares = scan(roots=roots, budget_s=1.5, workers=4)
        without = scan(roots=roots, budget_s=0.5, workers=2)  # no spare allowed: the good root waits
        a.abort()
        b.abort()
    assert model_paths(with_spares) == [str(good / "Qwen-good")]
    assert sorted(with_spares.unfinished) == sorted(roots[:2])
    assert model_paths(without) == [] and without.unreached == [str(good)]


def test_stale_fuse_mount_is_unreadable_not_fatal(tmp_path: Path, fuse_ok: None) -> None:
    root = tmp_path / "root"
    make_model(root / "Qwen-ok", shards=1)
    with StalledMount(root / "sshfs") as m:
        m.abort()  # the server is gone: ENOTCONN
        result = scan(roots=[str(root)], budget_s=5)
        assert not result.timed_out
        assert model_paths(result) == [str(root / "Qwen-ok")]
        assert [(u.path, u.error) for u in result.unreadable] == [
            (str(m.target), "OSError: Transport endpoint is not connected")
        ]


def test_stalled_paths_do_not_hang_detect_machine(tmp_path: Path, fuse_ok: None) -> None:
    from verlctl.detect.common import Unavailable, UnavailableCode
    from verlctl.detect.machine import DetectOptions, detect_machine

    good = tmp_path / "good"
    make_model(good / "Qwen-good", shards=1)
    with StalledMount(tmp_path / "stall") as m:
        t = time.monotonic()
        state = detect_machine(
            DetectOptions(
                probes=["models", "system"],
                scan_roots=[str(good), str(m.target)],
                budget_s=1.0,
                disk_paths=[str(m.target / "ckpts")],
                system_timeout_s=1.0,
            )
        )
        assert time.monotonic() - t < 4.0
        assert [x.path for x in state.models] == [str(good / "Qwen-good")]
        disk = state.system.disks[0]  # type: ignore[union-attr]
        assert isinstance(disk, Unavailable) and disk.code is UnavailableCode.TIMEOUT
        m.abort()


def test_stalled_mount_does_not_hang_the_verlctl_process(tmp_path: Path, fuse_ok: None) -> None:
    # daemon threads stuck in the kernel must not keep the interpreter from exiting
    good = tmp_path / "good"
    make_model(good / "Qwen-good", shards=1)
    with StalledMount(tmp_path / "stall") as m:
        t = time.monotonic()
        run = run_verlctl(
            "detect", "models", "--json", "--scan-root", str(good), "--scan-root", str(m.target), "--budget", "1",
            timeout=60,
        )  # fmt: skip
        took = time.monotonic() - t
        m.abort()
    assert run.code == 0, run.err
    assert took < 15, took
    scan_out = run.json()["scan"]  # type: ignore[index]
    assert [x["path"] for x in scan_out["models"]] == [str(good / "Qwen-good")]
    assert scan_out["unfinished"] == [str(m.target)] and scan_out["timed_out"] is True
