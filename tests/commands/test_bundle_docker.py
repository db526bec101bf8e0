"""`verlctl bundle` and `verlctl report` on a real run: the Docker engine, the locally built test image (its
trainer and `npu-smi` are TEST DOUBLES), real Ray inside the container."""

from __future__ import annotations

import json
import tarfile
import time
from pathlib import Path

import pytest

from launch_support import LaunchEnv

pytestmark = pytest.mark.docker

SECRET = "SECRETKEY-bundle-93af"


def test_bundle_and_report_of_a_real_run(launch_env: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    env = launch_env
    env.spec["train"]["steps"] = 4
    res = env.cli("launch", "-c", str(env.spec_file), "--yes", "--verify-timeout", "180")
    assert res.code == 0, res.out + res.err
    ckpt = Path(env.spec["paths"]["checkpoints"])
    deadline = time.monotonic() + 180
    while not (ckpt / "latest_checkpointed_iteration.txt").exists() and time.monotonic() < deadline:
        time.sleep(1)
    # A line that must not leave the machine: the key, a private node name, a home directory.
    logs = sorted((env.root / "logs").glob("*.log"))
    assert logs
    for log in logs:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"swanlab login api_key={SECRET} node=train-node-42 cache=/home/dave/.cache\n")

    out = env.root / "bundle.tar.gz"
    r = env.cli("bundle", "-o", str(out), "--private", "train-node-42", SWANLAB_API_KEY=SECRET)
    assert r.code == 0, r.out + r.err
    assert SECRET.encode() not in out.read_bytes()
    with tarfile.open(out, "r:gz") as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode() for m in tar.getmembers()}  # type: ignore[union-attr]
    blob = "\n".join(files.values())
    assert SECRET not in blob and "train-node-42" not in blob and "/home/dave" not in blob
    # versions from inside the container (the test image pins these)
    assert "verl=0.7.0" in files["versions-target.txt"] and "ray=2.60.0" in files["versions-target.txt"]
    assert "Ascend910B4" in files["npu-smi.txt"] or "910B4" in files["npu-smi.txt"]
    assert "ray status" in files["ray-status.txt"]
    assert "python3 -m" in files["scripts/run_training.sh"] and "ray start" in files["scripts/start_verl.sh"]
    assert json.loads(files["target.json"])["image_digest"].startswith("sha256:")
    assert "step:" in files["log-tail.txt"]
    manifest = json.loads(files["manifest.json"])
    assert "nvidia-smi.txt" in manifest["unavailable"]  # an NPU image has no nvidia-smi: said, not hidden

    page = env.root / "report.html"
    r = env.cli("report", "-o", str(page))
    assert r.code == 0, r.out + r.err
    html = page.read_text(encoding="utf-8")
    assert 'data-chart="score" data-points="0"' not in html and "<polyline" in html
    assert env.cli("stop").code == 0
