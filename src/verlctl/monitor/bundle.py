"""A diagnostic bundle for a run: what a verl maintainer asks for in a bug report, with nothing private in it.

``verlctl bundle RUN -o FILE.tar.gz`` collects, from the run record and the run's target (container or host):
the resolved spec (written without secrets at launch), both scripts, versions (verlctl, Python, verl, vLLM /
vllm-ascend, torch / torch_npu, transformers, Ray, CANN, the driver), the log tail and its diagnosis,
``npu-smi`` / ``nvidia-smi`` and ``ray status`` snapshots, the run's events and the image digest.

Every text goes through one :class:`Scrubber` before it is archived: secrets (:mod:`verlctl.monitor.redact`:
detect-secrets' detectors plus the run's own keys from the environment), the host names the user marks private, and home
directories (the user's own and ``/home/<name>``). Each piece is capped, and every probe has a timeout: a dead
target gives "unavailable: <why>" in the manifest, never a hang.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verlctl.monitor.redact import KINDS, Redactor

#: Caps: the log tail and any other single piece.
LOG_TAIL_BYTES = 2 * 1024 * 1024
PIECE_BYTES = 1024 * 1024
PROBE_TIMEOUT_S = 20

_HOME = re.compile(r"/home/(?P<user>[^/\s\"':]+)")

#: What the versions probe prints: one ``name=version`` line each (run with the target's python3).
VERSIONS_PY = r"""
import importlib.metadata as m, platform, sys
print("python=" + platform.python_version())
for d in ("verl", "vllm", "vllm-ascend", "vllm_ascend", "sglang", "torch", "torch_npu", "transformers", "ray",
          "megatron-core", "mindspeed", "swanlab"):
    try:
        print(d + "=" + m.version(d))
    except Exception:
        pass
"""

SHELL_PROBES: dict[str, list[str]] = {
    "versions-cann.txt": [
        "sh", "-c",
        "for f in /usr/local/Ascend/ascend-toolkit/latest/version.cfg "
        "/usr/local/Ascend/ascend-toolkit/latest/*/ascend_toolkit_install.info "
        "/usr/local/Ascend/driver/version.info; do [ -r \"$f\" ] && { echo \"== $f\"; head -c 4096 \"$f\"; }; done; true",
    ],
    "npu-smi.txt": ["npu-smi", "info"],
    "nvidia-smi.txt": ["nvidia-smi"],
    "ray-status.txt": ["ray", "status"],
}


@dataclass
class Scrubber:
    """Removes secrets (the one :class:`~verlctl.monitor.redact.Redactor`), private host names and home
    directories from text."""

    redact: Redactor = field(default_factory=Redactor)
    private_hosts: list[str] = field(default_factory=list)
    home: str | None = None
    #: what each private host is ("given with --private", "this host's name", ...), by name
    kinds: dict[str, str] = field(default_factory=dict)
    #: the placeholders that replaced something, and what they stand for (filled as text is scrubbed)
    replaced: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, private_hosts: Iterable[str] = (), environ: dict[str, str] | None = None,
                 own: dict[str, str] | None = None) -> Scrubber:
        """``own``: host names and addresses to replace too, with what each is (:func:`own_hosts`)."""
        env = os.environ if environ is None else environ
        home = env.get("HOME")
        kinds = {**(own or {}), **{h: "given with --private" for h in private_hosts if h}}
        return cls(
            redact=Redactor.from_env(env),
            private_hosts=sorted(kinds, key=len, reverse=True),
            home=home if home and home not in ("/", "") else None,
            kinds=kinds,
        )

    def __call__(self, text: str) -> str:
        text = self.redact(text)
        for i, h in enumerate(self.private_hosts, 1):
            text, n = re.subn(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", f"<private-host-{i}>", text)
            if n:
                self.replaced[f"<private-host-{i}>"] = self.kinds.get(h, "given with --private")
        if self.home:
            text = re.sub(rf"{re.escape(self.home.rstrip('/'))}(?=/|\b)", "~", text)
        return _HOME.sub("/home/<user>", text)


_LOG_NODE_NAMES = (re.compile(r"\] node (\S+): "), re.compile(r"Local node IP: (\S+)"),
                   re.compile(r"Ray head at ([0-9.]+):\d+"), re.compile(r"--address='?([0-9.]+):\d+"))


def own_hosts(record: Any, texts: Iterable[str] = ()) -> dict[str, str]:
    """This machine's and the run's own host names and addresses (name -> what it is), replaced in a bundle
    by default: the host name, its non-loopback addresses, the run's nodes, and the node names and addresses
    the run's log prints (start_verl.sh's "node NAME", Ray's "Local node IP")."""
    import socket

    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        name = socket.gethostname()
        out[name] = "this host's name"
        fqdn = socket.getfqdn()
        if fqdn and fqdn != name and fqdn not in ("localhost", "localhost.localdomain"):
            out[fqdn] = "this host's name"
    with contextlib.suppress(Exception):
        import psutil

        for addrs in psutil.net_if_addrs().values():
            for a in addrs:
                if a.family == socket.AF_INET and not a.address.startswith("127."):
                    out.setdefault(a.address, "an address of this host")
    for addr in [getattr(record, "head_address", None), *(w.address for w in getattr(record, "workers", []))]:
        if addr:
            out.setdefault(addr, "a node of the run")
    for text in texts:
        for rx in _LOG_NODE_NAMES:
            for m in rx.finditer(text):
                value = m.group(1).strip("'\"")
                if value and value not in ("localhost", "127.0.0.1"):
                    out.setdefault(value, "a node name or address in the run's log")
    return {k: v for k, v in out.items() if len(k) >= 2}


