"""The probes ``verlctl check`` runs on this host, and the facts they give (what the checks read).

Each probe is bounded in time and only reads, except the write test of the checkpoint directory (a temp file,
created and removed). The same checkpoint probe runs inside a container (``CHECKPOINT_PROBE_SNIPPET``); the
Docker facts are gathered by the caller (``orchestrator.machine_facts``) into :class:`DockerFacts`.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import stat
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from verlctl.detect.common import CallTimeout, Unavailable, UnavailableCode, call_with_timeout, unavailable
from verlctl.detect.datasets import DatasetInfo, inspect_parquet
from verlctl.spec.model import RunSpec

DEFAULT_BUDGET_S = 20.0


FileProblem = Literal["ok", "missing", "not_file", "unreadable", "not_parquet"]


class FileProbe(BaseModel):
    """A host-side look at one dataset file: does it exist, can it be read, does it start like parquet."""

    path: str
    problem: FileProblem = "ok"
    detail: str | None = None
    size_bytes: int | None = None


class DatasetCheck(BaseModel):
    """One dataset file of the spec: the file probe and, when it could be read, its schema check."""

    field: str  # paths.train_files / paths.val_files
    path: str
    file: FileProbe | Unavailable
    verl_schema: DatasetInfo | Unavailable | None = None  # None: not attempted (the file itself failed)


class CheckpointProbe(BaseModel):
    """The checkpoint directory (or its nearest existing parent): writable for real, and free space."""

    path: str
    checked_path: str
    exists: bool  # the checkpoint directory itself exists
    is_dir: bool = True
    writable: bool = False
    error: str | None = None
    free_bytes: int | None = None
    total_bytes: int | None = None
    checked_in: str = "host"  # "host" or "container <name>"


class DockerFacts(BaseModel):
    """The engine, the spec's image and the spec's container, as the Docker engine reports them."""

    image: str
    container: str
    engine_version: str | None = None
    error: str | None = None  # why the engine could not be asked (None: it answered every question)
    image_present: bool | None = None
    exists: bool = False
    state: str | None = None
    container_image: str | None = None
    image_note: str | None = None  # the container runs another image than the spec's
    missing_mounts: list[tuple[str, str]] = []  # (spec field, path) the existing container does not mount
    foreign: str | None = None  # the existing container, under the default name, is not this user's: whose
    pull: bool = False  # launch --pull: a missing image is pulled

    @property
    def running(self) -> bool:
        return self.exists and self.state == "running"


class ImageVersions(BaseModel):
    """The Python and Ray that ``python3`` finds where training runs (the spec's container, or this host)."""

    where: str  # "container NAME" or "this host"
    python: str | None = None  # "3.10.12"
    ray: str | None = None  # None: no ray distribution
    # The rest of the stack as installed there (the known-defect gate matches these, never an image tag):
    # verl, vllm, vllm_ascend, torch, torch_npu, sglang, transfer_queue (distribution versions; TransferQueue
    # provides the transfer_queue module verl 0.9.1's V1 trainer imports) and cann (the toolkit's
    # ascend_toolkit_install.info). None: not installed / not found.
    stack: dict[str, str | None] = Field(default_factory=dict)


class TargetLookup(BaseModel):
    """What the in-target look-up found (``orchestrator/preflight.py``'s script, run where training runs: the spec's
    running container, a throw-away container of its image, or this host's python3). The same look-up runs in
    ``check``, ``launch --dry-run`` and ``launch``; the verdict's rule ``target_preflight`` reads it."""

    where: str  # "container NAME", "image IMAGE (a throw-away container)", "this host's python3"
    ok: bool = False
    finished: bool = True  # False: the time bound ended it (``message`` says where it was)
    skipped: bool = False  # hydra is not importable there: nothing was composed
    kind: str = ""  # why it failed: "package" (a needed module is missing), "source" (the recipe file), "failed"
    message: str = ""
    override: str | None = None  # the override Hydra's message names
    validation: str = ""  # verl's validate_config: "ok: ..." or "skipped: <why>"
    hint: str | None = None  # the fix, where the script knows it (a missing package)
    field: str | None = None  # the spec field it is about
    versions: ImageVersions | None = None  # Python, Ray and the stack, read by the same script
    payload_sha: str = ""  # what was looked up (launch does not look again for the same command and target)
    seconds: float | None = None  # how long it took


#: Prints {"python": "3.10.12", "ray": "2.49.0" or null, "stack": {...}} with the interpreter run_training.sh
#: uses: distribution metadata only (nothing is imported; a transfer_queue module without metadata, e.g. from a
#: source tree on PYTHONPATH, is located with find_spec, which does not run it), and the CANN toolkit's install
#: record.
VERSIONS_SNIPPET = (
    "import glob, json, os, sys\n"
    "def v(name):\n"
    "    try:\n        import importlib.metadata as m\n        return m.version(name)\n"
    "    except Exception:\n        return None\n"
    "def cann():\n"
    "    home = os.environ.get('ASCEND_TOOLKIT_HOME') or '/usr/local/Ascend/ascend-toolkit/latest'\n"
    "    for p in sorted(glob.glob(os.path.join(home, '*', 'ascend_toolkit_install.info'))):\n"
    "        try:\n            lines = open(p, encoding='utf-8', errors='replace').read().splitlines()\n"
    "        except OSError:\n            continue\n"
    "        for line in lines:\n"
    "            if line.startswith('version='):\n                return line.split('=', 1)[1].strip()\n"
    "    return None\n"
    "stack = {k: v(d) for k, d in (('verl', 'verl'), ('vllm', 'vllm'), ('vllm_ascend', 'vllm_ascend'), "
    "('torch', 'torch'), ('torch_npu', 'torch_npu'), ('sglang', 'sglang'), ('transfer_queue', 'TransferQueue'))}\n"
    "stack['vllm_ascend'] = stack['vllm_ascend'] or v('vllm-ascend')\n"
    "def located(module):\n"
    "    try:\n        import importlib.util as u\n        return u.find_spec(module) is not None\n"
    "    except Exception:\n        return False\n"
    "if not stack['transfer_queue'] and located('transfer_queue'):\n"
    "    stack['transfer_queue'] = 'found (no distribution metadata)'\n"
    "stack['cann'] = cann()\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'ray': v('ray'), 'stack': stack}))\n"
)


def parse_versions(text: str, where: str) -> ImageVersions | None:
    import json

    try:
        doc = json.loads(text.strip().splitlines()[-1])
        stack = doc.get("stack") if isinstance(doc.get("stack"), dict) else {}
        return ImageVersions(where=where, python=doc.get("python"), ray=doc.get("ray"),
                             stack={str(k): (str(x) if x else None) for k, x in stack.items()})
    except (ValueError, IndexError, AttributeError):
        return None


CHECKPOINT_PROBE_SNIPPET = r"""
import json, os, sys, tempfile

def probe(path):
    target = os.path.abspath(path)
    cur = target
    while not os.path.lexists(cur):
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    out = {"path": path, "checked_path": cur, "exists": cur == target, "is_dir": os.path.isdir(cur)}
    if not out["is_dir"]:
        out["writable"] = False
        out["error"] = "not a directory"
        return out
    try:
        fd, tmp = tempfile.mkstemp(prefix=".verlctl-write-check-", dir=cur)
    except OSError as e:
        out["writable"] = False
        out["error"] = e.strerror or str(e)
    else:
        os.close(fd)
        os.unlink(tmp)
        out["writable"] = True
    try:
        st = os.statvfs(cur)
        out["free_bytes"] = st.f_bavail * st.f_frsize
        out["total_bytes"] = st.f_blocks * st.f_frsize
    except OSError as e:
        out["error"] = out.get("error") or ("statvfs: %s" % (e.strerror or e))
    return out

if __name__ == "__main__":
    print(json.dumps(probe(sys.argv[1])))
"""


_CHECKPOINT_NS: dict[str, Any] | None = None


def probe_checkpoint_dir(path: str, timeout: float = DEFAULT_BUDGET_S) -> CheckpointProbe | Unavailable:
    """Really try to write in ``path`` (or its nearest existing parent) and measure its free space, here."""
    global _CHECKPOINT_NS
    if _CHECKPOINT_NS is None:
        ns: dict[str, Any] = {"__name__": "verlctl_checkpoint_probe"}
        exec(compile(CHECKPOINT_PROBE_SNIPPET, "<verlctl checkpoint probe>", "exec"), ns)
        _CHECKPOINT_NS = ns
    fn = _CHECKPOINT_NS["probe"]
    try:
        record = call_with_timeout(lambda: fn(path), timeout, "verlctl-checkpoint")
    except CallTimeout:
        return unavailable("checkpoints", UnavailableCode.TIMEOUT, f"{path} did not answer within {timeout:g} s")
    except OSError as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, f"{path}: {exc.strerror or exc}")
    return CheckpointProbe.model_validate(record)


