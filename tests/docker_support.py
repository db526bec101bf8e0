"""pytest plugin: a real Docker engine, the locally built test image, and self-cleaning test containers.

Load it from tests/conftest.py with ``pytest_plugins = [...]``. Fixtures:

* ``docker_engine`` (session): a ``docker.DockerClient`` on the local engine. The API version is negotiated,
  never pinned. With no engine the test is skipped, but when the ``CI`` environment variable is set (and is
  not ``0``/``false``) it fails instead.
* ``test_image`` (session): the tag of the final test image, ``verlctl-test-verl:<content hash>``.
  ``tests/image/build.sh`` builds whatever is missing; it is a no-op taking about 0.3 s when everything is
  present. The script itself holds a machine-wide flock, so xdist workers, CI and other sessions never build
  at the same time. The moving alias ``verlctl-test-verl:0.7.0`` points at the same image.
* ``container_factory`` (function) and ``module_container_factory`` (module): ``factory(image, command,
  **docker_run_kwargs)`` starts a detached container with ``init=True``. Its name starts with
  ``verlctl-test-`` and it carries the labels ``verlctl-test=1``, ``verlctl-test.session=<id>`` and
  ``verlctl-test.owner=<host>:<pid namespace>:<pid>``. Teardown removes the containers by id. ``factory.exec(container,
  cmd, env=..., workdir=..., timeout=...)`` runs a command and returns ``ExecResult(exit_code, stdout,
  stderr)``. At session end, every container still labelled with this session is removed. At session
  start, containers left by dead test processes on this host are removed (a process whose pid was taken in this
  PID namespace: a test session inside ``unshare --pid``, as the signal-path mutation runs, and one outside
  never judge each other's).

Load control. Tests that use these fixtures are marked ``docker`` automatically, so
``-m 'not docker'`` deselects them. No ``xdist_group`` is needed for load control. Instead, a test process
takes one of ``VERLCTL_TEST_DOCKER_SLOTS`` machine-wide slots (default 2; an flock on
``/tmp/verlctl-test-slots/slot<N>.lock``) when it starts its first container, and holds it until its last
container is gone. Slots are re-entrant within a process. So on a 2-core box at most two test processes,
whether from this session's xdist workers or from anyone else's session, have containers (and Ray heads) at
a time. A Ray head in the test image takes about 2.5 s and 0.65 GB. ``xdist_group`` is still useful to keep
tests that share a module-scoped container on one worker (see tests/project/test_image.py).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import itertools
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO_ROOT / "tests" / "image" / "build.sh"
LABEL = "verlctl-test"
SESSION_LABEL = "verlctl-test.session"
OWNER_LABEL = "verlctl-test.owner"
SESSION_ID = uuid.uuid4().hex[:12]


def pid_namespace() -> str:
    """This process's PID namespace (the inode of /proc/self/ns/pid, e.g. ``4026531836``): a pid means a process
    only in the namespace where it was taken (a mutation run in ``unshare --pid`` numbers its own from 1)."""
    try:
        return os.readlink("/proc/self/ns/pid").partition("[")[2].rstrip("]") or "?"
    except OSError:
        return "?"


#: ``<host>:<pid namespace>:<pid>`` of the test process that owns a container.
OWNER = f"{socket.gethostname()}:{pid_namespace()}:{os.getpid()}"
SLOT_DIR = Path(os.environ.get("VERLCTL_TEST_SLOT_DIR", "/tmp/verlctl-test-slots"))
SLOT_WAIT_S = 1800.0


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class _DockerSlot:
    """A machine-wide counting semaphore made of flock'ed files, re-entrant within this process."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        if self._depth:
            self._depth += 1
            return
        n = max(1, int(os.environ.get("VERLCTL_TEST_DOCKER_SLOTS", "2")))
        SLOT_DIR.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            for i in range(n):
                fd = os.open(SLOT_DIR / f"slot{i}.lock", os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._fd, self._depth = fd, 1
                return
            if time.monotonic() > deadline:
                pytest.fail(f"no free docker test slot in {SLOT_DIR} after {SLOT_WAIT_S:.0f} s ({n} slots)")
            time.sleep(0.5)

    def release(self) -> None:
        if not self._depth:
            return
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


_slot = _DockerSlot()


class ContainerFactory:
    """Creates labelled ``init=True`` containers and removes them (by id) in ``cleanup``."""

    _counter = itertools.count(1)

    def __init__(self, client: Any, default_image: str | None = None) -> None:
        self.client = client
        self.default_image = default_image
        self._ids: list[str] = []

    def __call__(
        self,
        image: str | None = None,
        command: str | list[str] | None = None,
        *,
        name: str | None = None,
        **kwargs: Any,
    ) -> Any:
        image = image or self.default_image
        if image is None:
            raise ValueError("container_factory: no image given")
        if command is None:
            command = ["sleep", "infinity"]
        labels = {LABEL: "1", SESSION_LABEL: SESSION_ID, OWNER_LABEL: OWNER, **kwargs.pop("labels", {})}
        full_name = f"verlctl-test-{SESSION_ID}-{next(self._counter)}" + (f"-{name}" if name else "")
        kwargs.setdefault("init", True)
        if not self._ids:
            _slot.acquire()
        try:
            container = self.client.containers.run(
                image, command, detach=True, name=full_name, labels=labels, **kwargs
            )
        except BaseException:
            if not self._ids:
                _slot.release()
            raise
        self._ids.append(container.id)
        return container

    def exec(
        self,
        container: Any,
        cmd: str | list[str],
        *,
        env: dict[str, str] | None = None,
        workdir: str | None = None,
        timeout: float | None = 300,
    ) -> ExecResult:
        """Run ``cmd`` in ``container``; stdout and stderr separately, with the exit code.

        On timeout a ``TimeoutError`` is raised. The process keeps running in the container (``docker exec`` has
        no kill), so remove the container to stop it.
        """
        api = self.client.api

        def run() -> ExecResult:
            exec_id = api.exec_create(container.id, cmd, environment=env, workdir=workdir)["Id"]
            out, err = api.exec_start(exec_id, demux=True)
            code = api.exec_inspect(exec_id)["ExitCode"]
            return ExecResult(
                code, (out or b"").decode("utf-8", "replace"), (err or b"").decode("utf-8", "replace")
            )

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(run).result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"docker exec {cmd!r} did not finish within {timeout} s") from None
        finally:
            pool.shutdown(wait=False)

    def cleanup(self) -> None:
        import docker.errors

        try:
            for cid in reversed(self._ids):
                with contextlib.suppress(docker.errors.NotFound):
                    self.client.api.remove_container(cid, force=True)
        finally:
            if self._ids:
                self._ids.clear()
                _slot.release()


