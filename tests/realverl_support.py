"""Real verl 0.9.1 on CPU, driven through verlctl's real commands: the image, the spec, the run lock.

* ``realverl_image`` (session fixture): the tag of ``verlctl-realverl:<content hash>``, built by
  ``tests/image/build_realverl.sh`` when missing (a no-op of about a second when present; flock-serialised
  machine-wide). The moving alias ``verlctl-realverl:0.9.1`` points at the same image.
* ``realverl_env`` (function fixture): a :class:`RealVerlEnv`, i.e. a :class:`launch_support.LaunchEnv` whose
  spec is a user's spec for a 1-GPU host (``device: gpu``, ``strategy: fsdp2``, ``--disable flash_attn``,
  the CPU settings of shared/reference/realverl.md as ``env:``/``extra_overrides:``, ``cluster.ray_start_args:
  [--num-cpus=16]``, and the memory settings that keep a run under issue #20's 8 GiB, MEMORY_OVERRIDES /
  MEMORY_RAY_ARGS, measured with bench/realverl_budget.py), the tiny model/tokenizer/parquet copied out of the image into the test's folder, and a
  running container the user started themselves (``docker run`` with the spec's paths mounted, as on a GPU
  host where the container was made with ``--gpus``; here the GPU is the TEST DOUBLE of
  tests/realverl/verl_cpu_device_double.py and tests/image/nvidia-smi, so the container gets no device
  request). verlctl reuses that container by name. It holds a docker test slot.
* ``peak_memory_sampler(container)``: the container's peak memory while the block runs (docker stats' working
  set, ``usage - inactive_file``, sampled every 2 s, and the kernel's high-water mark), as
  bench/realverl_budget.py measures it; the real-verl tests print it beside their wall time.
* ``run_lock()``: a machine-wide flock (``/tmp/verlctl-realverl-run.lock``) held around each real training
  run, so that real runs of different sessions never overlap (one peaks at 6-13 GB of RAM).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from docker_support import REPO_ROOT, in_ci, ps_in
from launch_support import LaunchEnv, free_port

BUILD_SCRIPT = REPO_ROOT / "tests" / "image" / "build_realverl.sh"
BUILD_SCRIPT_070 = REPO_ROOT / "tests" / "image" / "build_realverl070.sh"
RUN_LOCK = Path(os.environ.get("VERLCTL_REALVERL_RUN_LOCK", "/tmp/verlctl-realverl-run.lock"))
RUN_LOCK_WAIT_S = 3600.0
TINY_IN_IMAGE = "/opt/verlctl-realverl/tiny"

#: verl's env for the CPU double (realverl.md): verl's plugin hook, the platform, verl's engine-registry override.
DOUBLE_ENV = {
    "VERL_USE_EXTERNAL_MODULES": "verl_cpu_device_double",
    "VERL_PLATFORM": "cpu",
    "VERL_ENGINE_DEVICE": "cuda",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
}
#: What CPU needs on top of verlctl's command (realverl.md: shown necessary, or kept for memory).
CPU_OVERRIDES = [
    "+actor_rollout_ref.rollout.enable_sleep_mode=False",
    "actor_rollout_ref.rollout.agent.num_workers=1",
    "reward.num_workers=1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
    # vLLM on CPU otherwise compiles the model with torch inductor (a C++ build) in every start: minutes here
    "actor_rollout_ref.rollout.enforce_eager=True",
    # realverl.md's v3 set it and ran (its v6 ran without it). The empty (size 0) parameters once blamed on
    # freeing the cache were vllm-cpu's oneDNN weight packing on AVX-512 CPUs (fixed in the double, issue #20);
    # kept as the setting these tests were measured with
    "actor_rollout_ref.rollout.free_cache_engine=False",
    # realverl.md's direct runs used a 64 MB weight-sync bucket (verl's default 2048 MB is a 2 GiB shared segment)
    "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=64",
    # verl's FSDP engine compiles entropy_from_logits with torch.compile (engine/fsdp/transformer_impl.py): on
    # CPU that is torch inductor building C++ kernels with g++ in every new container, actor and ref each
    "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
    "actor_rollout_ref.ref.fsdp_config.use_torch_compile=False",
]
#: What a CPU user's spec says to keep the run's memory down (issue #20's budget: peak <= 8 GiB; each measured
#: with bench/realverl_budget.py, docs/development/benchmarks.md). Not a key the double changes.
MEMORY_OVERRIDES = [
    # vLLM's CPU KV cache: 64 MiB (the tiny model's 512 B/token: 131k tokens) instead of the 1 GiB that
    # VLLM_CPU_KVCACHE_SPACE allows at least (an int in GiB; when set it overrides kv_cache_memory_bytes,
    # vllm/platforms/cpu.py); the cache is zero-filled, so all of it is resident
    "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_memory_bytes=67108864",
    # verl's default 8 DataLoader workers, each a fork of the TaskRunner (~85 MiB each); one keeps the worker
    # (and its end-of-run "killed by signal" teardown) that verlctl's watcher must read
    "data.dataloader_num_workers=1",
]
#: Ray's dashboard head and its metrics process (~150 MiB): verlctl and verl do not use it.
MEMORY_RAY_ARGS = ["--include-dashboard=false"]
#: The settings these tests ran with before MEMORY_OVERRIDES (bench/realverl_budget.py --profile before).
BEFORE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1"}


@contextlib.contextmanager
def run_lock() -> Iterator[float]:
    """Hold the machine-wide real-verl run lock; yields the seconds spent waiting for it."""
    RUN_LOCK.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(RUN_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    t0 = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - t0 > RUN_LOCK_WAIT_S:
                    pytest.fail(f"{RUN_LOCK} held by another real-verl run for over {RUN_LOCK_WAIT_S:.0f} s")
                time.sleep(2)
        yield time.monotonic() - t0
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


class PeakMemory:
    """The peak of one container's memory cgroup (cgroup v1 or v2), sampled in a thread."""

    def __init__(self, container_id: str) -> None:
        cands = [Path(f"/sys/fs/cgroup/memory/docker/{container_id}"),
                 Path(f"/sys/fs/cgroup/memory/system.slice/docker-{container_id}.scope"),
                 Path(f"/sys/fs/cgroup/system.slice/docker-{container_id}.scope"),
                 Path(f"/sys/fs/cgroup/docker/{container_id}")]
        self.path = next((p for p in cands if p.is_dir()), None)
        self.v1 = self.path is not None and (self.path / "memory.usage_in_bytes").exists()
        self.peak = 0
        self._stop = threading.Event()

    def _read(self, name: str) -> int:
        assert self.path is not None
        return int((self.path / name).read_text())

    def used(self) -> int:
        """``docker stats``' number: usage minus the inactive page cache."""
        assert self.path is not None
        stat = dict(ln.split(" ", 1) for ln in (self.path / "memory.stat").read_text().splitlines() if " " in ln)
        usage = self._read("memory.usage_in_bytes" if self.v1 else "memory.current")
        return usage - int(stat.get("total_inactive_file" if self.v1 else "inactive_file", 0))

    def high_water(self) -> int | None:
        with contextlib.suppress(OSError, ValueError, AssertionError):
            return self._read("memory.max_usage_in_bytes" if self.v1 else "memory.peak")
        return None

    def run(self) -> None:
        while not self._stop.wait(2.0):
            with contextlib.suppress(OSError, ValueError):
                self.peak = max(self.peak, self.used())

    @property
    def gib(self) -> float:
        return self.peak / 2**30

    @property
    def high_water_gib(self) -> float:
        hw = self.high_water()
        return (hw or 0) / 2**30