def parse_checkpoint_probe(text: str, where: str) -> CheckpointProbe | Unavailable:
    import json

    try:
        record = json.loads(text.strip().splitlines()[-1])
        probe = CheckpointProbe.model_validate(record)
    except (ValueError, IndexError) as exc:
        return unavailable("checkpoints", UnavailableCode.FAILED, f"the probe in {where} printed no result: {exc}")
    probe.checked_in = where
    return probe


_PARQUET_MAGIC = b"PAR1"


def probe_file(path: str) -> FileProbe:
    """Exists, is a regular file, can be read, starts with the parquet magic (never opens a FIFO)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return FileProbe(path=path, problem="missing")
    except OSError as exc:
        return FileProbe(path=path, problem="unreadable", detail=exc.strerror or str(exc))
    if stat.S_ISDIR(st.st_mode):
        return FileProbe(path=path, problem="not_file", detail="a directory")
    if not stat.S_ISREG(st.st_mode):
        return FileProbe(path=path, problem="not_file", detail="not a regular file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_PARQUET_MAGIC))
    except OSError as exc:
        return FileProbe(path=path, problem="unreadable", detail=exc.strerror or str(exc))
    if head != _PARQUET_MAGIC:
        return FileProbe(path=path, problem="not_parquet", detail=f"starts with {head!r}, not {_PARQUET_MAGIC!r}")
    return FileProbe(path=path, size_bytes=st.st_size)


def check_dataset_file(field: str, path: str, timeout: float) -> DatasetCheck:
    """The file probe, then the schema check with this host's pyarrow (each bounded)."""
    check = DatasetCheck(field=field, path=path, file=_bounded(lambda: probe_file(path), timeout, "datasets", path))
    if isinstance(check.file, FileProbe) and check.file.problem == "ok":
        check.verl_schema = _bounded(lambda: inspect_parquet(path), timeout, "datasets", path)
    return check


