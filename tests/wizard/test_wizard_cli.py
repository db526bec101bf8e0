"""The real CLI: `verlctl init` in a real terminal (pexpect pty) through every round to the checklist;
Ctrl-C; stdin that is not a terminal; `verlctl launch` declined at the checklist on a real Docker engine."""

from __future__ import annotations

import io
import stat
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from verlctl.errors import ExitCode
from verlctl.spec.model import DEFAULT_IMAGE
from wizard_support import cli_argv, cli_env, make_world

from conftest import run_cli

KEY = "sk-typed-in-the-terminal-7731"
ENTER = "\r"
DOWN = "\x1b[B"
CLEAR = "\x15"
#: Every wait below ends on its event: the text it expects, or the child's exit (pexpect raises EOF at once).
#: This ceiling only ends a child that hangs alive; a slow, loaded machine never reaches it.
HANG_S = 600


def spawn(args: list[str], cwd: Path, **env: str) -> tuple[pexpect.spawn, io.BytesIO]:
    log = io.BytesIO()
    argv = cli_argv(*args)
    child = pexpect.spawn(argv[0], argv[1:], cwd=str(cwd), env=cli_env(**env), dimensions=(60, 200), timeout=HANG_S)
    child.logfile_read = log
    return child, log


def step(child: pexpect.spawn, question: str, keys: str) -> None:
    child.expect_exact(question)
    child.send(keys)


def answer_every_round(child: pexpect.spawn, model: Path) -> None:
    # Round 1: what runs (the test image's verl is not local here: the defaults), then the machine
    step(child, "verl version", ENTER)
    step(child, "Algorithm", ENTER)
    step(child, "Training backend (strategy)", ENTER)
    step(child, "Mode", ENTER)
    step(child, "Single node or multi-node?", ENTER)
    step(child, "NPUs to train on", ENTER)
    step(child, "Model (a Hugging Face model directory)", DOWN + ENTER)  # type a path
    step(child, "Model path", CLEAR + "/no/such/model" + ENTER)
    child.expect_exact("/no/such/model does not exist")  # refused on screen, asked again
    child.send(CLEAR + str(model) + ENTER)
    child.expect_exact("8 heads/4 KV, 8 layers")  # the model's shape, read from its config.json
    step(child, "Training data (parquet)", ENTER)
    step(child, "Validation data (parquet)", ENTER)
    step(child, "Checkpoint directory", CLEAR + "/ckpt/wizard" + ENTER)
    # Round 2
    step(child, "Container: reuse one or create a new one", ENTER)  # a new container: the default
    step(child, "Name of the new container", CLEAR + "exp-tty" + ENTER)
    step(child, "Image for the new container", ENTER)  # pull the default (listed first, U10)
    step(child, "http_proxy inside the container", ENTER)
    step(child, "https_proxy inside the container", ENTER)
    # Round 3
    step(child, "Log to SwanLab?", "y")
    step(child, "SwanLab host", "10.0.0.5:8000" + ENTER)
    child.expect_exact("invalid URL '10.0.0.5:8000': expected http(s)://host[:port]")
    child.send(CLEAR + "http://10.0.0.5:8000" + ENTER)
    step(child, "SwanLab mode", ENTER)
    step(child, "SwanLab API key", KEY + ENTER)
    step(child, "SwanLab workspace", ENTER)
    step(child, "SwanLab log directory", ENTER)
    step(child, "Project name", ENTER)
    # Round 4
    step(child, "Choose the features by", ENTER)
    step(child, "Feature mask", CLEAR + "1234567" + ENTER)
    child.expect_exact("'1234567' is not a mask")
    child.send(CLEAR + "1110010" + ENTER)
    child.expect_exact("optimizer offload is forced off")
    # Round 5
    step(child, "Training steps", CLEAR + "6" + ENTER)
    step(child, "Batch size (prompts per step)", ENTER)
    step(child, "Learning rate", ENTER)
    step(child, "Tensor parallel size (TP)", CLEAR + "8" + ENTER)
    child.expect_exact("TP 8 refused (valid TP here: 1, 2, 4)")
    child.send(CLEAR + "2" + ENTER)
    step(child, "Pipeline parallel size (PP)", ENTER)
    step(child, "Responses per prompt (n)", ENTER)