@contextlib.contextmanager
def peak_memory_sampler(container: Any) -> Iterator[PeakMemory]:
    """Sample ``container``'s memory while the block runs; ``.gib`` is the peak working set (0 when this host
    does not expose the container's cgroup)."""
    pm = PeakMemory(container.id)
    thread = threading.Thread(target=pm.run, daemon=True) if pm.path is not None else None
    if thread is not None:
        thread.start()
    try:
        yield pm
    finally:
        pm._stop.set()
        if thread is not None:
            thread.join(timeout=10)


def build_realverl_image(script: Path = BUILD_SCRIPT) -> str:
    """The final tag that ``script`` (a content-hashed image build) prints after building what is missing."""
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=5400)
    if proc.returncode != 0:
        msg = f"tests/image/{script.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def realverl_image(docker_engine: Any) -> str:
    return build_realverl_image()


@pytest.fixture(scope="session")
def realverl070_image(docker_engine: Any) -> str:
    """The real verl 0.7.0 image (tests/image/build_realverl070.sh)."""
    return build_realverl_image(BUILD_SCRIPT_070)


def copy_tiny_out(client: Any, image: str, dest: Path) -> None:
    """Copy the tiny model/tokenizer/parquet that the image build generated to ``dest`` on the host."""
    import io
    import tarfile

    c = client.containers.create(image, ["true"], labels={"verlctl-test": "1"})
    try:
        stream, _ = c.get_archive(TINY_IN_IMAGE)
        buf = io.BytesIO(b"".join(stream))
    finally:
        c.remove(force=True)
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=buf) as tar:
        tar.extractall(dest, filter="data")


@dataclass
class RealVerlEnv(LaunchEnv):
    container: Any = None

    @property
    def ckpt(self) -> Path:
        return Path(self.spec["paths"]["checkpoints"])

    @property
    def train_log(self) -> Path:
        s = self.spec  # verlctl's log name: <algorithm>_<model dir name>_<strategy>.log
        return Path(s["paths"]["logs"]) / f"{s['algorithm']}_{Path(s['paths']['model']).name}_{s['strategy']}.log"

    def ps(self) -> str:
        return ps_in(self.container, "pid,pgid,args")


