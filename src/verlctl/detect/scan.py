"""Find model directories and parquet files under scan roots: depth-bounded, parallel, on a budget.

Semantics (compare ``find ROOT -maxdepth N``): a root is depth 0; directories down to depth
``max_depth`` are listed, so a model directory at depth ``<= max_depth`` is recognised (its files
are at ``max_depth + 1``) and parquet files down to depth ``max_depth + 1`` are found.

How it stays on time: directory listings run in daemon worker threads fed from one queue. The
caller's thread (the coordinator) never touches the file system under the roots; it waits on a
condition until the work is done or the budget is spent, then returns what it has. A worker stuck
in ``scandir`` on a stalled NFS/FUSE mount is abandoned (it is a daemon thread, so it blocks
neither the return nor the interpreter's exit), and the directory it was listing is reported in
``unfinished``; directories still queued are reported in ``unreached``.

How many workers: listing a cached directory is mostly Python holding the GIL, so more than two
busy threads only fight over it (8 were 2x slower than 2 on a 200,000-file tree). The scan starts
``BASE_WORKERS`` and the coordinator starts a spare, up to ``workers``, for each listing that has
been running longer than ``SLOW_LISTING_S`` (a slow or stalled mount), so the rest goes on.

Pruned: pseudo file systems (proc, sysfs, cgroup, …, container overlay mounts and
``/var/lib/docker``), dependency and VCS trees (``.git``, ``node_modules``, ``site-packages``, …)
and the inside of a model directory once it is recognised.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from pydantic import BaseModel

from verlctl.detect.common import ProbeModel
from verlctl.detect.datasets import DatasetFile
from verlctl.detect.models import ModelInfo, inspect_model, looks_like_model_dir

DEFAULT_SCAN_ROOTS: tuple[str, ...] = ("/mnt/public", "/mnt2", "/mnt/project", "/mnt")
DEFAULT_MAX_DEPTH = 4
DEFAULT_BUDGET_S = 10.0
DEFAULT_WORKERS = 8  # the most threads, spares included
BASE_WORKERS = 2  # threads started at once
SLOW_LISTING_S = 0.2  # a listing running longer than this gets a spare worker started

PRUNE_NAMES: frozenset[str] = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        "site-packages",
        "dist-packages",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".Trash-0",
    }
)
PSEUDO_FS_TYPES: frozenset[str] = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "securityfs",
        "debugfs",
        "tracefs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "mqueue",
        "hugetlbfs",
        "binfmt_misc",
        "rpc_pipefs",
        "nsfs",
        "efivarfs",
        "selinuxfs",
        "autofs",  # the autofs trigger dir itself; what it mounts shows up as its own (real) mount
    }
)
SKIP_PATHS: frozenset[str] = frozenset(
    {"/proc", "/sys", "/dev", "/run", "/var/lib/docker", "/var/lib/containerd", "/snap"}
)


class ScanOptions(BaseModel):
    roots: list[str] = list(DEFAULT_SCAN_ROOTS)
    max_depth: int = DEFAULT_MAX_DEPTH
    budget_s: float = DEFAULT_BUDGET_S
    workers: int = DEFAULT_WORKERS
    models: bool = True
    parquet: bool = True
    inspect_models: bool = True  # read config.json + safetensors headers of each model found
    prune_names: list[str] = sorted(PRUNE_NAMES)
    follow_symlinks: bool = True  # symlinked directories are followed once (cycles are skipped)
    max_reported: int = 50  # cap on each list of paths in the result (counts stay exact)


class UnreadableDir(BaseModel):
    path: str
    error: str


class ScanResult(ProbeModel):
    roots: list[str]
    max_depth: int
    budget_s: float
    elapsed_s: float
    timed_out: bool
    models: list[ModelInfo] = []
    parquet_files: list[DatasetFile] = []
    missing_roots: list[str] = []
    incomplete_roots: list[str] = []  # roots whose subtree was not fully listed
    unreadable: list[UnreadableDir] = []
    unreadable_count: int = 0
    unfinished: list[str] = []  # being listed when the budget ran out (e.g. a stalled mount)
    unreached: list[str] = []  # queued, never listed
    unreached_count: int = 0
    skipped: list[str] = []  # pseudo file systems and skip paths met under the roots
    dirs_listed: int = 0
    entries_seen: int = 0

    @property
    def complete(self) -> bool:
        return not self.timed_out and not self.incomplete_roots


@dataclass
class _Item:
    path: str
    depth: int
    root: int


@dataclass
class _Listing:
    subdirs: list[str] = field(default_factory=list)
    parquet: list[DatasetFile] = field(default_factory=list)
    model: ModelInfo | None = None
    entries: int = 0
    skipped: list[str] = field(default_factory=list)


def _unescape_mount(path: str) -> str:
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """``/proc/self/mountinfo`` -> [(mount point, fs type)]."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        rfields = right.split()
        if len(fields) >= 5 and rfields:
            out.append((_unescape_mount(fields[4]), rfields[0]))
    return out


