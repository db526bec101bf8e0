"""SwanLab on the real engine: the cloud key never leaks; offline mode writes its records under the log dir.

No SwanLab server runs here. A host nothing listens on is refused before launch does anything (the SwanLab
host is tried first, issue 24). A stand-in HTTP server (tests/reach_support.py) passes that try, and the login
inside the container (which checks the key against the server) then fails: launch stops with one line.
Everything the launch did up to then is searched for the key.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from reach_support import http_server

from launch_support import LaunchEnv, free_port

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("ray")]

KEY = "swl-TEST-KEY-5f2b9c7e0a41"


@pytest.fixture
def senv(launch_env: LaunchEnv) -> LaunchEnv:
    return launch_env


def _all_text(root: Path) -> str:
    out = []
    for p in root.rglob("*"):
        if p.is_file():
            out.append(p.read_bytes().decode("utf-8", errors="replace"))
    return "\n".join(out)


def test_an_unreachable_swanlab_host_is_refused_before_anything_is_created(senv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    senv.spec["logging"] = {"swanlab": {"host": f"http://127.0.0.1:{free_port()}", "mode": "cloud",
                                        "log_dir": str(senv.root / "logs" / "swanlab")}}
    res = senv.cli("launch", "-c", str(senv.spec_file), "--yes", SWANLAB_API_KEY=KEY)
    assert res.code == 2 and "swanlab_refused" in res.out + res.err
    assert KEY not in res.out + res.err and "Traceback" not in res.out + res.err
    assert not docker_engine.containers.list(all=True, filters={"name": senv.name})


def test_cloud_key_is_absent_everywhere_but_the_0600_env_file(senv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    with http_server() as (port, seen):  # answers GET (the pre-launch try); not a SwanLab server
        senv.spec["logging"] = {"swanlab": {"host": f"http://127.0.0.1:{port}", "mode": "cloud",
                                            "log_dir": str(senv.root / "logs" / "swanlab")}}
        since = int(time.time()) - 1
        res = senv.cli("launch", "-c", str(senv.spec_file), "--yes", SWANLAB_API_KEY=KEY)
        until = int(time.time()) + 1
    assert KEY not in seen.text()
    # The login cannot reach a server: one clear line, non-zero.
    assert res.code != 0
    errors = [ln for ln in res.err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "SwanLab login to http://127.0.0.1" in errors[0]
    assert "AuthenticationError" in errors[0]  # the server is unreachable; the settings themselves parsed
    assert "Traceback" not in res.out + res.err
    # printed output
    assert KEY not in res.out and KEY not in res.err
    # every file in the run dir (resolved spec, scripts, events, run.json)
    run_dir = next((senv.state / "runs").iterdir())
    assert (run_dir / "events.jsonl").exists()
    assert KEY not in _all_text(run_dir)
    # the failed launch removed the container it created, with the 0600 env file in it (D27)
    import docker

    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(senv.name)
    assert "removed container" in res.out
    # every exec's argv (the engine's exec_create events carry the full command line)
    execs = list(docker_engine.events(since=since, until=until, decode=True,
                                      filters={"container": senv.name, "event": "exec_create"}))
    assert len(execs) >= 5
    assert not any(KEY in json.dumps(ev) for ev in execs)
    # logs on the host side (the run log dir) and the test's own files
    assert KEY not in _all_text(senv.root / "logs") if (senv.root / "logs").exists() else True


def test_offline_mode_writes_records_under_the_log_dir_without_a_key(senv: LaunchEnv) -> None:
    log_dir = senv.root / "logs" / "swanlab"
    senv.spec["logging"] = {"swanlab": {"enabled": True, "mode": "offline", "log_dir": str(log_dir)}}
    res = senv.cli("launch", "-c", str(senv.spec_file), "--yes", SWANLAB_API_KEY=KEY)
    assert res.code == 0, res.out + res.err
    assert "offline mode: records go to" in res.out
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(log_dir.glob("run-*/files/config.yaml")):
        time.sleep(1)
    configs = list(log_dir.glob("run-*/files/config.yaml"))
    assert configs, sorted(str(p) for p in log_dir.rglob("*"))
    # offline: the key is not exported at all (verl would log in with it)
    run_dir = next((senv.state / "runs").iterdir())
    assert KEY not in _all_text(run_dir) and KEY not in res.out + res.err
    argv = senv.argv_log[-1]
    assert "trainer.logger=[console,swanlab]" in argv["argv"]
    assert "SWANLAB_API_KEY" not in argv.get("env", {})
    senv.cli("stop")