#: Where the real-verl containers keep torch inductor's and vLLM's compile caches on this host, one folder per
#: image: every verl start compiles the same few C++ kernels (vLLM's CPU worker, with the same hashes in every
#: container), ~20-40 CPU-s of g++ a start; shared, only a machine's first start pays it. The caches are torch's
#: and vLLM's own (keyed by the code and the compiler, written atomically under their own locks); verlctl never
#: sees them.
COMPILE_CACHE = Path(os.environ.get("VERLCTL_REALVERL_COMPILE_CACHE", "/var/cache/verlctl-realverl-compile"))


def compile_cache_volumes(client: Any, image: str) -> dict[str, dict[str, str]]:
    """Bind mounts of this image's compile caches (made on first use) for a real-verl container run as root."""
    folder = COMPILE_CACHE / client.images.get(image).id.split(":")[-1][:16]
    mounts = {"inductor": "/tmp/torchinductor_root", "vllm": "/root/.cache/vllm"}
    for sub in mounts:
        (folder / sub).mkdir(parents=True, exist_ok=True)
    return {str(folder / sub): {"bind": target, "mode": "rw"} for sub, target in mounts.items()}


def make_realverl_env(tmp_path: Path, client: Any, image: str, *, steps: int = 2, lean: bool = True,
                      nvidia_smi_table: Path | None = None) -> RealVerlEnv:
    """The user's spec and container; ``lean=False``: without MEMORY_OVERRIDES / MEMORY_RAY_ARGS (the budget
    benchmark's "before"); ``nvidia_smi_table``: a capture (tests/fixtures/nvidia-smi/) that the image's
    nvidia-smi double prints instead of its 1-GPU default (a host with more devices)."""
    copy_tiny_out(client, image, tmp_path)
    tiny = tmp_path / "tiny"
    name = f"verlctl-test-realverl-{secrets.token_hex(3)}"
    spec: dict[str, Any] = {
        "verl_version": "0.9.1",
        "algorithm": "grpo",
        "mode": "sync",
        "strategy": "fsdp2",
        "device": "gpu",
        "cluster": {"devices": [0], "ray_port": free_port(), "dashboard_port": free_port(),
                    # Ray's logical CPUs for verl's actors (realverl.md "For verlctl's start_verl.sh"); and
                    # free ports where Ray's defaults are fixed, as on any host that runs another Ray head
                    # (other sessions' tests share this host network).
                    "ray_start_args": ["--num-cpus=16", f"--ray-client-server-port={free_port()}",
                                       f"--dashboard-agent-listen-port={free_port()}",
                                       f"--dashboard-agent-grpc-port={free_port()}",
                                       f"--metrics-export-port={free_port()}",
                                       *(MEMORY_RAY_ARGS if lean else [])],
                    # the device double's collectives are gloo's (no NCCL on the CPU): the fabric test uses it
                    # too, on a free port, whenever a run has more than one device
                    "fabric": {"backend": "gloo", "sizes_mib": [1, 4], "port": free_port()}},
        "paths": {
            "model": str(tiny / "model"),
            "train_files": [str(tiny / "data" / "train.parquet")],
            "val_files": [str(tiny / "data" / "test.parquet")],
            "checkpoints": str(tmp_path / "ckpt"),
            "logs": str(tmp_path / "logs"),
        },
        "container": {"name": name, "image": image},
        "train": {
            "steps": steps, "train_batch_size": 4, "mini_batch_size": 4, "micro_batch_size_per_device": 2,
            "responses_per_prompt": 2, "max_prompt_length": 128, "max_response_length": 32, "save_freq": 1,
            "test_freq": -1, "tensor_parallel": 1, "pipeline_parallel": 1, "rollout_tensor_parallel": 1,
        },
        "features": {"disable": ["flash_attn"]},
        "env": dict(DOUBLE_ENV) if lean else {**DOUBLE_ENV, **BEFORE_ENV},
        "extra_overrides": list(CPU_OVERRIDES) + (MEMORY_OVERRIDES if lean else []),
    }
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "logs").mkdir()
    # The user's own container, as `docker run -d --name NAME --network host --ipc host -v DIR:DIR IMAGE`
    # would make it (no --gpus: the GPU is the test double).
    volumes = {str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}, **compile_cache_volumes(client, image)}
    if nvidia_smi_table is not None:
        volumes[str(nvidia_smi_table)] = {"bind": "/usr/local/share/verlctl-test/nvidia-smi/default.txt", "mode": "ro"}
    container = client.containers.run(
        image, ["sleep", "infinity"], name=name, detach=True, init=True, network_mode="host", ipc_mode="host",
        shm_size="2g", volumes=volumes, working_dir="/verl",
        labels={"verlctl-test": "1", "verlctl-test.realverl": "1"},
    )
    return RealVerlEnv(tmp_path, name, image, tmp_path / "state", spec, container=container)


@pytest.fixture
def realverl_env(tmp_path: Path, docker_engine: Any, realverl_image: str) -> Iterator[RealVerlEnv]:
    import docker_support
    from launch_support import remove_container

    docker_support._slot.acquire()
    env = make_realverl_env(tmp_path, docker_engine, realverl_image)
    try:
        yield env
    finally:
        remove_container(docker_engine, env.name)
        docker_support._slot.release()
