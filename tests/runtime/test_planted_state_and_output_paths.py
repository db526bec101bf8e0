"""The state dir and the output paths are input too (issue 22: A2, A15, A11, A9): records, links and files planted
in a state dir, by the same user and by another uid (``nobody``), never make verlctl write through a link, read a
file outside the run's own directory into a report or bundle, or call another user's record "damaged"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from conftest import FIXTURES, CliResult, clean_env, run_cli
from launch_support import write_run_files

NOBODY = 65534
SECRET = "ROOT-ONLY-SECRET-7c1e"
RUN = "20260101-000000-planted-aaaa"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another uid (needs root)")


def record_doc(run_id: str, **over: object) -> dict:
    doc = {
        "run_id": run_id, "created_at": time.time(), "runtime": "host", "workdir": "/tmp",
        "scripts_dir": f"/tmp/.verlctl/runs/{run_id}", "run_log": f"/tmp/verlctl-adv-no-such-{run_id}.log",
        "train_log": "", "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0",
    }
    doc.update(over)
    return doc


def plant(state: Path, run_id: str = RUN, uid: int | None = None, **over: object) -> Path:
    """A run dir with a run.json; owned by ``uid`` when given (the dir and the file), as that user would leave it."""
    d = state / "runs" / run_id
    d.mkdir(parents=True, exist_ok=True)
    (d / "run.json").write_text(json.dumps(record_doc(run_id, **over)), encoding="utf-8")
    if uid is not None:
        for p in (d, d / "run.json"):
            os.chown(p, uid, uid)
    return d


def shared_state(tmp_path: Path) -> Path:
    """A 1777 state dir (``runs`` too), as a team's shared state dir would be."""
    state = tmp_path / "state"
    (state / "runs").mkdir(parents=True)
    for p in (tmp_path, state, state / "runs"):
        os.chmod(p, 0o1777 if p != tmp_path else 0o755)
    return state


def root_secret(tmp_path: Path, name: str = "rootsecret.txt") -> Path:
    p = tmp_path / name
    p.write_text(SECRET + "\n")
    os.chmod(p, 0o600)
    return p


def cli(state: Path, *args: str, uid: int | None = None, cwd: Path | None = None) -> CliResult:
    env = clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS="250")
    if uid is None:
        return run_cli(*args, env=env, cwd=cwd)
    env["HOME"] = str(state)
    proc = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", sys.executable, "-m",
                           "verlctl", *args], capture_output=True, text=True, env=env, timeout=120, cwd=cwd)
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def no_traceback(res: CliResult) -> None:
    assert "Traceback" not in res.out + res.err, res.err


def tar_text(path: Path) -> str:
    out = []
    with tarfile.open(path) as tf:
        for m in tf.getmembers():
            f = tf.extractfile(m)
            if f is not None:
                out.append(f.read().decode(errors="replace"))
    return "\n".join(out)


# ---------------------------------------------------------------- A2: events.jsonl through a planted symlink


@pytest.mark.parametrize("uid", [None, pytest.param(NOBODY, marks=needs_root)], ids=["same-user", "nobody"])
def test_events_are_never_appended_through_a_planted_symlink(tmp_path: Path, uid: int | None) -> None:
    state = shared_state(tmp_path) if uid is not None else tmp_path / "state"
    d = plant(state)
    victim = root_secret(tmp_path, "victim.txt")
    before = victim.read_bytes()
    link = d / "events.jsonl"
    os.symlink(victim, link)
    if uid is not None:
        os.lchown(link, uid, uid)
    res = cli(state, "stop", RUN)
    no_traceback(res)
    assert victim.read_bytes() == before
    assert "symbolic link" in res.out + res.err, (res.out, res.err)


def test_events_append_still_works_and_is_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from verlctl.runtime.records import RunRecord

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    rec = RunRecord.model_validate(record_doc(RUN))
    rec.save()
    rec.event("one", n=1)
    rec.event("two", n=2)
    assert [e["event"] for e in rec.events()] == ["one", "two"]
    assert (rec.dir / "events.jsonl").stat().st_mode & 0o777 == 0o600


# ---------------------------------------------------------------- A15: every path of a record is validated