@dataclass
class Bundle:
    files: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, text: str | None, why: str = "") -> None:
        if text is None:
            self.unavailable[name] = why or "unavailable"
            return
        data = text.encode("utf-8", errors="replace")
        if len(data) > PIECE_BYTES and name != "log-tail.txt":
            text = data[-PIECE_BYTES:].decode("utf-8", errors="replace") + "\n… (cut to the last 1 MiB)"
        self.files[name] = text


def _read_record_file(record: Any, name: str, cap: int = PIECE_BYTES) -> str | None:
    """A plain file of the run's own directory (never through a symlink, never a FIFO), or None."""
    try:
        return record.read_file(name, cap).decode("utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _probe(ex: Any, argv: list[str]) -> tuple[str | None, str]:
    try:
        r = ex.run(argv, timeout=PROBE_TIMEOUT_S)
    except Exception as exc:  # a target that went away mid-collection
        return None, f"{argv[0]}: {exc}"
    text = (r.out or "") + (("\n" + r.err) if r.err else "")
    if r.code == 127:
        return None, f"{argv[0]}: not found in the run's target"
    return f"$ {' '.join(argv[:2])}  (exit {r.code})\n{text}", ""


def collect(record: Any, ex: Any, container: dict[str, Any], image_digest: str | None,
            host_log: bytes | None = None, event_findings: Iterable[dict[str, Any]] = ()) -> Bundle:
    """Everything the bundle holds, unscrubbed (see :func:`write`). ``host_log``: the run's log read as a host
    file (``paths.logs``): its tail and diagnosis are in the bundle also when the target is gone;
    ``event_findings``: what the run's events say went wrong (a launch that failed before training), the
    diagnosis when the log has no error."""
    import platform

    from verlctl import __version__
    from verlctl.monitor.diagnose import diagnose_bytes

    b = Bundle()
    b.add("spec.resolved.yaml", _read_record_file(record, record.spec_file), "the run record has no resolved spec")
    for name in ("start_verl.sh", "run_training.sh"):
        b.add(f"scripts/{name}", _read_record_file(record, name), "not in the run record")
    b.add("events.jsonl", _read_record_file(record, "events.jsonl"), "no events recorded")
    b.add("run.json", _read_record_file(record, "run.json"), "no run record file")
    local = [f"verlctl={__version__}", f"python={platform.python_version()}", f"host={platform.platform()}"]
    b.add("versions-verlctl.txt", "\n".join(local) + "\n")
    target = {**container, "image_digest": image_digest or "unknown"}
    b.add("target.json", json.dumps(target, indent=2, default=str) + "\n")
    from_events = list(event_findings)

    def diagnosis(findings: list[dict[str, Any]], progress: Any, start: int | None, source: str) -> None:
        """``start``: the byte of the target's log the tail begins at (None: a host file's tail)."""
        b.add("diagnosis.json", json.dumps({"findings": findings or from_events, "progress": progress,
                                            "tail_from_byte": start, "log": source,
                                            "from": "log" if findings or not from_events else "events"},
                                           indent=2) + "\n")

    if ex is None:
        why = f"the run's target is {container.get('state', 'unreachable')}"
        for name in ("versions-target.txt", *SHELL_PROBES):
            b.add(name, None, why)
    else:
        out, why = _probe(ex, ["python3", "-c", VERSIONS_PY])
        b.add("versions-target.txt", out, why)
        for name, argv in SHELL_PROBES.items():
            out, why = _probe(ex, argv)
            b.add(name, out, why)
    if host_log is not None:  # a host file: read the same whether the target is there or not
        start, data, source = None, host_log[-LOG_TAIL_BYTES:], "host"
    else:
        size = ex.file_size(record.run_log) if ex is not None else None
        if size is None:
            b.add("log-tail.txt", None, f"no log at {record.run_log}" if ex is not None else why)
            if from_events:
                diagnosis([], None, None, "none")
            else:
                b.add("diagnosis.json", None, "no log" if ex is not None else why)
            return b
        start = max(0, size - LOG_TAIL_BYTES)  # (int | None: a host file's tail has no offset here)
        got, why = ex.read_log(record.run_log, offset=start, max_bytes=LOG_TAIL_BYTES)
        if got is None:  # a FIFO or a link at the log's name: said in the manifest, nothing read
            b.add("log-tail.txt", None, why)
            if from_events:
                diagnosis([], None, None, "none")
            else:
                b.add("diagnosis.json", None, why)
            return b
        data, source = got, "target"
    b.add("log-tail.txt", data.decode("utf-8", errors="replace"))
    diag = diagnose_bytes(data)
    diagnosis([f.to_dict() for f in diag.findings], diag.progress, start, source)
    return b


def write(bundle: Bundle, scrub: Scrubber, out: Path, root: str) -> int:
    """Write the scrubbed bundle as a gzip tarball via a temporary file and a rename; returns its size."""
    from verlctl.files import write_file

    manifest = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "files": sorted(bundle.files),
        "unavailable": {name: scrub(why) for name, why in bundle.unavailable.items()},
        "redacted": ["secrets (secrets_removed: which kinds, how many)",
                     "host names and addresses (replaced_hosts: which kinds)", "home directories"],
    }
    scrubbed = {name: scrub(text) for name, text in bundle.files.items()}
    manifest["secrets_removed"] = scrub.redact.manifest()
    manifest["secrets_looked_for"] = dict(KINDS)
    manifest["replaced_hosts"] = dict(sorted(scrub.replaced.items(), key=lambda kv: int(kv[0].split("-")[-1][:-1])))
    # (the manifest's own texts are verlctl's: the reasons are scrubbed above, the kinds are constant words)
    pieces = {**scrubbed, "manifest.json": json.dumps(manifest, indent=2) + "\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        now = int(time.time())
        for name, text in sorted(pieces.items()):
            data = text.encode("utf-8")
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = len(data), now, 0o644
            tar.addfile(info, io.BytesIO(data))
    write_file(out, buf.getvalue(), 0o644)
    return out.stat().st_size
