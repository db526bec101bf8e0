"""Shared test helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

#: The repository, tests/, and tests/fixtures/: every test names its files through these, never by counting
#: parents of its own path (tests live one directory down, by subject: tests/checks/, tests/orchestrator/, ...).
ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
FIXTURES = TESTS / "fixtures"

# The test modules sit in one directory per subject, without __init__.py: pytest imports each by its basename
# (so no two test files may share one), and some import helpers of another by that name (`from test_check_cli
# import ...`). Every directory that holds test modules is on sys.path from the start, so such an import works
# however the run is started (one file, one directory, the whole suite).
for _dir in sorted(TESTS.iterdir()):
    if _dir.is_dir() and any(_dir.glob("test_*.py")) and str(_dir) not in sys.path:
        sys.path.append(str(_dir))

# Docker fixtures (engine, locally built test image, container factory) live in tests/docker_support.py;
# the real-verl image and run fixtures in tests/realverl_support.py.
pytest_plugins = ["docker_support", "realverl_support", "xdist_groups"]

# Inputs every minimal spec needs.
BASE_PATHS = {
    "paths.model": "/mnt/models/Qwen3-8B",
    "paths.train_files": "/mnt/data/train.parquet",
    "paths.val_files": "/mnt/data/val.parquet",
}


def clean_env(**extra: str) -> dict[str, str]:
    """An environment without any variable that the spec reads (seed names, VERLCTL_*, proxies)."""
    from verlctl.spec.sources import SEED_ENV, SEED_FEATURE_ENV

    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SEED_ENV and k not in SEED_FEATURE_ENV and not k.startswith("VERLCTL_")
    }
    env.update(extra)
    return env


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> dict:
        return json.loads(self.out)


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: str | Path | None = None, input: str | None = None,
            timeout: float = 120) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "verlctl", *args],
        capture_output=True,
        text=True,
        env=clean_env() if env is None else env,
        cwd=cwd,
        input=input,
        timeout=timeout,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


#: Runs each argv of argv[1] (JSON) through verlctl.cli.main in this one process, stdout and stderr captured
#: per call; prints [[exit code, stdout, stderr], ...] as JSON.
_MANY = """
import contextlib, io, json, sys
from verlctl.cli import main
res = []
for argv in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    res.append([code, out.getvalue(), err.getvalue()])
sys.__stdout__.write(json.dumps(res))
"""


def run_cli_many(argvs: list[list[str]], env: dict[str, str] | None = None, timeout: float = 300) -> list[CliResult]:
    """Like run_cli for each argv, all in one interpreter (the CLI's own entry point, one start-up instead of
    one per command): for the many short error cases of one test. Each call's exit code, stdout, stderr."""
    proc = subprocess.run([sys.executable, "-c", _MANY, json.dumps(argvs)], capture_output=True, text=True,
                          env=clean_env() if env is None else env, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr
    return [CliResult(code, out, err) for code, out, err in json.loads(proc.stdout)]


@pytest.fixture
def cli():
    return run_cli


def fixture_text(path: str | Path) -> str:
    """The capture in a fixture file: everything after the first line that is exactly '# ---'.

    The product reads raw text; only the tests strip the provenance header."""
    lines = Path(path).read_text(encoding="utf-8").splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.rstrip("\r\n") == "# ---":
            return "".join(lines[i + 1 :])
    raise AssertionError(f"{path} has no '# ---' provenance separator")


def capture(category: str, name: str) -> str:
    """The capture of ``tests/fixtures/<category>/<name>``."""
    return fixture_text(FIXTURES / category / name)


def fixture_names(category: str) -> list[str]:
    return sorted(p.name for p in (FIXTURES / category).glob("*.txt"))


@pytest.fixture
def launch_env(tmp_path: Path, docker_engine, test_image):  # type: ignore[no-untyped-def]
    """A spec for a launch on the real engine (real model/parquet files, device nodes, free ports, a fresh
    state dir); the container it names is removed afterwards. Holds a docker test slot."""
    import docker_support
    from launch_support import make_launch_env, remove_container

    docker_support._slot.acquire()
    env = make_launch_env(tmp_path, test_image, steps=3)
    yield env
    remove_container(docker_engine, env.name)
    docker_support._slot.release()


def pytest_configure(config: pytest.Config) -> None:
    """One id for this test run, shared by its xdist workers (PYTEST_XDIST_TESTRUNUID): what the run creates
    on the machine (device nodes) is tagged with it and removed at its end.

    And SIGINT at its default: a suite started as a background job (`cmd &`, nohup) inherits SIGINT ignored,
    and so would every `python -m verlctl` a test starts: a test that interrupts a launch as a terminal's
    Ctrl-C does would see the signal ignored and the launch carry on. A terminal's foreground job has SIGINT
    at its default, so each process of the run (xdist workers too) puts it back: a handled signal is reset to
    the default across exec, an ignored one is not."""
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config, "workerinput"):
        return
    import uuid

    uid = getattr(config.option, "testrunuid", None) or uuid.uuid4().hex
    if hasattr(config.option, "testrunuid"):
        config.option.testrunuid = uid
    os.environ["PYTEST_XDIST_TESTRUNUID"] = uid


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The run's controller (not an xdist worker) removes the /dev/davinci* nodes this run created."""
    if hasattr(session.config, "workerinput"):
        return
    from launch_support import remove_created_device_nodes, test_run_uid

    remove_created_device_nodes(test_run_uid())
