"""Round 1's first questions (issue 24): what runs — verl version (pre-filled from the verl installed in the
image), algorithm, strategy and mode — each with its provenance, all saved; the questions that depend on them
asked only when they matter (the trainer/rollout split for a disaggregated mode, PP for Megatron only).

Driven through the real questionary prompts on a prompt_toolkit pipe input; the image's verl version is read
by the real Docker engine from a real image (the test image, and one derived from it whose installed verl
distribution says 0.9.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from verlctl.plan import make_plan
from verlctl.spec.sources import Source
from verlctl.wizard.save import spec_document
from wizard_support import DOWN, ENTER, RUN_QUESTIONS, drive, make_world

SPLIT_Q = "Training devices per node (of 8; the others run the rollout)"


def src(resolved: Any, path: str) -> Source:
    return resolved.origin(path).source


def with_image(machine: Any, tag: str) -> Any:
    from verlctl.detect.docker_probe import ImageInfo

    docker = machine.docker.model_copy(update={"images": [ImageInfo(id="0" * 12, tags=[tag])]})
    return machine.model_copy(update={"docker": docker})


def test_grpo_fsdp_one_step_off_is_chosen_in_round_1_and_every_answer_is_saved(tmp_path: Path) -> None:
    w = make_world(tmp_path)  # its image is not on this engine: the version cannot be read, default 0.7.0
    keys = (
        ENTER                                   # verl version 0.7.0 (the default)
        + DOWN + ENTER                          # algorithm: grpo
        + DOWN + ENTER                          # strategy: fsdp
        + DOWN + ENTER                          # mode: one_step_off_policy
        + ENTER + ENTER + ENTER                 # single node, 8 NPUs, split 4 + 4
        + ENTER * 4                             # model, train, val, checkpoints
        + ENTER * 2 + DOWN + ENTER + ENTER * 2  # new container, name, the local image, http/https proxy none
        + ENTER                                 # SwanLab off
        + ENTER + ENTER                         # features by mask, the mask
        + ENTER * 5                             # steps, batch, lr, TP, n (no PP for FSDP)
    )
    d = drive(keys, w.machine)
    r, spec = d.resolved, d.resolved.spec
    asked = d.prompter.asked
    assert asked[:4] == RUN_QUESTIONS, asked
    assert (spec.algorithm, spec.strategy, spec.mode) == ("grpo", "fsdp", "one_step_off_policy")
    assert all(src(r, p) is Source.TYPED for p in ("algorithm", "strategy", "mode"))
    assert spec.verl_version == "0.7.0" and src(r, "verl_version") is Source.DEFAULT
    assert "could not be read" in d.text
    # asked because they matter here: the split (a disaggregated mode); not asked: PP (FSDP has none)
    assert SPLIT_Q in asked and "Pipeline parallel size (PP)" not in asked
    assert (spec.train.trainer_devices, spec.train.rollout_devices) == (4, 4)
    doc, _notes = spec_document(r)
    assert {k: doc[k] for k in ("verl_version", "algorithm", "strategy", "mode")} == {
        "verl_version": "0.7.0", "algorithm": "grpo", "strategy": "fsdp", "mode": "one_step_off_policy"}
    assert doc["features"]["mask"] == "1100000"  # the answered mask, also equal to the default features
    assert doc["train"]["trainer_devices"] == 4 and doc["train"]["rollout_devices"] == 4
    assert make_plan(r).ok


def test_the_defaults_sync_mode_asks_no_split_and_megatron_asks_pp(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    d = drive(ENTER * 24, w.machine)
    r = d.resolved
    assert d.prompter.asked[:4] == RUN_QUESTIONS
    assert SPLIT_Q not in d.prompter.asked and "Pipeline parallel size (PP)" in d.prompter.asked
    for p, v in (("verl_version", "0.7.0"), ("algorithm", "dapo"), ("strategy", "megatron"), ("mode", "sync")):
        assert getattr(r.spec, p) == v and src(r, p) is Source.DEFAULT and p in r.answered


def test_on_verl_0_7_0_the_0_9_1_only_modes_cannot_be_chosen(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    # 0.7.0: only sync and one_step_off_policy are choosable; Down three times moves sync -> one-step -> sync
    # -> one-step (the disabled 0.9.1 modes are skipped)
    d = drive(ENTER + ENTER + ENTER + DOWN * 3 + ENTER + ENTER * 40, w.machine)
    assert d.resolved.spec.mode == "one_step_off_policy"
    # 0.9.1 chosen: Down four times reaches fully_async
    d = drive(DOWN + ENTER + ENTER + ENTER + DOWN * 4 + ENTER + ENTER * 40, w.machine)
    assert d.resolved.spec.verl_version == "0.9.1" and d.resolved.spec.mode == "fully_async"
    assert src(d.resolved, "verl_version") is Source.TYPED


def test_given_values_are_shown_not_asked(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    flags = {"algorithm": "grpo", "mode": "sync", "strategy": "fsdp2", "verl_version": "0.9.1"}
    names = {"algorithm": "--algorithm", "mode": "--mode", "strategy": "--strategy", "verl_version": "--verl-version"}
    d = drive(ENTER * 19, w.machine, flags=flags, names=names)
    assert not set(RUN_QUESTIONS) & set(d.prompter.asked)
    assert "algorithm: grpo  (given: flag (--algorithm))" in d.text
    assert "verl version: 0.9.1  (given: flag (--verl-version))" in d.text
    assert "reading the verl version" not in d.text


# ------------------------------------------------------------------ the version installed in a real image


@pytest.fixture(scope="module")
def image_with_verl_091(docker_engine: Any, test_image: str):  # type: ignore[no-untyped-def]
    """The test image with its installed verl distribution's metadata saying 0.9.1 (a real image; removed)."""
    import uuid

    script = ("import importlib.metadata as m, pathlib\n"
              "d = m.distribution('verl')\n"
              "p = pathlib.Path(d._path) / 'METADATA'\n"
              "p.write_text(p.read_text().replace('Version: 0.7.0', 'Version: 0.9.1', 1))\n"
              "print(m.version('verl'))\n")
    c = docker_engine.containers.create(test_image, entrypoint=["python3", "-c", script],
                                        labels={"io.verlctl.test": "1"})
    tag = f"verlctl-test-wizard-verl091:{uuid.uuid4().hex[:12]}"
    try:
        c.start()
        assert c.wait(timeout=300)["StatusCode"] == 0, c.logs().decode(errors="replace")
        assert c.logs().decode().strip() == "0.9.1"
        repo, name = tag.split(":")
        c.commit(repository=repo, tag=name)
    finally:
        c.remove(force=True)
    yield tag
    docker_engine.images.remove(tag, force=True)