@pytest.mark.parametrize("uid", [None, pytest.param(NOBODY, marks=needs_root)], ids=["same-user", "nobody"])
@pytest.mark.parametrize("field", ["spec_file", "run_log", "train_log"])
def test_a_record_naming_any_file_embeds_nothing_in_report_or_bundle(tmp_path: Path, uid: int | None,
                                                                     field: str) -> None:
    state = shared_state(tmp_path) if uid is not None else tmp_path / "state"
    secret = root_secret(tmp_path)
    plant(state, uid=uid, **{field: str(secret)})
    rep, bun = tmp_path / "rep.html", tmp_path / "bun.tgz"
    for args, out in ((("report", RUN, "-o", str(rep)), rep), (("bundle", RUN, "-o", str(bun)), bun)):
        res = cli(state, *args)
        no_traceback(res)
        assert SECRET not in res.out + res.err
        assert res.code != 0 and not out.exists(), (res.out, res.err)
        # another user's record is refused for being theirs (the record gate), before any of its paths is looked at
        assert (field if uid is None else "belongs to uid 65534") in res.err, res.err
    res = cli(state, "list")
    if uid is None:
        assert f"{field} " in res.out and "damaged" in res.out, res.out
    else:
        assert "not trusted" in res.out, res.out


@pytest.mark.parametrize("name", ["spec.resolved.yaml", "events.jsonl", "start_verl.sh"])
def test_a_planted_symlink_in_a_record_is_not_followed(tmp_path: Path, name: str) -> None:
    state = tmp_path / "state"
    secret = root_secret(tmp_path)
    d = plant(state)
    os.symlink(secret, d / name)
    rep, bun = tmp_path / "rep.html", tmp_path / "bun.tgz"
    res = cli(state, "report", RUN, "-o", str(rep))
    no_traceback(res)
    assert res.code == 0, res.err
    assert SECRET not in rep.read_text()
    res = cli(state, "bundle", RUN, "-o", str(bun))
    no_traceback(res)
    assert res.code == 0, res.err
    assert SECRET not in tar_text(bun)


def test_a_host_run_log_planted_as_a_symlink_is_not_read(tmp_path: Path) -> None:
    state = tmp_path / "state"
    secret = root_secret(tmp_path)
    log = tmp_path / f"verlctl-{RUN}.log"
    os.symlink(secret, log)
    plant(state, run_log=str(log))
    rep = tmp_path / "rep.html"
    res = cli(state, "report", RUN, "-o", str(rep))
    no_traceback(res)
    assert SECRET not in res.out + res.err + (rep.read_text() if rep.exists() else "")
    res = cli(state, "logs", RUN)
    no_traceback(res)
    assert SECRET not in res.out + res.err


@pytest.mark.parametrize(("field", "value"), [
    ("spec_file", "../../x"), ("spec_file", "/etc/passwd"), ("run_log", "relative.log"), ("run_log", "/etc/shadow"),
    ("scripts_dir", "relative/dir"), ("workdir", "/verl\nx"), ("train_log", "/root/.ssh/id_rsa"),
])
def test_record_path_fields_are_validated(field: str, value: str) -> None:
    from pydantic import ValidationError

    from verlctl.runtime.records import RunRecord

    RunRecord.model_validate(record_doc(RUN))  # the valid base
    with pytest.raises(ValidationError, match=field):
        RunRecord.model_validate(record_doc(RUN, **{field: value}))


# ---------------------------------------------------------------- A11: another user's record


