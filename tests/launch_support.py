"""Helpers for launch tests on the real Docker engine with the locally built test image."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from conftest import clean_env, run_cli

_GIVEN_PORTS: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now, never one this process handed out before: two calls in a row can get the
    same port from the kernel (one real-verl spec got 41997 for both Ray's GCS and its client server, and
    `ray start` refused it)."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port
    raise RuntimeError("no free port the tests have not handed out already")


#: The device nodes this test run created, one path a line, tagged with the run (all xdist workers of one
#: pytest run share PYTEST_XDIST_TESTRUNUID); removed when the run ends (conftest.pytest_sessionfinish).
CREATED_NODES = Path("/tmp/verlctl-test-device-nodes.txt")


def test_run_uid() -> str:
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"


def ensure_npu_device_nodes(n: int = 8) -> None:
    """Device nodes at the Ascend paths (char 1:3, like /dev/null): exercise the device mapping on a host
    without NPUs. What needs a real NPU is verified by the parsers against real captures. The nodes this run
    creates are recorded and removed at its end; nodes that were there before are never touched."""
    import fcntl

    paths = [f"/dev/davinci{i}" for i in range(n)] + ["/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc"]
    with open(CREATED_NODES, "a", encoding="utf-8") as log:
        fcntl.flock(log, fcntl.LOCK_EX)
        for p in paths:
            if not os.path.exists(p):
                os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                log.write(f"{test_run_uid()} {p}\n")


def remove_created_device_nodes(run_uid: str) -> list[str]:
    """Remove the device nodes the run ``run_uid`` created (only char 1:3 nodes, as created); keep the rest."""
    import fcntl

    removed: list[str] = []
    try:
        log = open(CREATED_NODES, "r+", encoding="utf-8")  # noqa: SIM115 - closed below, under the lock
    except FileNotFoundError:
        return removed
    with log:
        fcntl.flock(log, fcntl.LOCK_EX)
        keep = []
        for line in log.read().splitlines():
            uid, _, path = line.partition(" ")
            if uid != run_uid:
                keep.append(line)
                continue
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
                os.unlink(path)
                removed.append(path)
        log.seek(0)
        log.truncate()
        log.write("".join(f"{k}\n" for k in keep))
    return removed


def write_parquet(path: Path, rows: int = 64) -> None:
    """A parquet file verl reads: ``rows`` rows (default: two batches of the default 32 prompts, so that
    launch's dataset_smaller_than_batch rule passes)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "data_source": ["math_dapo"] * rows,
            "prompt": [[{"role": "user", "content": f"What is {i}+{i}?"}] for i in range(rows)],
            "ability": ["MATH"] * rows,
            "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(rows)],
            "extra_info": [{"index": i} for i in range(rows)],
        }
    )
    pq.write_table(table, path)


def write_model(d: Path) -> None:
    import json

    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": 8, "num_attention_heads": 8,
        "num_key_value_heads": 4, "hidden_size": 256, "vocab_size": 1000, "intermediate_size": 512,
    }))
    (d / "tokenizer.json").write_text("{}")
    (d / "tokenizer_config.json").write_text("{}")
    header = b'{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}'
    (d / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)


def write_run_files(root: Path, model: str = "Qwen3-tiny") -> dict[str, str]:
    """A real model dir and train/val parquet files under ``root``; their spec paths."""
    write_model(root / "models" / model)
    (root / "data").mkdir(exist_ok=True)
    write_parquet(root / "data" / "train.parquet")
    write_parquet(root / "data" / "val.parquet")
    return {
        "paths.model": str(root / "models" / model),
        "paths.train_files": str(root / "data" / "train.parquet"),
        "paths.val_files": str(root / "data" / "val.parquet"),
    }


@dataclass
class LaunchEnv:
    root: Path
    name: str
    image: str
    state: Path
    spec: dict[str, Any] = field(default_factory=dict)
    extra_env: dict[str, str] = field(default_factory=dict)

    @property
    def argv_log(self) -> list[dict[str, Any]]:
        import json

        p = self.root / "logs" / "standin_argv.jsonl"
        return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []

    @property
    def spec_file(self) -> Path:
        p = self.root / "run.yaml"
        p.write_text(yaml.safe_dump(self.spec), encoding="utf-8")
        return p

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(VERLCTL_STATE_DIR=str(self.state), COLUMNS="200", **self.extra_env, **extra)

    def cli(self, *args: str, timeout: float = 600, **env: str):  # type: ignore[no-untyped-def]
        return run_cli(*args, env=self.env(**env), timeout=timeout)


def make_launch_env(tmp_path: Path, image: str, *, steps: int = 3, step_seconds: float = 0.5,
                    standin: dict[str, str] | None = None) -> LaunchEnv:
    ensure_npu_device_nodes()
    root = tmp_path
    (root / "data").mkdir()
    write_parquet(root / "data" / "train.parquet")
    write_parquet(root / "data" / "val.parquet")
    write_model(root / "models" / "Qwen3-0.6B")
    name = f"verlctl-test-launch-{secrets.token_hex(3)}"
    env_vars = {
        "VERLCTL_STANDIN_STEP_SECONDS": str(step_seconds),
        "VERLCTL_STANDIN_ARGV_LOG": str(root / "logs" / "standin_argv.jsonl"),
        **(standin or {}),
    }
    spec = {
        "paths": {
            "model": str(root / "models" / "Qwen3-0.6B"),
            "train_files": str(root / "data" / "train.parquet"),
            "val_files": str(root / "data" / "val.parquet"),
            "checkpoints": str(root / "ckpt"),
            "logs": str(root / "logs"),
        },
        "cluster": {"ray_port": free_port(), "dashboard_port": free_port(), "join_timeout_s": 120},
        "container": {"name": name, "image": image, "shm_size": "1g"},
        "train": {"steps": steps, "save_freq": 1, "tensor_parallel": 2, "pipeline_parallel": 1},
        "env": env_vars,
    }
    return LaunchEnv(root, name, image, root / "state", spec)


def remove_container(client: Any, name: str) -> None:
    """Remove the container ``name`` and those a multi-node launch named after it (``name-nodeN``)."""
    for c in client.containers.list(all=True, filters={"name": name}):
        if c.name == name or c.name.startswith(f"{name}-node"):
            with contextlib.suppress(Exception):
                c.remove(force=True)