@pytest.mark.docker
def test_the_verl_version_is_prefilled_from_the_verl_installed_in_the_image(tmp_path: Path,
                                                                            test_image: str) -> None:
    w = make_world(tmp_path)
    # the image is given (the default is the seeds' image, not a local one: U10), so round 1 reads its verl
    d = drive(ENTER * 24, with_image(w.machine, test_image), flags={"container.image": test_image},
              names={"container.image": "--set"})
    r = d.resolved
    assert r.spec.container.image == test_image
    assert r.spec.verl_version == "0.7.0" and src(r, "verl_version") is Source.DETECTED, d.text[:800]
    assert "could not be read" not in d.text
    assert spec_document(r)[0]["verl_version"] == "0.7.0"


@pytest.mark.docker
def test_an_image_with_verl_0_9_1_prefills_0_9_1_and_its_modes(tmp_path: Path, image_with_verl_091: str) -> None:
    w = make_world(tmp_path)
    machine = with_image(w.machine, image_with_verl_091)
    # Enter at the version keeps the image's 0.9.1 (detected); then Down four times reaches fully_async (a
    # 0.9.1 mode, choosable because the version is 0.9.1) ... then the split and the rest as pre-filled.
    d = drive(ENTER * 3 + DOWN * 4 + ENTER + ENTER * 40, machine, flags={"container.image": image_with_verl_091},
              names={"container.image": "--set"})
    r = d.resolved
    assert r.spec.verl_version == "0.9.1" and src(r, "verl_version") is Source.DETECTED, d.text[:800]
    assert r.spec.mode == "fully_async" and SPLIT_Q in d.prompter.asked
    assert spec_document(r)[0]["verl_version"] == "0.9.1"


def test_a_number_out_of_range_is_refused_in_the_words_of_the_question(tmp_path: Path) -> None:
    from wizard_support import CLEAR

    w = make_world(tmp_path)
    d = drive(ENTER * 4 + ENTER * 14 + CLEAR + "0" + ENTER + CLEAR + "5" + ENTER + ENTER * 5, w.machine)
    why = [r.reason for r in d.prompter.refusals if r.question == "Training steps"]
    assert why == ["type a number greater than 0"], why  # not pydantic's "Input should be greater than 0"
    assert d.resolved.spec.train.steps == 5
