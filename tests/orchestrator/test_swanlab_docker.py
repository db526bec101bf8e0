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

from docker_support import ps_in
from launch_support import LaunchEnv, free_port

pytestmark = pytest.mark.docker

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


#: TEST DOUBLE of the SwanLab *server* (none is reachable from the test machine), appended to the image's
#: swanlab: login's key check passes, and init writes the sha256 of the API key that swanlab's own settings
#: resolve (the environment, else its login store: what init logs in with in cloud mode), then runs offline.
SWANLAB_SERVER_DOUBLE = '''
# TEST DOUBLE (verlctl tests/orchestrator/test_swanlab_docker.py): the SwanLab server.
import hashlib as _verlctl_h
import os as _verlctl_os

_verlctl_real_init = init


def login(*args, **kwargs):
    return True


def init(*args, **kwargs):
    from swanlab.sdk.internal.settings import create_settings as _cs

    key = _cs().api_key or ""
    logdir = kwargs.get("logdir") or "swanlog"
    _verlctl_os.makedirs(logdir, exist_ok=True)
    with open(_verlctl_os.path.join(logdir, "verlctl-double-key.sha256"), "w") as fh:
        fh.write(_verlctl_h.sha256(key.encode()).hexdigest())
    kwargs["mode"] = "offline"
    return _verlctl_real_init(*args, **kwargs)
'''


def swanlab_server_double_image(docker_engine, base: str) -> str:  # type: ignore[no-untyped-def]
    import hashlib
    import io
    import tarfile

    base_id = docker_engine.images.get(base).id
    tag = "verlctl-test-swanserverdouble:" + hashlib.sha256((base_id + SWANLAB_SERVER_DOUBLE).encode()).hexdigest()[:16]
    try:
        docker_engine.images.get(tag)
        return tag
    except Exception:  # noqa: BLE001 - not built yet
        pass
    dockerfile = (f"FROM {base}\nCOPY double.py /tmp/double.py\n"
                  "RUN cat /tmp/double.py >> \"$(python3 -c 'import swanlab; print(swanlab.__file__)')\" "
                  "&& rm /tmp/double.py\n")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("Dockerfile", dockerfile), ("double.py", SWANLAB_SERVER_DOUBLE)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    docker_engine.images.build(fileobj=buf, custom_context=True, tag=tag, rm=True)
    return tag


def test_cloud_key_reaches_the_tracker_through_swanlab_s_store_not_ray_s_environment(senv: LaunchEnv, docker_engine) -> None:  # type: ignore[no-untyped-def]
    """O3: start_verl.sh moves the key from the env file into the run's SwanLab login store (0600 .netrc in a
    0700 dir, SWANLAB_ROOT) before `ray start`: no process of the run (Ray's daemons, the driver, the
    tracker's Ray worker) has it in its environment, yet swanlab.init in the Ray worker resolves it; nothing
    in the state dir, the logs or the rendered scripts holds it; `stop` removes the store."""
    import hashlib

    senv.spec["container"]["image"] = swanlab_server_double_image(docker_engine, senv.image)
    swan_logs = senv.root / "logs" / "swanlab"
    senv.spec["train"]["steps"] = 600
    with http_server() as (port, seen_requests):  # answers the pre-launch try (issue 24); not a SwanLab server
        senv.spec["logging"] = {"swanlab": {"host": f"http://127.0.0.1:{port}", "mode": "cloud",
                                            "log_dir": str(swan_logs)}}
        res = senv.cli("launch", "-c", str(senv.spec_file), "--yes", SWANLAB_API_KEY=KEY)
    assert KEY not in seen_requests.text()
    assert res.code == 0, res.out + res.err
    assert KEY not in res.out + res.err
    seen = swan_logs / "verlctl-double-key.sha256"
    deadline = time.monotonic() + 180
    while not seen.exists():
        assert time.monotonic() < deadline, "swanlab.init never ran in the Ray worker"
        time.sleep(0.5)
    time.sleep(0.2)
    assert seen.read_text() == hashlib.sha256(KEY.encode()).hexdigest()  # the tracker has the key
    container = docker_engine.containers.get(senv.name)
    ps = ps_in(container, "pid=,args=")
    assert "raylet" in ps and "gcs_server" in ps, ps
    holders = container.exec_run(["sh", "-c", 'grep -l -a -F -e "$0" /proc/[0-9]*/environ 2>/dev/null; exit 0',
                                  KEY]).output.decode().split()
    assert holders == [], (holders, ps)  # no process of the run has it in its environment
    run_dir = next((senv.state / "runs").iterdir())
    record = json.loads((run_dir / "run.json").read_text())
    store = f"{record['scripts_dir']}/verlctl.swanlab"
    modes = container.exec_run(["stat", "-c", "%a %n", store, f"{store}/.netrc"]).output.decode().split()
    assert modes[0] == "700" and modes[2] == "600", modes
    assert KEY not in _all_text(senv.state) and KEY not in _all_text(senv.root / "logs")
    scripts = container.exec_run(["cat", f"{record['scripts_dir']}/start_verl.sh",
                                  f"{record['scripts_dir']}/run_training.sh"]).output.decode()
    assert "SWANLAB_ROOT" in scripts and KEY not in scripts
    log = Path(record["run_log"]).read_text(errors="replace")
    assert "the API key is in this run's SwanLab login store" in log, log[-2000:]
    res = senv.cli("stop", "--grace", "10")
    assert res.code == 0, res.out + res.err
    left = container.exec_run(["sh", "-c", 'ls -a -- "$0" "$1" 2>&1; exit 0', store,
                               f"{record['scripts_dir']}/verlctl.env"]).output.decode()
    assert "No such file" in left and ".netrc" not in left, left