@pytest.fixture
def open_tmp():  # type: ignore[no-untyped-def]
    """A directory that another uid can traverse (pytest's own tmp root is 0700)."""
    import shutil
    import tempfile

    d = Path(tempfile.mkdtemp(prefix="verlctl-adv-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@needs_root
def test_another_users_record_is_named_as_theirs_not_damaged(open_tmp: Path) -> None:
    state = open_tmp / "state"
    d = plant(state)  # root's, run.json 0600 as `save` writes it
    os.chmod(d / "run.json", 0o600)
    for args in (("list",), ("status", RUN)):
        res = cli(state, *args, uid=NOBODY)
        no_traceback(res)
        text = res.out + res.err
        assert "uid 0 (root)" in text and "not readable by you" in text, text
        assert "damaged" not in text and "repair or remove" not in text, text


# ---------------------------------------------------------------- A9: one -o rule for every command


def base_spec(tmp_path: Path) -> Path:
    p = tmp_path / "base.yaml"
    p.write_text("paths: {model: /m/Qwen3-8B, train_files: /d/t.parquet, val_files: /d/v.parquet}\n")
    return p


def file_commands(tmp_path: Path, state: Path) -> dict[str, list[str]]:
    plant(state)
    base = str(base_spec(tmp_path))
    return {
        "report": ["report", RUN],
        "bundle": ["bundle", RUN],
        "export slurm": ["export", "slurm", "-c", base],
        "export rayjob": ["export", "rayjob", "-c", base, "--pvc", "ckpt"],
        "import": [],
        # init's verdict reads this host's files (model_missing, datasets): a real model dir and parquet files
        "init": ["init", "-c", base, "--yes", "--no-detect",
                 *[a for k, v in write_run_files(tmp_path / "files").items() for a in ("--set", f"{k}={v}")]],
    }


ROOT_SCRIPT = FIXTURES


@pytest.fixture(scope="module")
def a_script() -> Path:
    scripts = sorted(p for p in ROOT_SCRIPT.rglob("*.sh") if "verl" in p.read_text(errors="replace"))
    assert scripts, "a verl launch script among the fixtures"
    return scripts[0]


@pytest.mark.parametrize("name", ["report", "bundle", "export slurm", "export rayjob", "import", "init"])
def test_no_o_file_replaces_an_existing_file_without_force(tmp_path: Path, name: str, a_script: Path) -> None:
    state = tmp_path / "state"
    argv = file_commands(tmp_path, state)[name]
    if name == "import":
        argv = ["import", str(a_script)]
    precious = tmp_path / "precious.txt"
    precious.write_text("precious\n")
    res = cli(state, *argv, "-o", str(precious), cwd=tmp_path)
    no_traceback(res)
    assert res.code != 0, (res.out, res.err)
    assert precious.read_text() == "precious\n"
    assert "exists" in res.err and "--force" in res.err, res.err
    res = cli(state, *argv, "-o", str(precious), "--force", cwd=tmp_path)
    no_traceback(res)
    assert res.code == 0, (res.out, res.err)
    assert precious.read_bytes() != b"precious\n"


@pytest.mark.parametrize("argv", [
    ["report", RUN], ["bundle", RUN], ["export", "slurm", "-c", "BASE"], ["export", "rayjob", "-c", "BASE"],
    ["plan", "-c", "BASE"], ["launch", "--dry-run", "-c", "BASE", "--set", "container.runtime=host"], ["init", "-c", "BASE", "--yes", "--no-detect"],
    ["import", "SCRIPT"], ["export-hf", RUN],
], ids=lambda a: " ".join(a[:2]))
def test_an_empty_o_is_refused_and_nothing_lands_in_the_cwd(tmp_path: Path, argv: list[str], a_script: Path) -> None:
    state = tmp_path / "state"
    plant(state)
    base = str(base_spec(tmp_path))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    argv = [base if a == "BASE" else str(a_script) if a == "SCRIPT" else a for a in argv]
    res = cli(state, *argv, "-o", "", cwd=cwd)
    no_traceback(res)
    assert res.code != 0
    assert "-o: the path is empty" in res.err, res.err
    assert list(cwd.iterdir()) == []


def test_o_dir_replaces_the_files_of_its_set_only_with_force(tmp_path: Path) -> None:
    """``plan -o DIR`` (``launch --dry-run -o DIR`` writes through the same Rendered.write / files.write_set)."""
    argv = ["plan"]
    state = tmp_path / "state"
    base = str(base_spec(tmp_path))
    out = tmp_path / "plan"
    out.mkdir()
    (out / "start_verl.sh").write_text("precious\n")
    (out / "notes.txt").write_text("mine\n")
    res = cli(state, *argv, "-c", base, "-o", str(out))
    no_traceback(res)
    assert res.code != 0
    assert "start_verl.sh" in res.err and "--force" in res.err, res.err
    assert (out / "start_verl.sh").read_text() == "precious\n"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "start_verl.sh"]
    res = cli(state, *argv, "-c", base, "-o", str(out), "--force")
    assert res.code == 0, res.err
    assert (out / "start_verl.sh").read_text() != "precious\n"
    assert (out / "notes.txt").read_text() == "mine\n"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt", "run_training.sh", "spec.resolved.yaml",
                                                     "start_verl.sh"]


def test_o_never_replaces_a_special_file_even_with_force(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    res = cli(tmp_path / "state", "export", "slurm", "-c", str(base_spec(tmp_path)), "-o", str(fifo), "--force")
    no_traceback(res)
    assert res.code != 0 and "not a regular file" in res.err, res.err
    assert fifo.is_fifo()


def test_every_o_option_goes_through_the_one_parser() -> None:
    """Every -o/--out of every command is parsed by options.out_path (so an empty one is refused)."""
    import typer

    from verlctl.cli import app
    from verlctl.commands.options import out_path

    def commands(group):  # type: ignore[no-untyped-def]
        for name, cmd in getattr(group, "commands", {}).items():
            yield name, cmd
            yield from commands(cmd)

    root = typer.main.get_command(app)
    seen = []
    for name, cmd in commands(root):
        for param in cmd.params:
            if "-o" in getattr(param, "opts", []) or "--out" in getattr(param, "opts", []):
                seen.append(name)
                assert getattr(param.type, "func", None) is out_path, f"{name}: -o without out_path"
    assert {"plan", "launch", "report", "bundle", "slurm", "rayjob", "init", "import", "export-hf"} <= set(seen)
