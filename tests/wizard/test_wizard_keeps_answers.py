"""The wizard never loses the user's work: a declined overwrite offers another file, a write error keeps the
answers (one line, a recovery file), answers equal to a default are saved, the final re-check reopens the
round that can fix a refused value (features included) and never loops; its defaults are nobody's personal
paths, and the default container is a new one (reusing one shows who created it and what it mounts)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pexpect
import pytest
import yaml
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from test_wizard_cli import spawn, step
from verlctl.errors import VerlctlError
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.wizard import machine_view as mv
from wizard_support import CLEAR, DOWN, ENTER, RUN, drive, make_world

EVERY_DEFAULT = RUN + ENTER * 20  # every question of a world with one model, two parquet files, 8 free NPUs


def run_init(keys: str, machine: Any, out: Path, config: Path | None = None) -> tuple[int | None, str, Any]:
    """`verlctl init`'s flow on a pipe input: (exit code or None, what it printed, the prompter)."""
    import tempfile

    from verlctl.wizard.flow import init_flow
    from verlctl.wizard.prompter import Prompter

    state = Path(tempfile.mkdtemp(prefix="verlctl-test-machine-")) / "machine.json"
    state.write_text(machine.model_dump_json())
    buf = io.StringIO()
    console = Console(file=buf, width=220, color_system=None)
    with create_pipe_input() as inp:
        inp.send_text(keys)
        inp.close()
        prompter = Prompter(input=inp, output=DummyOutput())
        code = init_flow(config, {}, {}, out=out, ask_all=False, yes=False, force=False, detect=False,
                         machine_file=state, scan_roots=None, budget_s=3.0, console=console, prompter=prompter,
                         interactive=True, environ={})
    return code, buf.getvalue(), prompter


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    return make_world(tmp_path / "world")


# ---------------------------------------------------------------- writing the spec


