"""One gate for run records: every command of the CLI that reads a record, and the watcher's relaunch, take it
through the one loader (``runtime/records.py:_load_dir``), which refuses a record that is not this user's to act
on: another uid's (planted in a shared 1777 state dir), kept in a run directory other users can write, in a
group-writable runs directory of another user's, reached through a symlink, or naming a path on this host that
belongs to another user (its ``workdir``, its log). Refused means one line, and nothing of the record read or
run: no log printed, no file written, no process signalled, no code of the planted work dir imported.

The commands are ENUMERATED from the typer app: a new command must be added to one of the two tables below
(it reads a record, and is planted against; or it reads none, with the reason), else the test fails.

Every file verlctl writes under a run directory goes through one helper (``RunRecord.open_file`` /
``write_file``): never through a planted link, created 0600 (watcher.log, attempt-N/ scripts,
slurm-options.json). Records and files are planted as ``nobody`` (uid 65534) with os.chown: needs root."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, CliResult, clean_env, run_cli_many

NOBODY = 65534
RUN = "21000101-000000-planted-gate"
SECRET = "ROOT-ONLY-SECRET-gate-5d2a"
SRC = ROOT / "src" / "verlctl"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another uid (needs root)")

#: Every command that reads a run record: the argv planted against (OUT: a file that must not appear).
RECORD_COMMANDS: dict[str, list[str]] = {
    "status": ["status", RUN],
    "logs": ["logs", RUN, "-n", "50"],
    "stop": ["stop", RUN, "--grace", "1"],
    "watch": ["watch", RUN],
    "report": ["report", RUN, "-o", "OUT"],
    "bundle": ["bundle", RUN, "-o", "OUT"],
    "export-hf": ["export-hf", RUN, "-o", "OUT"],
    "list": ["list"],
}
#: The same commands without a run id: the newest run is the default, and a planted record (created in 2100)
#: must never be it.
DEFAULT_FORMS = ["status", "logs", "stop", "watch", "report", "bundle"]
#: Every command that reads no record of its own, and why (what it reads of other runs goes through
#: all_runs(), the same loader: launch/check's checkpoint-in-use and container checks).
NO_RECORD: dict[str, str] = {
    "detect": "probes this machine",
    "init": "writes a spec from questions",
    "plan": "a spec; other runs only through all_runs()",
    "check": "a spec; other runs only through all_runs()",
    "launch": "writes a new record; other runs only through all_runs()",
    "quickstart": "a launch",
    "demo": "a launch (verlctl launch as a subprocess); its own runs only through scan_runs(), the gated loader",
    "diagnose": "a log file named on the command line",
    "features": "verl's features",
    "schema": "the spec's schema",
    "import": "a launch script",
    "export rayjob": "a spec",
    "export volcano": "a spec",
    "export slurm": "a spec",
}


def _app_commands() -> set[str]:
    import typer

    from verlctl.cli import app

    names: set[str] = set()

    def walk(cmd: object, prefix: str) -> None:
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            names.add(prefix)

    walk(typer.main.get_command(app), "")
    return names


def test_every_command_is_planted_against_or_reads_no_record() -> None:
    assert _app_commands() == set(RECORD_COMMANDS) | set(NO_RECORD)


# ---------------------------------------------------------------- hostile records, the review's and more


def _record_doc(root: Path, **over: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "run_id": RUN, "created_at": 4102444800.0, "runtime": "host", "workdir": str(root / "work"),
        "scripts_dir": str(root / "work" / ".verlctl" / "runs" / RUN), "run_log": str(root / "secret.log"),
        "train_log": "", "checkpoints": str(root / "ckpt"), "experiment": "exp", "verl_version": "0.7.0",
        "pgid": None, "attempts": [],
    }
    doc.update(over)
    return doc


class Planted:
    """A state dir with one hostile record, a root-only secret log it names, a decoy process of root's it names,
    and a work dir of nobody's whose ``verl`` package would leave a PWNED file if it were ever imported."""

    def __init__(self, root: Path, variant: str, decoy: int) -> None:
        self.root, self.variant = root, variant
        self.state = root / "state"
        self.secret = root / "secret.log"
        self.secret.write_text(f"step:1 - {SECRET}\n")
        self.secret.chmod(0o600)
        self.evil = root / "evil"
        (self.evil / "verl").mkdir(parents=True)
        (self.evil / "verl" / "__init__.py").write_text(
            f"open({str(root / 'PWNED')!r}, 'w').write('ran')\n")
        (self.evil / "scripts").mkdir()
        for p in [self.evil, *self.evil.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
        self.run_dir = self.state / "runs" / RUN
        self.outs: list[Path] = []
        getattr(self, f"_plant_{variant}")(decoy)

    def _write(self, d: Path, doc: dict[str, object]) -> None:
        d.mkdir(parents=True, exist_ok=True)
        (d / "run.json").write_text(json.dumps(doc))
        (d / "spec.resolved.yaml").write_text(f"container:\n  runtime: host\n  workdir: {self.evil}\n")

    def _attempt(self, decoy: int) -> dict[str, object]:
        return {"pgid": decoy, "attempts": [{"number": 1, "pgid": decoy, "started_at": time.time(),
                                              "marker": f"{RUN}/1/planted"}]}

    def _plant_foreign(self, decoy: int) -> None:
        # N7/N2: nobody's record in a 1777 state dir, naming nobody's work dir, root's 0600 log and a root process
        (self.state / "runs").mkdir(parents=True)
        for p in (self.state, self.state / "runs"):
            p.chmod(0o1777)
        self._write(self.run_dir, _record_doc(self.root, workdir=str(self.evil),
                                              scripts_dir=str(self.evil / "scripts"), **self._attempt(decoy)))
        for p in (self.run_dir, *self.run_dir.iterdir()):
            os.lchown(p, NOBODY, NOBODY)

    def _plant_world_writable(self, decoy: int) -> None:
        # root's own files, in a run directory every user can write (anyone could have replaced them)
        self._write(self.run_dir, _record_doc(self.root, **self._attempt(decoy)))
        self.run_dir.chmod(0o777)

    def _plant_team_dir(self, decoy: int) -> None:
        # a group-writable runs directory (a team's, umask 002) that belongs to another user, no sticky bit
        self._write(self.run_dir, _record_doc(self.root, **self._attempt(decoy)))
        os.chown(self.state / "runs", NOBODY, NOBODY)
        (self.state / "runs").chmod(0o2775)

    def _plant_foreign_workdir(self, decoy: int) -> None:
        # root's own record, private state dir, but it names nobody's work dir (code root would run)
        self._write(self.run_dir, _record_doc(self.root, workdir=str(self.evil),
                                              scripts_dir=str(self.evil / "scripts"), **self._attempt(decoy)))

    def _plant_foreign_log(self, decoy: int) -> None:
        # root's own record naming a log in a directory of nobody's (a log nobody chooses the content of)
        log_dir = self.root / "nobody-logs"
        log_dir.mkdir()
        os.chown(log_dir, NOBODY, NOBODY)
        self._write(self.run_dir, _record_doc(self.root, run_log=str(log_dir / "x.log"), **self._attempt(decoy)))

    def _plant_symlinked_dir(self, decoy: int) -> None:
        # the run's directory is a symlink to a record elsewhere
        elsewhere = self.root / "elsewhere" / RUN
        self._write(elsewhere, _record_doc(self.root, **self._attempt(decoy)))
        (self.state / "runs").mkdir(parents=True)
        os.symlink(elsewhere, self.run_dir)

    def argv(self, argv: list[str]) -> list[str]:
        out = []
        for a in argv:
            if a == "OUT":
                p = self.root / f"out-{len(self.outs)}"
                self.outs.append(p)
                a = str(p)
            out.append(a)
        return out


VARIANTS = ["foreign", "world_writable", "team_dir", "foreign_workdir", "foreign_log", "symlinked_dir"]


@pytest.fixture
def shared_root() -> Iterator[Path]:
    # not under pytest's 0700 tmp dir: nobody must reach it, as in a shared state dir
    root = Path(tempfile.mkdtemp(prefix="verlctl-gate-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def decoy() -> Iterator[int]:
    p = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield p.pid
    os.killpg(p.pid, 9)
    p.wait()


def _refused(res: CliResult) -> None:
    assert "Traceback" not in res.out + res.err, res.err
    assert res.code != 0, (res.out, res.err)
    lines = res.err.strip().splitlines()
    assert lines and lines[0].startswith("error: run record") and "not trusted" in lines[0], res.err
    assert "nothing was read from it or run" in lines[0], res.err


@needs_root
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_record_command_refuses_a_hostile_record(shared_root: Path, decoy: int, variant: str) -> None:
    planted = Planted(shared_root, variant, decoy)
    cases = [(name, planted.argv(argv)) for name, argv in RECORD_COMMANDS.items()]
    cases += [(f"{name} (newest run)", [name, *planted.argv(RECORD_COMMANDS[name][2:])]) for name in DEFAULT_FORMS]
    env = clean_env(VERLCTL_STATE_DIR=str(planted.state), COLUMNS="250")
    results = run_cli_many([argv for _, argv in cases], env=env)
    for (name, _argv), res in zip(cases, results, strict=True):
        assert SECRET not in res.out + res.err, name
        if name == "list":
            assert res.code == 0, res.err
            assert "not trusted" in res.out and RUN in res.out, res.out
            continue
        try:
            _refused(res)
        except AssertionError as exc:
            raise AssertionError(f"{name}: {exc}") from None
    time.sleep(0.2)
    os.kill(decoy, 0)  # the decoy the record names is alive (stop signalled nothing)
    assert not (shared_root / "PWNED").exists()
    assert not any(p.exists() for p in planted.outs)
    assert planted.secret.read_text().startswith("step:1")


# ---------------------------------------------------------------- the loader is the one way to read a record


def test_run_json_is_parsed_in_the_loader_only() -> None:
    # "remove other ways of reading records": no module but runtime/records.py opens a run.json or builds a
    # RunRecord from text or a dict (launch builds new ones from its own values).
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "records.py" and path.parent.name == "runtime":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("model_validate", "model_validate_json"):
                assert not (isinstance(node.value, ast.Name) and node.value.id == "RunRecord"), path
            if isinstance(node, ast.Call) and "run.json" in ast.unparse(node):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                # the bundle takes the member with the record's own reader (RunRecord.read_file: this user's
                # file, no link); the watcher only asks whether its record is still there
                assert name in ("read_file", "exists", "add", "_read_record_file"), (
                    f"{path}:{node.lineno}: reads run.json itself: {ast.unparse(node)}")


def test_every_write_under_a_run_dir_goes_through_the_one_helper() -> None:
    # Outside runtime/records.py no code opens, writes or creates a directory under `<record>.dir`: it calls
    # RunRecord.open_file / write_file (no link followed, 0600, this user's directories only).
    writers = {"open", "write_text", "write_bytes", "mkdir", "write_file", "mkstemp", "touch"}
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "records.py" and path.parent.name == "runtime":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name not in writers:
                continue
            if isinstance(func, ast.Attribute) and name == "write_file" and ast.unparse(func.value) in (
                    "record", "self.record", "handle"):
                continue  # RunRecord.write_file itself
            text = ast.unparse(node)
            assert ".dir /" not in text and ".dir," not in text and "dir=record.dir" not in text, (
                f"{path}:{node.lineno}: {text}")


# ---------------------------------------------------------------- the watcher's relaunch


def _group_record(root: Path, runtime: str = "host") -> object:
    """Root's own record in a group-writable run dir (umask 002, a team's state dir) whose spec nobody replaced
    (N7, the group variant: the planted spec adds PYTHONPATH=<evil>)."""
    from verlctl.runtime.records import RunRecord

    rec = RunRecord.model_validate(_record_doc(root, runtime=runtime, run_log=str(root / "run.log")))
    rec.save()
    rec.dir.chmod(0o2775)
    spec = rec.dir / "spec.resolved.yaml"
    spec.write_text(f"container:\n  runtime: host\n  workdir: {root}\nenv:\n  PYTHONPATH: {root / 'evil'}\n")
    os.chown(spec, NOBODY, NOBODY)
    return rec


@needs_root
@pytest.mark.parametrize("backend", ["local", "slurm"])
def test_the_watchers_relaunch_refuses_a_spec_another_user_put_in_the_run_dir(
        shared_root: Path, monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    from verlctl.backends.base import Change
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import run_named

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(shared_root / "state"))
    rec = _group_record(shared_root, "host" if backend == "local" else "slurm")
    b = run_named(backend)
    with pytest.raises(VerlctlError) as err:
        b.relaunch(rec, Change("out of memory"))
    assert "belongs to uid 65534" in err.value.message and "nothing was run" in err.value.message
    assert not list(rec.dir.glob("attempt-*"))  # nothing rendered for the next attempt
    # and `watch` refuses the run the same way before it starts watching
    res = run_cli_many([["watch", RUN]], env=clean_env(VERLCTL_STATE_DIR=str(shared_root / "state")))[0]
    assert res.code != 0 and "belongs to uid 65534" in res.err and "Traceback" not in res.err, res.err
    assert "watching" not in res.out


@needs_root
def test_a_record_rewritten_by_another_user_after_loading_is_refused_at_the_relaunch(
        shared_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The watcher loaded a good record; then its run dir is made world-writable: the relaunch checks again.
    from verlctl.backends.base import Change
    from verlctl.errors import VerlctlError
    from verlctl.orchestrator.runs import run_named
    from verlctl.runtime.records import RunRecord, load_run

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(shared_root / "state"))
    RunRecord.model_validate(_record_doc(shared_root, run_log=str(shared_root / "run.log"))).save()
    rec = load_run(RUN)
    rec.dir.chmod(0o777)
    with pytest.raises(VerlctlError) as err:
        run_named("local").relaunch(rec, Change("out of memory"))
    assert "writable by every user" in err.value.message


# ---------------------------------------------------------------- N15: no file of a run dir through a link


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.write_text("VICTIM-LINE\n")
    v.chmod(0o600)
    return v


def _fresh_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    from verlctl.runtime.records import RunRecord

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    rec = RunRecord.model_validate(_record_doc(tmp_path, run_log=str(tmp_path / "run.log")))
    rec.save()
    return rec


def test_watcher_log_is_never_opened_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            victim: Path) -> None:
    from verlctl.orchestrator.watcher_process import spawn_watcher

    rec = _fresh_record(tmp_path, monkeypatch)
    os.symlink(victim, rec.dir / "watcher.log")  # type: ignore[attr-defined]
    with pytest.raises(OSError, match="symbolic link"):
        spawn_watcher(rec, None)  # type: ignore[arg-type]
    assert victim.read_text() == "VICTIM-LINE\n"
    assert rec.watcher_pid is None  # type: ignore[attr-defined]


def test_watcher_log_is_created_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = _fresh_record(tmp_path, monkeypatch)
    fd = rec.open_file("watcher.log", "append")  # type: ignore[attr-defined]
    os.close(fd)
    assert (rec.dir / "watcher.log").stat().st_mode & 0o777 == 0o600  # type: ignore[attr-defined]


@pytest.mark.parametrize("planted", ["file-link", "dir-link", "nobody-dir"])
def test_attempt_scripts_are_never_written_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   victim: Path, planted: str) -> None:
    rec = _fresh_record(tmp_path, monkeypatch)
    d = rec.dir / "attempt-2"  # type: ignore[attr-defined]
    if planted == "file-link":
        d.mkdir()
        os.symlink(victim, d / "start_verl.sh")
    elif planted == "dir-link":
        os.symlink(victim.parent, d)
    else:
        if os.geteuid() != 0:
            pytest.skip("plants a directory as nobody (needs root)")
        d.mkdir()
        os.chown(d, NOBODY, NOBODY)
    try:
        rec.write_file("attempt-2/start_verl.sh", b"echo next attempt\n")  # type: ignore[attr-defined]
    except OSError:
        assert planted != "file-link"  # a link in place of the file is replaced, never followed
    else:
        assert planted == "file-link"
        written = d / "start_verl.sh"
        assert not written.is_symlink() and written.stat().st_mode & 0o777 == 0o600
    assert victim.read_text() == "VICTIM-LINE\n"
    assert not (victim.parent / "start_verl.sh").exists()


def test_slurm_options_are_never_written_through_a_planted_link(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 victim: Path) -> None:
    from verlctl.orchestrator import slurm_run

    rec = _fresh_record(tmp_path, monkeypatch)
    os.symlink(victim, rec.dir / "slurm-options.json")  # type: ignore[attr-defined]
    slurm_run._save_options(rec, slurm_run.SlurmOptions())  # type: ignore[arg-type]
    assert victim.read_text() == "VICTIM-LINE\n"
    assert not (rec.dir / "slurm-options.json").is_symlink()  # type: ignore[attr-defined]
    assert slurm_run.load_options(rec) == slurm_run.SlurmOptions()  # type: ignore[arg-type]


def test_a_new_run_dir_is_private_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = os.umask(0o002)
    try:
        rec = _fresh_record(tmp_path, monkeypatch)
    finally:
        os.umask(old)
    assert rec.dir.stat().st_mode & 0o777 == 0o700  # type: ignore[attr-defined]
    assert (rec.dir / "run.json").stat().st_mode & 0o777 == 0o600  # type: ignore[attr-defined]


def test_a_group_writable_run_dir_of_this_users_is_used_with_a_warning(shared_root: Path) -> None:
    # umask 002: a run dir of this user's that its group can write is not refused (each file in it is still
    # read only when it is this user's); `stop` says the group could change it.
    from verlctl.runtime.records import RunRecord

    state = shared_root / "state"
    env = clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS="250")
    os.environ["VERLCTL_STATE_DIR"] = str(state)
    try:
        RunRecord.model_validate(_record_doc(shared_root, run_log=str(shared_root / "run.log"))).save()
    finally:
        del os.environ["VERLCTL_STATE_DIR"]
    (state / "runs" / RUN).chmod(0o2770)
    status, stop = run_cli_many([["status", RUN], ["stop", RUN, "--grace", "1"]], env=env)
    assert status.code == 0 and "not trusted" not in status.err, status.err
    assert stop.code == 0, stop.err
    assert "writable by its group" in stop.out + stop.err, stop.out + stop.err