def _bounded(fn: Callable[[], Any], timeout: float, probe: str, what: str) -> Any:
    try:
        return call_with_timeout(fn, timeout, f"verlctl-{probe}")
    except CallTimeout:
        return unavailable(probe, UnavailableCode.TIMEOUT, f"{what} did not answer within {timeout:g} s")
    except Exception as exc:  # an OS error on a broken mount: a result, never a traceback
        return unavailable(probe, UnavailableCode.ERROR, f"{what}: {type(exc).__name__}: {exc}")


def dataset_paths(spec: RunSpec) -> list[tuple[str, str]]:
    p = spec.paths
    return [("paths.train_files", f) for f in p.train_files or []] + [("paths.val_files", f) for f in p.val_files or []]


def literal_ipv4(addr: str | None) -> list[str]:
    if not addr:
        return []
    try:
        return [str(ipaddress.IPv4Address(addr))]
    except ValueError:
        return []


def resolve_ipv4(addr: str | None, timeout: float) -> list[str]:
    if not addr:
        return []
    literal = literal_ipv4(addr)
    if literal:
        return literal

    def lookup() -> list[str]:
        infos = socket.getaddrinfo(addr, None, socket.AF_INET, socket.SOCK_STREAM)
        return sorted({str(i[4][0]) for i in infos})

    result = _bounded(lookup, timeout, "network", f"resolving {addr}")
    return result if isinstance(result, list) else []