def test_declining_to_overwrite_offers_another_file_and_keeps_the_answers(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run.yaml"
    out.write_text("mine\n")
    code, text, prompter = run_init(EVERY_DEFAULT + "y" + "n" + ENTER, world.machine, out)
    assert code == 0, text
    assert out.read_text() == "mine\n"
    assert prompter.asked[-3:] == [f"Write the spec to {out}?", f"{out} exists: overwrite it?",
                                   f"{out} is kept as it is. Write the spec to another file"]
    other = tmp_path / "run-2.yaml"  # the offered name
    assert f"wrote {other}; repeat the run with: verlctl launch -c {other} --yes" in " ".join(text.split())
    assert load_spec(other, environ={}).spec.paths.model == str(world.model)


def test_a_write_error_after_every_answer_is_one_line_and_keeps_them(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    from test_check_machine import mount_tmpfs

    ro = tmp_path / "ro"
    mount_tmpfs(ro, "ro,size=1m")
    try:
        with pytest.raises(VerlctlError) as info:
            run_init(EVERY_DEFAULT + "y", world.machine, ro / "run.yaml")
    finally:
        import subprocess

        subprocess.run(["umount", "-l", str(ro)], check=False)
    msg = info.value.message
    assert "\n" not in msg
    assert msg.startswith(f"cannot write {ro / 'run.yaml'}: Read-only file system: nothing was written; "
                          "the answers are kept in ")
    kept = Path(msg.split("the answers are kept in ", 1)[1].split(" (write them with", 1)[0])
    assert kept.parent == tmp_path / "state" / "wizard" and (kept.stat().st_mode & 0o777) == 0o600
    assert f"(write them with: verlctl init -c {kept} -o FILE)" in msg
    again = load_spec(kept, environ={})
    assert again.spec.paths.model == str(world.model) and again.spec.train.tensor_parallel == 4
    assert make_plan(again).ok


def test_a_write_error_in_a_terminal_is_one_line_without_a_traceback(tmp_path: Path) -> None:
    from test_check_machine import mount_tmpfs

    w = make_world(tmp_path / "world")
    state = tmp_path / "state.json"
    state.write_text(w.machine.model_dump_json())
    ro = tmp_path / "ro"
    mount_tmpfs(ro, "ro,size=1m")
    try:
        child, log = spawn(["init", "--machine", str(state), "-o", str(ro / "run.yaml")], tmp_path,
                           VERLCTL_STATE_DIR=str(tmp_path / "vstate"))
        for q in ("verl version", "Algorithm", "Training backend (strategy)", "Mode", "Single node or multi-node?",
                  "NPUs to train on", "Model (a Hugging Face model directory)",
                  "Training data (parquet)", "Validation data (parquet)", "Checkpoint directory",
                  "Container: reuse one or create a new one", "Name of the new container",
                  "Image for the new container", "http_proxy", "https_proxy", "Log to SwanLab?",
                  "Choose the features by", "Feature mask", "Training steps", "Batch size", "Learning rate",
                  "Tensor parallel size (TP)", "Pipeline parallel size (PP)", "Responses per prompt (n)"):
            step(child, q, ENTER)
        step(child, "Write the spec to", "y")
        child.expect(pexpect.EOF)
        child.close()
    finally:
        import subprocess

        subprocess.run(["umount", "-l", str(ro)], check=False)
    transcript = log.getvalue().decode(errors="replace")
    assert child.exitstatus == 2, transcript[-3000:]
    assert "Traceback" not in transcript and "OSError" not in transcript
    tail = transcript.split("Write the spec to", 1)[1]
    errors = [ln for ln in tail.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "Read-only file system" in errors[0] and "the answers are kept in" in errors[0]
    assert list((tmp_path / "vstate" / "wizard").glob("answers-*.yaml"))


# ---------------------------------------------------------------- answers equal to a default


def test_answers_equal_to_a_default_are_saved_and_not_asked_again(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "run.yaml"
    code, text, _p = run_init(EVERY_DEFAULT + "y", world.machine, out)
    assert code == 0
    # The checklist lists every directory a launch will create, host side and container side.
    flat = " ".join(text.split())
    assert (f"later, `verlctl launch` will create directory {tmp_path}/checkpoints on this host (paths.checkpoints, "
            f"with {tmp_path}/checkpoints/verlctl/dapo_Qwen3-0.6B_megatron below it, mounted into the container at "
            "the same path)") in flat
    assert f"create directory {tmp_path}/logs on this host (paths.logs" in flat
    assert "create directory /verl/.verlctl/runs/<run id> inside the container" in flat
    assert f"create directory {tmp_path}/state/runs/<run id> on this host (the run record)" in flat
    assert "checkpoints " in flat and ": on the host, mounted at the same path" in flat
    doc = yaml.safe_load(out.read_text())
    assert doc["cluster"]["nodes"] == []  # "single node", answered
    assert doc["train"] == {"steps": 4, "train_batch_size": 32, "lr": 1e-6, "tensor_parallel": 4,
                            "pipeline_parallel": 2, "responses_per_prompt": 8}
    assert doc["logging"]["swanlab"]["enabled"] is False
    assert doc["container"]["name"] == "verlctl"
    assert doc["paths"]["checkpoints"] == f"{tmp_path}/checkpoints/verlctl/dapo_Qwen3-0.6B_megatron"
    # `init -c` with that file asks nothing again: every question was answered.
    d = drive("", world.machine, config=out)
    assert d.prompter.asked == []
    assert d.resolved.spec == load_spec(out, environ={}).spec


# ---------------------------------------------------------------- the final re-check


def vpp_config(tmp_path: Path) -> Path:
    cfg = tmp_path / "vpp.yaml"
    cfg.write_text(yaml.safe_dump({"features": {"mask": "1100001"}}))  # vpp on: needs PP > 1
    return cfg


# Round 1 (6), round 2 (5), SwanLab off; features given by the file; TP 8 with 8 devices leaves PP 1 only,
# which vpp refuses: no PP fits, so PP 1 is accepted for now (the review's D5).
FIRST_PASS = RUN + ENTER * 6 + ENTER * 5 + ENTER + ENTER * 3 + CLEAR + "8" + ENTER + CLEAR + "1" + ENTER + ENTER


def test_the_recheck_reopens_the_features_round_for_a_feature_prerequisite(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(tmp_path / "kv8", kv=8)  # TP 8 fits 8 heads / 8 KV heads
    keys = FIRST_PASS + ENTER + CLEAR + "1100000" + ENTER + ENTER * 6  # vpp off, then round 5 as it is
    d = drive(keys, w.machine, config=vpp_config(tmp_path))
    assert "feature_prerequisite" in d.text
    assert "these answers need another look: round 4 (features), round 5 (hyperparameters)" in d.text
    assert d.prompter.asked.count("Feature mask") == 1  # given by the file: asked only when reopened
    assert d.resolved.spec.features.mask == "1100000" and d.resolved.spec.train.tensor_parallel == 8
    assert make_plan(d.resolved).ok


def test_the_recheck_stops_asking_after_two_passes(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    w = make_world(tmp_path / "kv8", kv=8)
    d = drive(FIRST_PASS + ENTER * 200, w.machine, config=vpp_config(tmp_path))  # Enter forever
    assert d.text.count("these answers need another look") == 2
    assert "are still refused: change them as the hints say" in d.text
    assert d.prompter.asked.count("Feature mask") == 2
    assert not make_plan(d.resolved).ok  # the caller shows the errors and writes / launches nothing


# ---------------------------------------------------------------- defaults


def test_swanlab_defaults_are_nobodys_personal_names(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    keys = (RUN + ENTER * 11 + "y" + "http://10.0.0.5:8000" + ENTER + DOWN + DOWN + ENTER  # offline
            + ENTER * 3 + ENTER * 2 + ENTER * 6)
    d = drive(keys, world.machine)
    spec = d.resolved.spec
    sw = spec.logging.swanlab
    assert sw.workspace is None and spec.logging.project == "verlctl"
    assert sw.log_dir == f"{spec.paths.logs}/swanlog" and spec.paths.logs.startswith(str(tmp_path))
    dumped = yaml.safe_dump(spec.model_dump(mode="json"))
    for word in ("h4380", "TrainingMaster", "verl_hlm", "/mnt/project"):
        assert word not in dumped


def test_a_container_that_lacks_a_mount_cannot_be_chosen_and_says_who_created_it(world) -> None:  # type: ignore[no-untyped-def]
    [jins] = mv.containers(world.machine)
    assert mv.container_owner(jins) == "not created by verlctl"
    assert "mounts nothing" in mv.container_title(jins)
    # Down then Enter: the foreign container without the mounts is disabled, so the new container is taken.
    d = drive(RUN + ENTER * 6 + DOWN + ENTER + ENTER * 13, world.machine)
    assert "Name of the new container" in d.prompter.asked and d.resolved.spec.container.name == "verlctl"


@pytest.mark.docker
def test_reusing_a_container_is_explicit_and_shows_its_creator_and_mounts(
    tmp_path: Path, world, container_factory: Any, test_image: str  # type: ignore[no-untyped-def]
) -> None:
    from verlctl.detect.docker_probe import DockerInfo, probe_docker

    c = container_factory(test_image, labels={"io.verlctl.run": "20261130-run-abcd", "io.verlctl.experiment": "exp"},
                          volumes={str(tmp_path): {"bind": str(tmp_path), "mode": "rw"}})
    info = probe_docker()
    assert isinstance(info, DockerInfo)
    mine = info.container(c.name)
    assert mine is not None and mine.labels["io.verlctl.run"] == "20261130-run-abcd"
    assert mine.mounts == [f"{tmp_path}:{tmp_path}"]
    assert mv.container_owner(mine) == "created by verlctl, run 20261130-run-abcd (exp)"
    machine = world.machine.model_copy(update={"docker": info.model_copy(update={"containers": [mine]})})
    # Enter alone creates a new container; reusing this one is an explicit Down.
    d = drive(RUN + ENTER * 6 + DOWN + ENTER + ENTER * 13, machine)
    assert d.resolved.spec.container.name == c.name and "Name of the new container" not in d.prompter.asked
    assert (f"reusing container {c.name}: created by verlctl, run 20261130-run-abcd (exp); "
            f"mounts {tmp_path}:{tmp_path}") in " ".join(d.text.split())



def test_init_offers_to_continue_from_the_answers_of_an_interrupted_init(tmp_path: Path, world) -> None:  # type: ignore[no-untyped-def]
    # U9: Ctrl-C at question 6 keeps the 5 answers; the next `init` offers them, asks only the rest, writes the
    # spec and removes the kept file.
    from verlctl.wizard.prompter import WizardInterrupted

    out = tmp_path / "run.yaml"
    with pytest.raises(WizardInterrupted) as info:
        run_init(RUN + ENTER * 5 + "\x03", world.machine, out)
    kept = tmp_path / "state" / "wizard" / "interrupted.yaml"
    assert kept.exists() and "offers to continue" in info.value.message and not out.exists()
    code, text, prompter = run_init("y" + ENTER * 15 + "y", world.machine, out)  # the image is asked (U10: no local image pre-filled)
    assert code == 0, text
    assert prompter.asked[0].startswith("An earlier `verlctl init` was interrupted"), text[:3000]
    assert "removed" not in text, text[:2000]
    assert "Single node or multi-node?" not in prompter.asked and "Validation data (parquet)" not in prompter.asked
    assert "Checkpoint directory" in prompter.asked and "Training steps" in prompter.asked  # what was not answered
    assert yaml.safe_load(out.read_text())["paths"]["model"] == str(world.model)
    assert not kept.exists()