def checklist_parts() -> list[str]:
    # the checklist at a glance (issue 24): what differs from the defaults, then the Summary with sources
    return ["Settings that differ from the defaults", "exp-tty", DEFAULT_IMAGE, "/ckpt/wizard",
            "Features", "swap_optimizer", "**********", "Summary",
            "NPU × 8 per node", "steps 6, batch 32, lr 1e-06, TP 2, PP 2, n 8", "key **********",
            "verl 0.7.0", "detected", "typed",
            "These actions will be taken, in order", "the SwanLab API key is not written to the file"]


def test_init_in_a_terminal_every_round_then_no_writes_nothing_then_yes_writes_the_spec(tmp_path: Path) -> None:
    w = make_world(tmp_path / "world")
    state = tmp_path / "state.json"
    state.write_text(w.machine.model_dump_json())
    cwd = tmp_path / "cwd"
    out = tmp_path / "out"
    cwd.mkdir()
    out.mkdir()
    target = out / "run.yaml"

    child, log = spawn(["init", "--machine", str(state), "-o", str(target)], cwd)
    answer_every_round(child, w.model)
    step(child, f"Write the spec to {target}?", "n")
    child.expect_exact("nothing was written")
    child.expect(pexpect.EOF)
    child.close()
    transcript = log.getvalue().decode(errors="replace")
    assert child.exitstatus == ExitCode.DECLINED, transcript[-3000:]
    for part in checklist_parts():
        assert part in transcript, part
    assert KEY not in transcript and "Traceback" not in transcript
    assert list(out.iterdir()) == [] and list(cwd.iterdir()) == []

    child, log = spawn(["init", "--machine", str(state), "-o", str(target)], cwd)
    answer_every_round(child, w.model)
    step(child, f"Write the spec to {target}?", "y")
    child.expect(pexpect.EOF)
    child.close()
    transcript = log.getvalue().decode(errors="replace")
    assert child.exitstatus == 0, transcript[-3000:]
    # (wrapped between words, never inside one, where it is longer than the terminal)
    assert f"repeat the run with: verlctl launch -c {target} --yes" in " ".join(transcript.split())
    assert KEY not in transcript
    assert [p.name for p in out.iterdir()] == ["run.yaml"] and list(cwd.iterdir()) == []
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    text = target.read_text()
    assert KEY not in text
    doc = yaml.safe_load(text)
    assert doc["container"] == {"name": "exp-tty", "image": DEFAULT_IMAGE, "pull": True,
                                "proxy": {"http": None, "https": None}}  # every answer, 'none' too
    assert doc["features"]["mask"] == "1110010"
    assert doc["train"] == {"steps": 6, "train_batch_size": 32, "lr": 1e-6, "tensor_parallel": 2,
                            "pipeline_parallel": 2, "responses_per_prompt": 8}
    assert doc["paths"]["model"] == str(w.model) and doc["paths"]["checkpoints"] == "/ckpt/wizard"
    assert doc["logging"]["swanlab"]["host"] == "http://10.0.0.5:8000" and "api_key" not in doc["logging"]["swanlab"]

    # The saved spec repeats the run: `plan -c` (no questions) with the key from the environment only.
    res = run_cli("plan", "-c", str(target), "--json", env=cli_env(SWANLAB_API_KEY=KEY))
    assert res.code == 0, res.err
    values = res.json()["values"]
    assert values["container.name"]["value"] == "exp-tty" and values["train.tensor_parallel"]["value"] == 2
    assert values["logging.swanlab.api_key"]["value"] == "**********"


def test_ctrl_c_in_a_terminal_exits_130_with_one_line_and_changes_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path / "world")
    state = tmp_path / "state.json"
    state.write_text(w.machine.model_dump_json())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for answered in (0, 2, 11):
        kept_dir = tmp_path / f"state-{answered}"
        child, log = spawn(["init", "--machine", str(state), "-o", "run.yaml"], cwd, VERLCTL_STATE_DIR=str(kept_dir))
        questions = ["verl version", "Algorithm", "Training backend (strategy)", "Mode",
                     "Single node or multi-node?", "NPUs to train on", "Model (a Hugging Face model directory)",
                     "Training data (parquet)", "Validation data (parquet)", "Checkpoint directory",
                     "Container: reuse one or create a new one", "Name of the new container"]
        for q in questions[:answered]:
            step(child, q, ENTER)
        child.expect_exact(questions[answered])
        child.sendcontrol("c")
        child.expect(pexpect.EOF)
        child.close()
        transcript = log.getvalue().decode(errors="replace")
        assert child.exitstatus == 130, transcript[-2000:]
        words = " ".join(transcript.split())
        if answered == 0:
            assert transcript.count("interrupted: nothing was changed") == 1
        else:  # U9: the answers so far are kept, and the next `verlctl init` offers them
            assert "interrupted: nothing was written; the" in words and "offers to continue from them" in words
            assert (kept_dir / "wizard" / "interrupted.yaml").exists()
        assert "Traceback" not in transcript and "KeyboardInterrupt" not in transcript
        assert list(cwd.iterdir()) == []


