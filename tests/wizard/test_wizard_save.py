"""Saving the answers as a spec YAML (no secrets, 0644, no silent overwrite) and the launch confirmation."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

import pytest
import yaml
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from verlctl.errors import VerlctlError
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec
from verlctl.spec.sources import Source
from verlctl.wizard.prompter import Prompter
from verlctl.wizard.save import save_spec, spec_document
from wizard_support import CLEAR, ENTER, RUN, drive, make_world

KEY = "sk-never-in-files-0042"

# New container "exp-1" pulling the default image, SwanLab cloud with a key, features by mask, TP 2.
SWANLAB_RUN = (
    RUN + ENTER * 6
    + ENTER + CLEAR + "exp-1" + ENTER + ENTER + ENTER + ENTER  # the image: pull the default (listed first)
    + "y" + "http://10.0.0.5:8000" + ENTER + ENTER + KEY + ENTER + ENTER + ENTER + ENTER
    + ENTER + CLEAR + "1110000" + ENTER
    + ENTER * 3 + CLEAR + "2" + ENTER + ENTER * 2
)


@pytest.fixture
def wizard_run(tmp_path: Path):  # type: ignore[no-untyped-def]
    w = make_world(tmp_path)
    return w, drive(SWANLAB_RUN, w.machine)


def test_saved_spec_repeats_the_run_without_the_key(tmp_path: Path, wizard_run) -> None:  # type: ignore[no-untyped-def]
    _w, d = wizard_run
    r = d.resolved
    assert r.spec.logging.swanlab.api_key.get_secret_value() == KEY
    out = tmp_path / "out" / "run.yaml"
    out.parent.mkdir()
    old = os.umask(0o077)
    try:
        notes = save_spec(out, r)
    finally:
        os.umask(old)
    text = out.read_text()
    assert KEY not in text
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert any("SWANLAB_API_KEY" in n for n in notes)
    doc = yaml.safe_load(text)
    assert "api_key" not in doc["logging"]["swanlab"] and doc["logging"]["swanlab"]["host"] == "http://10.0.0.5:8000"
    assert doc["features"]["mask"] == "1110000"  # a string: leading zeros survive
    # Every answer is listed, also one equal to a default (tests/wizard/test_wizard_keeps_answers.py) …
    assert doc["train"] == {"steps": 4, "train_batch_size": 32, "lr": 1e-6, "tensor_parallel": 2,
                            "pipeline_parallel": 2, "responses_per_prompt": 8}
    # … but nothing that was not asked: defaults and derived values.
    assert "recovery" not in doc and "experiment" not in doc.get("logging", {})

    # Reloaded with the key from the environment, the spec is the same run.
    again = load_spec(out, environ={"SWANLAB_API_KEY": KEY})
    assert again.spec == r.spec
    assert again.origin("container.name").source is Source.FILE
    assert make_plan(again).ok
    # Without the key, the plan says how to pass it (never from the file).
    no_key = make_plan(load_spec(out, environ={}))
    assert [f.code for f in no_key.findings if f.severity.value == "error"] == ["swanlab_api_key"]


def test_existing_file_is_replaced_only_when_agreed(tmp_path: Path, wizard_run) -> None:  # type: ignore[no-untyped-def]
    _w, d = wizard_run
    out = tmp_path / "run.yaml"
    out.write_text("mine\n")
    with pytest.raises(VerlctlError, match="exists: nothing was written"):
        save_spec(out, d.resolved)
    asked: list[Path] = []
    with pytest.raises(VerlctlError):
        save_spec(out, d.resolved, overwrite=lambda p: asked.append(p) or False)
    assert asked == [out] and out.read_text() == "mine\n"
    save_spec(out, d.resolved, overwrite=lambda p: True)
    assert yaml.safe_load(out.read_text())["container"]["name"] == "exp-1"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".run.yaml")] == []  # no temp left
    with pytest.raises(VerlctlError, match="does not exist"):
        save_spec(tmp_path / "nope" / "run.yaml", d.resolved)


def test_proxy_with_credentials_is_not_written(tmp_path: Path) -> None:
    # A proxy password would reach start_verl.sh and the plan: the spec refuses it, without repeating it.
    with pytest.raises(VerlctlError) as err:
        load_spec(None, typed={"paths.model": "/m", "paths.train_files": "/t", "paths.val_files": "/v",
                               "container.proxy.http": "http://user:pw-9x7@proxy:3128",
                               "container.proxy.https": "http://proxy:3128"}, environ={})
    assert "container.proxy.http" in str(err.value) and "pw-9x7" not in str(err.value)
    r = load_spec(None, typed={"paths.model": "/m", "paths.train_files": "/t", "paths.val_files": "/v",
                               "container.proxy.https": "http://proxy:3128"}, environ={})
    doc, notes = spec_document(r)
    assert doc["container"]["proxy"] == {"https": "http://proxy:3128"} and notes == []


def _confirm(resolved, keys: str, cwd: Path):  # type: ignore[no-untyped-def]
    from verlctl.wizard.flow import confirm_launch

    buf = io.StringIO()
    console = Console(file=buf, width=200, color_system=None)
    plan = make_plan(resolved)
    acts = ["create container exp-1 from the image", "start `bash start_verl.sh`"]
    old = Path.cwd()
    os.chdir(cwd)
    try:
        with create_pipe_input() as inp:
            inp.send_text(keys)
            inp.close()
            prompter = Prompter(input=inp, output=DummyOutput())
            ok = confirm_launch(console, resolved, prompter=prompter)(plan, acts)
    finally:
        os.chdir(old)
    return ok, buf.getvalue(), prompter


def test_launch_confirmation_shows_the_checklist_and_no_changes_nothing(tmp_path: Path, wizard_run) -> None:  # type: ignore[no-untyped-def]
    _w, d = wizard_run
    here = tmp_path / "cwd"
    here.mkdir()
    ok, text, prompter = _confirm(d.resolved, ENTER + ENTER, here)  # default no; do not save
    assert ok is False
    assert prompter.asked == ["Launch with these settings?",
                              "Save these answers as a spec file (repeat with `verlctl launch -c FILE --yes`)?"]
    for part in ("Settings that differ from the defaults", "Features", "Summary",
                 "NPU × 8 per node", "exp-1", "key **********", "swap_optimizer", "verl 0.7.0",
                 "These actions will be taken, in order", "1. create container exp-1"):
        assert part in text, part
    assert KEY not in text
    assert list(here.iterdir()) == []

    ok, text, prompter = _confirm(d.resolved, "n" + "y" + ENTER, here)  # no launch, but save run.yaml
    assert ok is False and (here / "run.yaml").exists() and KEY not in (here / "run.yaml").read_text()
    ok, _text, _p = _confirm(d.resolved, "y" + "n", here)
    assert ok is True