def pseudo_mount_points(mounts: list[tuple[str, str]]) -> set[str]:
    """Mount points a model scan must not enter: pseudo file systems and container layers."""
    skip: set[str] = set()
    for point, fstype in mounts:
        if fstype in PSEUDO_FS_TYPES or (
            fstype in ("overlay", "aufs") and point.startswith(("/var/lib/docker", "/var/lib/containerd"))
        ):
            skip.add(point)
    return skip


def _load_skip_paths() -> set[str]:
    skip = set(SKIP_PATHS)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            skip |= pseudo_mount_points(parse_mountinfo(fh.read()))
    except OSError:
        pass
    return skip


class _Scan:
    def __init__(self, options: ScanOptions) -> None:
        self.opt = options
        self.prune = frozenset(options.prune_names)
        roots: list[str] = []
        for r in options.roots:
            p = os.path.abspath(r)
            if p not in roots:
                roots.append(p)
        self.roots = roots
        self.root_set = frozenset(roots)
        self.skip = frozenset(_load_skip_paths() - self.root_set)  # an explicit root is never skipped
        # One lock, two conditions: a finished listing wakes only as many idle workers as it queued
        # directories (waking all of them on every listing made 8 workers slower than 2), and the
        # coordinator only when the scan is done.
        lock = threading.Lock()
        self.cond = threading.Condition(lock)
        self.work = threading.Condition(lock)
        self.queue: deque[_Item] = deque(_Item(r, 0, i) for i, r in enumerate(roots))
        self.pending = len(roots)
        self.in_progress: dict[int, _Item] = {}
        self.listing_since: dict[int, float] = {}
        self.closed = False
        self.models: list[ModelInfo] = []
        self.parquet: list[DatasetFile] = []
        self.missing: list[str] = []
        self.unreadable: list[UnreadableDir] = []
        self.skipped: list[str] = []
        self.real_seen: set[str] = set()
        self.dirs_listed = 0
        self.entries = 0

    # ---- worker side -------------------------------------------------------------------------
    def worker(self) -> None:
        ident = threading.get_ident()
        while True:
            with self.cond:
                while not self.queue and not self.closed and self.pending > 0:
                    self.work.wait()
                if self.closed or not self.queue:
                    return
                item = self.queue.popleft()
                self.in_progress[ident] = item
                self.listing_since[ident] = time.monotonic()
            listing: _Listing | None = None
            failure: tuple[str, str] | None = None
            try:
                listing = self._list(item)
            except FileNotFoundError as exc:
                failure = ("missing", exc.strerror or str(exc))
            except NotADirectoryError:
                failure = ("missing", "not a directory")
            except OSError as exc:
                failure = ("unreadable", f"{type(exc).__name__}: {exc.strerror or exc}")
            with self.cond:
                if self.closed:
                    return
                self.in_progress.pop(ident, None)
                self.listing_since.pop(ident, None)
                self.pending -= 1
                if failure is not None:
                    kind, why = failure
                    if kind == "missing" and item.depth == 0:
                        self.missing.append(
                            item.path if why != "not a directory" else f"{item.path} (not a directory)"
                        )
                    elif kind == "unreadable":
                        self.unreadable.append(UnreadableDir(path=item.path, error=why))
                elif listing is not None:
                    self.dirs_listed += 1
                    self.entries += listing.entries
                    self.parquet.extend(listing.parquet)
                    self.skipped.extend(listing.skipped)
                    if listing.model is not None:
                        self.models.append(listing.model)
                    if item.depth < self.opt.max_depth and listing.subdirs:
                        for sub in listing.subdirs:
                            self.queue.append(_Item(sub, item.depth + 1, item.root))
                        self.pending += len(listing.subdirs)
                        self.work.notify(len(listing.subdirs) - 1)  # this worker takes one itself
                if self.pending == 0:
                    self.work.notify_all()  # idle workers exit
                    self.cond.notify_all()  # the coordinator returns

    def _list(self, item: _Item) -> _Listing:
        # The hot loop: one scandir, d_type only (no stat), as little Python per entry as possible.
        out = _Listing()
        want_parquet = self.opt.parquet
        descend = item.depth < self.opt.max_depth
        prune = self.prune
        subdirs = out.subdirs
        parquet: list[os.DirEntry[str]] = []
        symlinked: list[os.DirEntry[str]] = []
        has_config = False
        entries = 0
        with os.scandir(item.path) as it:
            for entries, entry in enumerate(it, 1):  # noqa: B007 (the count is read after the loop)
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    continue
                if is_dir:
                    if descend and entry.name not in prune:
                        if entry.is_symlink():
                            symlinked.append(entry)
                        else:
                            subdirs.append(entry.path)
                    continue
                name = entry.name
                if want_parquet and name.endswith(".parquet"):
                    parquet.append(entry)
                elif name == "config.json":
                    has_config = True
        out.entries = entries
        for entry in parquet:
            try:
                size: int | None = entry.stat().st_size
            except OSError:
                size = None
            out.parquet.append(DatasetFile(path=entry.path, size_bytes=size))
        for entry in symlinked:
            if self._follow(entry.path, item.path):
                subdirs.append(entry.path)
        if subdirs and (self.skip or len(self.root_set) > 1):
            kept = []
            for path in subdirs:
                if path in self.skip:
                    out.skipped.append(path)
                elif path not in self.root_set:  # a root inside another root is scanned on its own
                    kept.append(path)
            out.subdirs = kept
        if has_config and self.opt.models:
            self._check_model(item.path, out)
        return out

    def _check_model(self, path: str, out: _Listing) -> None:
        with os.scandir(path) as it:
            files = [e.name for e in it if not e.is_dir()]
        if not looks_like_model_dir(files):
            return
        if self.opt.inspect_models:
            out.model = inspect_model(path, names=files)
        else:
            out.model = ModelInfo(path=path, name=os.path.basename(path))
        out.subdirs = []  # a model directory's own subtree is not searched

    def _follow(self, link: str, parent: str) -> bool:
        if not self.opt.follow_symlinks:
            return False
        real = os.path.realpath(link)
        parent_real = os.path.realpath(parent)
        if parent_real == real or parent_real.startswith(real.rstrip(os.sep) + os.sep):
            return False  # points at an ancestor: a cycle
        with self.cond:
            if real in self.real_seen:
                return False
            self.real_seen.add(real)
        return True

    # ---- coordinator side --------------------------------------------------------------------
    def run(self) -> ScanResult:
        started = time.monotonic()
        deadline = started + max(0.0, self.opt.budget_s)
        most = max(1, min(self.opt.workers, 64))
        started_threads = 0

        def start(n: int) -> None:
            nonlocal started_threads
            for _ in range(n):
                threading.Thread(target=self.worker, name=f"verlctl-scan-{started_threads}", daemon=True).start()
                started_threads += 1

        with self.cond:
            start(min(most, BASE_WORKERS))
            while self.pending > 0:
                now = time.monotonic()
                left = deadline - now
                if left <= 0:
                    break
                if started_threads < most:
                    slow = sum(1 for t0 in self.listing_since.values() if now - t0 > SLOW_LISTING_S)
                    if slow and self.queue:
                        start(min(most, BASE_WORKERS + slow) - started_threads)
                    self.cond.wait(min(left, SLOW_LISTING_S / 2))
                else:
                    self.cond.wait(left)
            timed_out = self.pending > 0
            self.closed = True
            self.work.notify_all()
            unfinished_items = list(self.in_progress.values())
            unreached_items = list(self.queue)
            result = self._result(started, timed_out, unfinished_items, unreached_items)
        return result

    def _result(
        self, started: float, timed_out: bool, unfinished: list[_Item], unreached: list[_Item]
    ) -> ScanResult:
        cap = self.opt.max_reported
        incomplete = sorted({i.root for i in unfinished} | {i.root for i in unreached})
        return ScanResult(
            roots=self.roots,
            max_depth=self.opt.max_depth,
            budget_s=self.opt.budget_s,
            elapsed_s=round(time.monotonic() - started, 4),
            timed_out=timed_out,
            models=sorted(self.models, key=lambda m: m.path),
            parquet_files=sorted(self.parquet, key=lambda f: f.path),
            missing_roots=sorted(self.missing),
            incomplete_roots=[self.roots[i] for i in incomplete],
            unreadable=sorted(self.unreadable, key=lambda u: u.path)[:cap],
            unreadable_count=len(self.unreadable),
            unfinished=sorted(i.path for i in unfinished)[:cap],
            unreached=[i.path for i in unreached][:cap],
            unreached_count=len(unreached),
            skipped=sorted(set(self.skipped))[:cap],
            dirs_listed=self.dirs_listed,
            entries_seen=self.entries,
        )


def scan(options: ScanOptions | None = None, **overrides: object) -> ScanResult:
    """Scan ``options.roots`` for model directories and parquet files; returns within the budget.

    ``scan(roots=[...], budget_s=2)`` is a shorthand for ``scan(ScanOptions(roots=[...], budget_s=2))``.
    """
    opt = options or ScanOptions()
    if overrides:
        opt = ScanOptions.model_validate({**opt.model_dump(), **overrides})
    return _Scan(opt).run()
