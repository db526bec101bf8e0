"""Writing rendered files safely: atomically, never through a symlink planted where a file will go.

One rule for every ``-o`` (``report``, ``bundle``, ``export slurm``, ``export rayjob``, ``plan``, ``launch
--dry-run``, ``init``, ``import``, ``export-hf``): an empty ``-o`` is refused (it would mean the current
directory), and nothing that exists is replaced without ``--force``:

* ``-o FILE`` (:func:`check_out_file`): FILE is created, or replaced only with ``--force``; a directory, a
  FIFO, a device or any other non-regular file there is never replaced, with or without ``--force``.
* ``-o DIR`` (:func:`write_set`): DIR is created when missing; in an existing DIR, a file of the set that is
  already there (``start_verl.sh``, ``run_training.sh``, ``spec.resolved.yaml``) is replaced only with
  ``--force``, and no other file in DIR is ever touched. ``export-hf -o DIR`` takes a new (or empty) DIR only.

Each file is written to a new file (``O_EXCL``, so never an existing path or a symlink) and then renamed
over its name: ``rename`` replaces a symlink itself, it never writes to where the symlink points. A set of
files (``plan -o DIR``) is written into a private temporary directory inside DIR, then renamed into place
while holding an exclusive lock on DIR, so two plans into one directory leave one plan's whole set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from verlctl.errors import VerlctlError

#: The longest file name (bytes) when the file system does not say (Linux's NAME_MAX).
NAME_MAX = 255


def name_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot name a file here (a name or a path longer than the system takes), or None: asked
    before any ``stat``, which would fail with ENAMETOOLONG."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    try:
        limit = os.pathconf(parent, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = NAME_MAX
    size = len(os.fsencode(p.name))
    if size > limit:
        return f"the file name is too long ({size} bytes; at most {limit} here): give a shorter name"
    if len(os.fsencode(str(p.absolute()))) >= 4096:
        return "the path is too long (4096 bytes or more): give a shorter one"
    return None


def check_out_file(out: Path, force: bool, what: str = "-o", example: str = "out.txt") -> Path:
    """``-o FILE``: a file to create, or to replace with ``force`` (see the module docstring); else one line."""
    if str(out) in ("", "."):
        raise VerlctlError(f"{what}: the path is empty; give a file name, e.g. {what} {example}")
    problem = name_problem(out)
    if problem:
        raise VerlctlError(f"{what} {shown_name(out)}: {problem}")
    if out.is_symlink():
        if not force:
            raise VerlctlError(f"{what} {out}: is a symbolic link: nothing was written; pass --force to replace the "
                               "link itself (never what it points to)")
    elif out.is_dir():
        raise VerlctlError(f"{what} {out}: is a directory; give a file name, e.g. {what} {out / example}")
    elif out.exists():
        if not out.is_file():
            raise VerlctlError(f"{what} {out}: is not a regular file: never replaced; give another file name")
        if not force:
            raise VerlctlError(f"{what} {out}: exists: nothing was written; pass --force to replace it")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise VerlctlError(f"{what} {out}: the directory {parent} does not exist; create it or give another path")
    return out


def shown_name(path: str | Path) -> str:
    """A path for a message: a very long one is cut (its start and its end)."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}…{text[-40:]}"


#: How much of a file's name its temporary file's name takes.
TMP_NAME_CHARS = 64


def write_file(path: str | Path, data: bytes, mode: int) -> Path:
    """Replace ``path`` with ``data`` (mode ``mode`` from the start) without following a symlink there."""
    p = Path(path)
    # O_EXCL, mode 0600; the name's first characters only: a name near NAME_MAX (255) still has room for the
    # temporary one
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:TMP_NAME_CHARS]}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return p


def write_set(out_dir: str | Path, files: Mapping[str, tuple[bytes, int]], what: str = "-o",
              force: bool = False) -> list[Path]:
    """Write ``name -> (content, mode)`` into ``out_dir`` as one set (see the module docstring).

    Every failure (the path is a file, a directory cannot be created, a disk is full, a file of the set is
    there and ``force`` is not given) is a one-line :class:`VerlctlError` naming ``what`` (the option that
    gave the directory), with nothing half-written.
    """
    out = Path(out_dir)
    if str(out_dir) in ("", "."):
        raise VerlctlError(f"{what}: the path is empty; give a directory for the files, e.g. {what} ./plan")
    if out.exists() and not out.is_dir():
        raise VerlctlError(f"{what} {out}: exists and is not a directory; give a directory for the files")
    try:
        out.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise VerlctlError(f"{what} {out}: cannot create the directory: {exc.strerror or exc}") from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        _lock(dir_fd)
        there = [name for name in files if os.path.lexists(out / name)]
        if there and not force:
            raise VerlctlError(f"{what} {out}: {', '.join(there)} already there: nothing was written; pass --force "
                               "to replace them (no other file in the directory is touched)")
        try:
            tmp = Path(tempfile.mkdtemp(prefix=".verlctl-tmp-", dir=out))
        except OSError as exc:
            raise VerlctlError(f"{what} {out}: cannot write there: {exc.strerror or exc}") from None
        try:
            for name, (data, mode) in files.items():
                fd = os.open(tmp / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as fh:
                    os.fchmod(fh.fileno(), mode & ~umask)
                    fh.write(data)
            for name in files:
                os.replace(tmp / name, out / name)
        except OSError as exc:
            raise VerlctlError(f"{what} {out}: cannot write the files: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        os.close(dir_fd)  # releases the lock
    return [out / name for name in files]


def _lock(dir_fd: int) -> None:
    """An exclusive lock on the directory itself (no lock file that could be planted as a symlink)."""
    import fcntl

    with contextlib.suppress(OSError):  # a file system without flock: the set is still written whole
        fcntl.flock(dir_fd, fcntl.LOCK_EX)
