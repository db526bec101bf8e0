"""Where the CPU time goes while a command runs, by kind of process: every process of the machine that ends
meanwhile (accounting is machine-wide: run it on a machine doing nothing else), short ones too.

A benchmark tool, not a test. Runs COMMAND with the kernel's BSD process accounting on (``acct(2)``: one
record per ended process, its CPU time, pid and parent; needs root and ``CONFIG_BSD_PROCESS_ACCT``) and a sampler
that notes each new process's command line every 0.25 s (accounting keeps only a 16-byte name). Processes in
containers are accounted too (the record goes to every PID namespace up to the one that turned accounting on).
At the end it prints CPU-seconds by kind:

* ``real verl``: a process of verl's own venv (``/opt/verl-venv``, the demo's environment), verl's entry points,
  Ray's actors (``ray::…``) and vLLM's processes;
* ``verlctl CLI``: ``python -m verlctl …`` processes (and how many);
* ``pytest workers``: xdist's worker processes themselves (the in-process tests);
* ``containers``: other processes under a ``containerd-shim`` (the stand-in test containers, ``runc``);
* ``other``.

A process whose command line the sampler missed (it lived under 0.25 s) is classified by its ancestors, so the
split is approximate by a few percent. Only processes that *ended* are counted: a daemon that outlives the
command (dockerd) is not.

    sudo python3 bench/cpu_by_process.py [--top N] [--keep DIR] -- COMMAND [ARGS...]

e.g. ``python3 bench/cpu_by_process.py -- bash .ci/run`` in a fresh clone.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

#: struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
#: utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16]. 64 bytes.
ACCT_V3 = struct.Struct("<ccHIIIIIIf8H16s")
AHZ = 100  # comp_t times are in 1/AHZ s

REAL_VERL = re.compile(r"/opt/verl-venv|/demo/env-|verl\.trainer\.|verl\.model_merger|recipe\.\w+\.main_")


def comp_t(v: int) -> int:
    """A comp_t (13-bit mantissa, 3-bit base-8 exponent) as an int."""
    return (v & 0x1FFF) << (3 * (v >> 13))


def read_acct(path: Path) -> list[tuple[int, int, float, str]]:
    """(pid, ppid, CPU seconds, name) of every record."""
    data = path.read_bytes()
    out = []
    for off in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        f = ACCT_V3.unpack_from(data, off)
        if f[1] != b"\x03":
            continue
        cpu = (comp_t(f[10]) + comp_t(f[11])) / AHZ
        out.append((f[6], f[7], cpu, f[18].split(b"\0")[0].decode(errors="replace")))
    return out


class Sampler(threading.Thread):
    """Notes each new process's command line and parent, every 0.25 s."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.cmd: dict[int, str] = {}
        self.parent: dict[int, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) in self.cmd:
                    continue
                try:
                    cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    ppid = int(Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                # one line each: a `python -c` script's newlines would split the report's lines
                self.cmd[int(name)], self.parent[int(name)] = " ".join(cmd.split())[:300], ppid
            self.stop.wait(0.25)


def kind(pid: int, name: str, s: Sampler) -> str:
    cmd = s.cmd.get(pid, "")
    if REAL_VERL.search(cmd) or name.startswith(("ray::", "VLLM")):
        return "real verl"
    if re.match(r"\S*python\S*\s+(-\S+\s+)*-m verlctl\b", cmd):
        return "verlctl CLI"
    if "exec(eval(sys.stdin.readline()))" in cmd:  # an xdist worker (execnet's bootstrap)
        return "pytest workers"
    seen, p = set(), s.parent.get(pid, 0)
    while p and p not in seen and len(seen) < 64:
        seen.add(p)
        up = s.cmd.get(p, "")
        if REAL_VERL.search(up):
            return "real verl"
        if "containerd-shim" in up:
            return "containers"
        p = s.parent.get(p, 0)
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=8, help="command lines shown per kind")
    ap.add_argument("--keep", type=Path, help="keep the accounting file here")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("give the command to measure after --")
    libc = ctypes.CDLL(None, use_errno=True)
    acct_dir = Path(tempfile.mkdtemp(prefix="verlctl-acct-"))
    acct_file = acct_dir / "pacct"
    acct_file.touch(mode=0o600)
    if libc.acct(str(acct_file).encode()) != 0:
        print(f"error: acct(2) failed: {os.strerror(ctypes.get_errno())} (needs root and BSD process accounting)",
              file=sys.stderr)
        return 2
    # accounting is machine-wide: turned off however this ends (Ctrl-C raises KeyboardInterrupt; SIGTERM too)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    sampler = Sampler()
    sampler.start()
    t0 = time.monotonic()
    try:
        rc = subprocess.call(command)
    finally:
        libc.acct(None)
        sampler.stop.set()
        sampler.join()
    wall = time.monotonic() - t0
    records = read_acct(acct_file)
    for pid, ppid, _, _ in records:
        sampler.parent.setdefault(pid, ppid)
    cpu: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    lines: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for pid, _, seconds, name in records:
        k = kind(pid, name, sampler)
        cpu[k] += seconds
        count[k] += 1
        lines[k][re.sub(r"\d{3,}", "N", sampler.cmd.get(pid, f"[{name}]"))[:110]] += seconds
    total = sum(cpu.values()) or 1.0
    print(f"\n{' '.join(' '.join(command).split())}: exit {rc}, {wall:.0f} s wall, {len(records)} processes ended, "
          f"{total:.0f} CPU-s")
    for k, v in cpu.most_common():
        print(f"{v:9.0f} CPU-s {100 * v / total:5.1f} %  {count[k]:6d} processes  {k}")
        for line, sec in lines[k].most_common(args.top):
            print(f"{'':14}{sec:8.1f}  {line}")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
        shutil.move(acct_file, args.keep / "pacct")
    else:
        acct_file.unlink()
    acct_dir.rmdir()
    return rc


if __name__ == "__main__":
    sys.exit(main())