#: Lines around ``ps``'s own output in :func:`ps_in` (no word a test looks for in a process list).
_PS_BEGIN, _PS_END = "@@ps-begin@@", "@@ps-end@@"


def ps_in(container: Any, columns: str = "args") -> str:
    """``ps -eo COLUMNS`` in ``container``, whole. Docker can lose the start of a short exec's output (a CI run under
    load got a process list without its first lines: docker/docker-py#2042), so a check that a process is there
    would fail and one that it is gone would pass falsely: the list is framed by two marker lines and read again
    until both arrived. The framing ``sh -c`` is in the list too, as ``ps`` itself always is."""
    script = f"echo {_PS_BEGIN}; ps -eo {columns}; echo {_PS_END}"
    out = ""
    for _ in range(5):
        out = container.exec_run(["sh", "-c", script]).output.decode(errors="replace")
        begin, end = f"{_PS_BEGIN}\n", f"\n{_PS_END}\n"  # whole lines: the sh -c line in the list names both too
        if out.startswith(begin) and out.endswith(end):
            return out[len(begin):-len(end) + 1]
    raise AssertionError(f"ps in {container.name} did not come back whole in 5 tries: {out[-2000:]!r}")


def _remove_containers(client: Any, filters: dict[str, Any], keep: Any = None) -> None:
    import docker.errors

    for c in client.api.containers(all=True, filters=filters):
        if keep is not None and keep(c):
            continue
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            client.api.remove_container(c["Id"], force=True)


def owner_alive(container: dict[str, Any]) -> bool:
    """False only when the owner's pid was taken in this host's and this process's PID namespace and no process
    has it now; an owner of another host or namespace (or a label of another form) is not ours to judge."""
    owner, _, pid = (container.get("Labels") or {}).get(OWNER_LABEL, "").rpartition(":")
    if owner != f"{socket.gethostname()}:{pid_namespace()}" or not pid.isdigit():
        return True  # not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as exc:
        msg = f"no Docker engine answers ({type(exc).__name__}: {exc}); start dockerd (see .ci/run)"
        if in_ci():
            pytest.fail(f"CI is set: {msg}")
        pytest.skip(msg)
    # Containers left behind by test processes on this host that no longer exist.
    _remove_containers(client, {"label": [LABEL]}, keep=owner_alive)
    yield client
    _remove_containers(client, {"label": [f"{SESSION_LABEL}={SESSION_ID}"]})
    client.close()


@pytest.fixture(scope="session")
def test_image(docker_engine: Any) -> str:
    tags = subprocess.run(
        [str(BUILD_SCRIPT), "--print-tags"], capture_output=True, text=True, check=True
    ).stdout.split()
    missing = [t for t in tags if not docker_engine.images.list(name=t)]
    if missing and shutil.which("debootstrap") is None and not in_ci():
        pytest.skip(f"test image {missing[-1]} is missing and debootstrap is not installed (run .ci/run)")
    proc = subprocess.run([str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        pytest.fail(f"tests/image/build.sh failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture
def container_factory(docker_engine: Any, test_image: str) -> Iterator[ContainerFactory]:
    factory = ContainerFactory(docker_engine, default_image=test_image)
    yield factory
    factory.cleanup()


@pytest.fixture(scope="module")
def module_container_factory(docker_engine: Any, test_image: str) -> Iterator[ContainerFactory]:
    factory = ContainerFactory(docker_engine, default_image=test_image)
    yield factory
    factory.cleanup()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "docker_engine" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