def _one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def test_stdin_not_a_terminal_fails_with_the_missing_values_for_init_and_launch(tmp_path: Path) -> None:
    for args in (["init"], ["launch"]):
        proc = subprocess.run(cli_argv(*args), input="", capture_output=True, text=True, cwd=tmp_path,
                              env=cli_env(), timeout=120)
        line = _one_line_error(proc.stderr)
        assert proc.returncode == 2, (args, proc.stderr)
        assert line.startswith("error: missing required values and stdin is not a terminal"), line
        for path in ("paths.model", "paths.train_files", "paths.val_files"):
            assert path in line
        assert "--set paths.model=" in line
        assert list(tmp_path.iterdir()) == []


def test_init_without_a_terminal_needs_yes_and_never_overwrites_silently(tmp_path: Path) -> None:
    w = make_world(tmp_path / "world")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    given = ["--set", f"paths.model={w.model}", "--set", f"paths.train_files={w.train}",
             "--set", f"paths.val_files={w.val}", "--set", "train.tensor_parallel=2"]

    def init(*extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(cli_argv("init", *given, *extra), input="", capture_output=True, text=True,
                              cwd=cwd, env=cli_env(**env), timeout=120)

    proc = init()
    assert proc.returncode == 2 and "pass --yes" in _one_line_error(proc.stderr)
    assert list(cwd.iterdir()) == []

    proc = init("--yes", SWANLAB_API_KEY=KEY, SWANLAB_HOST="http://10.0.0.5:8000")
    assert proc.returncode == 0, proc.stderr
    text = (cwd / "run.yaml").read_text()
    assert KEY not in text and yaml.safe_load(text)["logging"]["swanlab"]["host"] == "http://10.0.0.5:8000"

    (cwd / "run.yaml").write_text("mine\n")
    proc = init("--yes")
    assert proc.returncode == 2 and "run.yaml exists: nothing was written" in _one_line_error(proc.stderr)
    assert (cwd / "run.yaml").read_text() == "mine\n"
    proc = init("--yes", "--force")
    assert proc.returncode == 0 and yaml.safe_load((cwd / "run.yaml").read_text())["train"]["tensor_parallel"] == 2

    proc = init("--yes", "-o", "bad.yaml", "--set", "train.tensor_parallel=3")
    assert proc.returncode == 2 and not (cwd / "bad.yaml").exists()
    assert proc.stderr.strip().splitlines()[-1] == "error: the spec has errors (listed above): nothing was written"


@pytest.mark.docker
def test_launch_declined_at_the_checklist_changes_nothing(tmp_path: Path, docker_engine, test_image) -> None:  # type: ignore[no-untyped-def]
    from launch_support import make_launch_env

    lenv = make_launch_env(tmp_path, test_image)
    state = lenv.state
    log = io.BytesIO()
    child = pexpect.spawn(
        sys.executable, ["-m", "verlctl", "launch", "-c", str(lenv.spec_file)],
        cwd=str(tmp_path), env={**lenv.env(), "TERM": "xterm-256color", "PROMPT_TOOLKIT_NO_CPR": "1"},
        dimensions=(60, 200), timeout=HANG_S,
    )
    child.logfile_read = log
    try:
        child.expect_exact("Launch with these settings?")
    except pexpect.EOF:
        raise AssertionError(log.getvalue().decode(errors="replace")[-4000:]) from None
    child.send("n")
    child.expect_exact("nothing was changed")
    child.expect(pexpect.EOF)
    child.close()
    transcript = log.getvalue().decode(errors="replace")
    assert child.exitstatus == ExitCode.DECLINED, transcript[-3000:]
    assert f"create container {lenv.name}" in transcript and "Summary" in transcript
    # Every directory the launch would create is listed, host side and container side; none was created.
    flat = " ".join(transcript.split())
    assert f"create directory {lenv.root / 'ckpt'} on this host (paths.checkpoints" in flat
    assert f"create directory {lenv.root / 'logs'} on this host (paths.logs" in flat
    assert "create directory /verl/.verlctl/runs/" in flat and "inside the container" in flat
    assert f"create directory {state / 'runs'}" in flat or f"create directory {state}" in flat
    assert not (lenv.root / "ckpt").exists() and not (lenv.root / "logs").exists()
    # (other tests' containers come and go on this engine: only this launch's name is compared)
    assert not docker_engine.containers.list(all=True, filters={"name": lenv.name})
    assert not state.exists() or not any(state.rglob("*"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "models", "run.yaml"]


def test_init_piped_to_tee_draws_the_questions_on_the_terminal_not_into_the_pipe(tmp_path: Path) -> None:
    """`verlctl init | tee log` (wizard review D13): stdout is a pipe, stdin and stderr the terminal. The
    questions are drawn on the terminal (stderr); the pipe gets the plain-text checklist and result lines,
    with no terminal control codes and no question."""
    import shlex

    w = make_world(tmp_path / "world")
    state = tmp_path / "state.json"
    state.write_text(w.machine.model_dump_json())
    target = tmp_path / "run.yaml"
    piped = tmp_path / "piped.log"
    argv = cli_argv("init", "--machine", str(state), "-o", str(target))
    log = io.BytesIO()
    child = pexpect.spawn("bash", ["-c", f"{shlex.join(argv)} | tee {shlex.quote(str(piped))}"],
                          cwd=str(tmp_path), env=cli_env(), dimensions=(60, 200), timeout=HANG_S)
    child.logfile_read = log
    answer_every_round(child, w.model)
    step(child, f"Write the spec to {target}?", "y")
    child.expect(pexpect.EOF)
    child.close()
    transcript = log.getvalue().decode(errors="replace")
    assert child.exitstatus == 0, transcript[-3000:]
    assert target.is_file()
    text = piped.read_text(encoding="utf-8", errors="replace")
    assert "\x1b" not in text, repr(text[:400])
    assert "Checklist" in text and f"wrote {target}" in " ".join(text.split())
    for question in ("Single node or multi-node?", "Model path", "Write the spec to"):
        assert question not in text and question in transcript


def test_a_long_refusal_wraps_under_the_prompt_instead_of_being_cut_at_60_columns(tmp_path: Path) -> None:
    # U12: in a 60-column terminal the TP refusal (about 200 characters) is shown whole, over several lines.
    import re

    w = make_world(tmp_path / "world")
    state = tmp_path / "state.json"
    state.write_text(w.machine.model_dump_json())
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    log = io.BytesIO()
    argv = cli_argv("init", "--machine", str(state), "-o", str(tmp_path / "run.yaml"))
    env = {**cli_env(), "COLUMNS": "60", "LINES": "40"}
    child = pexpect.spawn(argv[0], argv[1:], cwd=str(cwd), env=env, dimensions=(40, 60), timeout=HANG_S)
    child.logfile_read = log
    try:
        for question in ("verl version", "Algorithm", "Training backend (strategy)", "Mode",
                         "Single node or multi-node?", "NPUs to train on", "Model (a Hugging Face", "Training data",
                         "Validation data", "Checkpoint directory", "Container: reuse", "Name of the new container",
                         "Image for the new container", "http_proxy", "https_proxy", "Log to SwanLab?",
                         "Choose the features by", "Feature mask", "Training steps", "Batch size", "Learning rate"):
            step(child, question, ENTER)  # as pre-filled
        step(child, "Tensor parallel size (TP)", CLEAR + "3" + ENTER)
        child.expect_exact("refused")
        child.expect(r"divid|divisible|requir")
        # whatever the reason says, its last word reaches the screen: the line is not cut at column 60
        child.expect(r"\)|\d")
        screen = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", " ", log.getvalue().decode(errors="replace"))
        reason = screen[screen.index("TP 3 refused"):]
        assert "valid TP here" in reason, reason[:400]
        words = " ".join(reason.split())
        assert re.search(r"TP 3 refused \(valid TP here: [0-9, ]+\): .{40,}", words), words[:400]
    finally:
        child.sendcontrol("c")
        child.expect(pexpect.EOF)
        child.close()
