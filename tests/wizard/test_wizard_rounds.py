"""The five rounds driven headless: real questionary prompts on a prompt_toolkit pipe input (keystrokes,
arrows, Enter), a MachineState built from real npu-smi captures, real model and parquet files."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import SecretStr

from verlctl.plan import make_plan
from verlctl.spec.model import DEFAULT_IMAGE
from verlctl.spec.sources import Source
from wizard_support import (
    CLEAR,
    CTRL_C,
    DOWN,
    ENTER,
    NPU_BUSY,
    NPU_WARNING,
    RUN,
    RUN_QUESTIONS,
    SPACE,
    drive,
    make_world,
)

ALL_QUESTIONS = [
    *RUN_QUESTIONS,
    "Single node or multi-node?",
    "NPUs to train on",
    "Model (a Hugging Face model directory)",
    "Training data (parquet)",
    "Validation data (parquet)",
    "Checkpoint directory",
    "Container: reuse one or create a new one",
    "Name of the new container",
    "Image for the new container",
    "http_proxy inside the container ('none' for no proxy)",
    "https_proxy inside the container ('none' for no proxy)",
    "Log to SwanLab?",
    "Choose the features by",
    "Feature mask",
    "Training steps",
    "Batch size (prompts per step)",
    "Learning rate",
    "Tensor parallel size (TP)",
    "Pipeline parallel size (PP)",
    "Responses per prompt (n)",
]


def src(resolved, path: str) -> Source:  # type: ignore[no-untyped-def]
    return resolved.origin(path).source


def reasons(driven) -> list[str]:  # type: ignore[no-untyped-def]
    return [r.reason for r in driven.prompter.refusals]


def test_accepting_every_prefill_creates_a_new_container_and_types_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    d = drive(RUN + ENTER * 20, w.machine)
    r, spec = d.resolved, d.resolved.spec

    assert d.prompter.asked == ALL_QUESTIONS
    # Pre-fills from the pre-check, accepted unchanged: they stay 'detected' (see wizard/answers.py).
    assert spec.device == "npu" and src(r, "device") is Source.DETECTED
    assert spec.cluster.devices == list(range(8)) and src(r, "cluster.devices") is Source.DETECTED
    assert spec.paths.model == str(w.model) and src(r, "paths.model") is Source.DETECTED
    assert spec.paths.train_files == [str(w.train)] and spec.paths.val_files == [str(w.val)]
    # A new container for this run, not the running one found on the host (someone else's, maybe).
    # U10: the seeds' verl image (pulled), not the first local tag (OTHER_IMAGE, listed after it)
    assert spec.container.name == "verlctl" and spec.container.image == DEFAULT_IMAGE
    assert spec.container.pull is True
    assert src(r, "container.name") is Source.DEFAULT and src(r, "container.image") is Source.DEFAULT
    assert spec.cluster.socket_ifname == "eth0"
    assert spec.logging.swanlab.enabled is False
    # the answered mask is kept as answered (issue 24, U6), not folded back into "default features"
    assert spec.features.mask == "1100000" and spec.features.enable == []
    assert (spec.train.steps, spec.train.train_batch_size, spec.train.lr) == (4, 32, 1e-6)
    assert (spec.train.tensor_parallel, spec.train.pipeline_parallel, spec.train.responses_per_prompt) == (4, 2, 8)
    # nothing typed but the mask, which the user confirmed at the mask prompt (saved as answered, U6), and the
    # choice to pull the default image (it is not local)
    assert sorted(p for p, o in r.origins.items() if o.source is Source.TYPED) == ["container.pull", "features.mask"]
    assert make_plan(r).ok
    assert "Round 5/5" in d.text and "features on: remove_padding, dynamic_batch, flash_attn" in d.text


def test_new_container_pulling_the_default_image_swanlab_on_features_by_name(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    keys = (
        ENTER + ENTER + ENTER + ENTER + ENTER                      # single node, devices, model, train, val
        + CLEAR + "/ckpt/exp1" + ENTER                               # checkpoints
        + ENTER                                                      # create a new container (the default)
        + CLEAR + "exp-1" + ENTER                                    # its name
        + ENTER                                                      # image: pull the default (the first)
        + CLEAR + "http://proxy.local:3128" + ENTER + ENTER          # http_proxy; https_proxy = the same
        + ENTER                                                      # no_proxy: localhost,127.0.0.1
        + "y"                                                        # SwanLab on
        + "http://10.0.0.5:8000" + ENTER                             # host
        + ENTER                                                      # mode cloud
        + "sk-wizard-secret" + ENTER                                 # API key (masked)
        + ENTER + ENTER                                              # workspace, log dir
        + CLEAR + "myproj" + ENTER                                   # project
        + DOWN + ENTER                                               # features by name
        + DOWN * 3 + SPACE + DOWN * 3 + SPACE + ENTER                # offload, swap_optimizer
        + CLEAR + "10" + ENTER + ENTER * 5                           # steps 10, the rest as pre-filled
    )
    d = drive(RUN + keys, w.machine)
    r, spec = d.resolved, d.resolved.spec

    assert spec.container.name == "exp-1" and src(r, "container.name") is Source.TYPED
    assert spec.container.image == DEFAULT_IMAGE and spec.container.pull is True
    assert src(r, "container.image") is Source.DEFAULT and src(r, "container.pull") is Source.TYPED
    assert spec.container.proxy.http == spec.container.proxy.https == "http://proxy.local:3128"
    # U5: no_proxy asked (localhost, 127.0.0.1 pre-filled), then the SwanLab host added to it
    assert "no_proxy inside the container (hosts reached directly, comma-separated)" in d.prompter.asked
    assert spec.container.proxy.no_proxy == "localhost,127.0.0.1,10.0.0.5"
    assert "added the SwanLab host 10.0.0.5 to no_proxy" in d.text
    assert spec.paths.checkpoints == "/ckpt/exp1" and src(r, "paths.checkpoints") is Source.TYPED
    sw = spec.logging.swanlab
    assert sw.enabled is True and sw.host == "http://10.0.0.5:8000" and sw.mode == "cloud"
    assert isinstance(sw.api_key, SecretStr) and sw.api_key.get_secret_value() == "sk-wizard-secret"
    assert src(r, "logging.swanlab.mode") is Source.DEFAULT  # accepted pre-fill
    assert spec.logging.project == "myproj"
    assert spec.features.enable == ["offload", "swap_optimizer"] and spec.features.disable == []
    assert spec.features.mask is None
    # The conflict is explained: swap optimizer turns optimizer offload off.
    assert "optimizer offload is forced off" in d.text
    assert spec.train.steps == 10 and src(r, "train.steps") is Source.TYPED
    assert src(r, "train.tensor_parallel") is Source.DEFAULT
    plan = make_plan(r)
    assert plan.ok
    assert "+actor_rollout_ref.actor.megatron.override_transformer_config.swap_optimizer=True" in plan.command.override_texts()
    assert "actor_rollout_ref.actor.megatron.optimizer_offload=False" in plan.command.override_texts()
    # The key is never printed by the wizard.
    assert "sk-wizard-secret" not in d.text
    assert all("sk-wizard-secret" not in x.answer for x in d.prompter.refusals)


def test_invalid_answers_are_refused_with_the_reason_and_asked_again(tmp_path: Path) -> None:
    w = make_world(tmp_path, heads=12, kv=4, layers=8)
    keys = (
        ENTER + ENTER                                                # single node, devices
        + DOWN + ENTER                                               # model: type a path
        + CLEAR + ENTER                                              # empty: refused
        + "/does/not/exist" + ENTER                                  # missing: refused
        + CLEAR + str(w.model) + ENTER                               # accepted
        + ENTER + ENTER + ENTER                                      # train, val, checkpoints
        + ENTER * 3 + ENTER + ENTER                                  # new container, name, image, proxies none
        + "y" + "not a url" + ENTER                                  # SwanLab on, malformed host: refused
        + CLEAR + "http://10.0.0.5:8000" + ENTER
        + DOWN + ENTER                                               # mode local (no key needed)
        + ENTER + ENTER + ENTER                                      # workspace, log dir, project
        + ENTER                                                      # features by mask
        + CLEAR + "11x" + ENTER                                      # bad mask: refused
        + CLEAR + "1010011" + ENTER
        + ENTER + ENTER                                              # steps, batch
        + CLEAR + "abc" + ENTER + CLEAR + "2e-6" + ENTER             # lr: refused, then 2e-6
        + CLEAR + "8" + ENTER                                        # TP 8: 12 heads, refused
        + CLEAR + "2" + ENTER
        + ENTER + ENTER                                              # PP, n
    )
    d = drive(RUN + keys, w.machine)
    r, spec = d.resolved, d.resolved.spec
    why = reasons(d)

    assert "a model path is required" in why
    assert "/does/not/exist does not exist" in why
    assert any("invalid URL 'not a url'" in x for x in why)
    assert any("'11x' is not a mask" in x for x in why)
    assert "type a number, e.g. 1e-6" in why
    tp = [x for x in why if x.startswith("TP 8 refused")]
    assert tp and "valid TP here: 1, 2, 4" in tp[0] and "12 attention heads" in tp[0]
    # Each question was asked again until the answer passed.
    assert d.prompter.asked.count("Model path") == 1 and "Feature mask" in d.prompter.asked
    assert spec.paths.model == str(w.model)
    assert spec.logging.swanlab.host == "http://10.0.0.5:8000" and spec.logging.swanlab.mode == "local"
    assert spec.features.mask == "1010011" and src(r, "features.mask") is Source.TYPED
    assert spec.train.lr == 2e-6 and spec.train.tensor_parallel == 2
    plan = make_plan(r)
    on = {n for n, s in plan.command.features.items() if s.on and s.applicable}
    assert on == {"remove_padding", "offload", "swap_optimizer", "vpp", "flash_attn"}


def test_multi_node_with_fewer_devices_refuses_a_pp_too_large_with_the_valid_choices(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    keys = (
        DOWN + ENTER                                                 # multi-node
        + "10.0.0.1,bad host!" + ENTER                               # refused
        + CLEAR + "10.0.0.1,10.0.0.2" + ENTER
        + DOWN + ENTER                                               # head: 10.0.0.2
        + DOWN * 4 + (SPACE + DOWN) * 4 + ENTER                      # devices 0-3 only: 2 nodes x 4 = 8
        + ENTER * 4                                                  # model, train, val, checkpoints
        + ENTER * 5 + ENTER                                          # container, name, image, proxies, SwanLab off
        + ENTER + ENTER                                              # mask as pre-filled
        + ENTER * 3                                                  # steps, batch, lr
        + ENTER                                                      # TP 4
        + CLEAR + "4" + ENTER                                        # PP 4: 4*4 > 8 devices: refused
        + CLEAR + "2" + ENTER + ENTER
    )
    d = drive(RUN + keys, w.machine)
    spec = d.resolved.spec
    why = reasons(d)
    assert any("'bad host!' is not an IP address or host name" in x for x in why)
    assert spec.cluster.nodes == ["10.0.0.2", "10.0.0.1"] and spec.cluster.master_addr == "10.0.0.2"
    assert spec.cluster.devices == [0, 1, 2, 3]
    pp = [x for x in why if x.startswith("PP 4 refused")]
    assert pp and "valid PP here: 1, 2" in pp[0] and "not divisible by TP*PP*CP = 4*4*1 = 16" in pp[0]
    assert (spec.train.tensor_parallel, spec.train.pipeline_parallel) == (4, 2)
    assert make_plan(d.resolved).ok


def test_given_values_are_shown_not_asked_and_ask_all_asks_them_prefilled(tmp_path: Path) -> None:
    import yaml

    w = make_world(tmp_path)
    cfg = tmp_path / "given.yaml"
    cfg.write_text(yaml.safe_dump({"paths": {"train_files": str(w.train), "val_files": str(w.val)},
                                   "logging": {"swanlab": {"enabled": False}}}))
    flags = {"paths.model": str(w.model), "train.tensor_parallel": 2}
    names = {"paths.model": "--set paths.model", "train.tensor_parallel": "--set train.tensor_parallel"}
    environ = {"TRAIN_STEPS": "7"}

    d = drive(RUN + ENTER * 14, w.machine, flags=flags, names=names, config=cfg, environ=environ)
    skipped = {"Model (a Hugging Face model directory)", "Training data (parquet)", "Validation data (parquet)",
               "Log to SwanLab?", "Training steps", "Tensor parallel size (TP)"}
    assert d.prompter.asked == [q for q in ALL_QUESTIONS if q not in skipped]
    assert f"model: {w.model}  (given: flag (--set paths.model))" in d.text
    assert "Training steps: 7  (given: env (TRAIN_STEPS))" in d.text
    r = d.resolved
    assert src(r, "paths.model") is Source.FLAG and src(r, "train.steps") is Source.ENV
    assert src(r, "paths.train_files") is Source.FILE and r.spec.train.tensor_parallel == 2

    d = drive(RUN + ENTER * 20, w.machine, flags=flags, names=names, config=cfg, environ=environ, ask_all=True)
    assert d.prompter.asked == ALL_QUESTIONS
    r = d.resolved
    # Asked again, pre-filled with the given value, accepted: the value keeps its source.
    assert r.spec.train.steps == 7 and src(r, "train.steps") is Source.ENV
    assert r.spec.train.tensor_parallel == 2 and src(r, "train.tensor_parallel") is Source.FLAG
    assert src(r, "paths.model") is Source.FLAG


def test_whole_spec_check_after_the_rounds_reasks_the_round_that_can_fix_a_given_value(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    flags = {"train.tensor_parallel": 3}  # 8 devices, 8 heads: no PP can make TP 3 work
    keys = ENTER * 6 + ENTER * 5 + ENTER + ENTER * 2 + ENTER * 5 + ENTER * 3 + CLEAR + "4" + ENTER + ENTER * 2
    d = drive(RUN + keys, w.machine, flags=flags, names={"train.tensor_parallel": "--set train.tensor_parallel"})
    assert "these answers need another look" in d.text
    assert "parallel_divisibility" in d.text
    assert d.prompter.asked.count("Tensor parallel size (TP)") == 1  # only in the second pass
    assert d.resolved.spec.train.tensor_parallel == 4 and src(d.resolved, "train.tensor_parallel") is Source.TYPED
    assert make_plan(d.resolved).ok


def test_ctrl_c_at_any_question_raises_interrupted_with_exit_130_and_keeps_the_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from verlctl.wizard.prompter import WizardInterrupted

    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    kept = tmp_path / "state" / "wizard" / "interrupted.yaml"
    w = make_world(tmp_path)
    for before in (0, 1, 9, 16):  # the first question, then after: verl version; val data; SwanLab
        with pytest.raises(WizardInterrupted) as info:
            drive(ENTER * before + CTRL_C, w.machine)
        assert info.value.code == 130
        assert len(info.value.driven.prompter.asked) == before + 1  # type: ignore[attr-defined]
        if before == 0:
            assert info.value.message == "interrupted: nothing was changed" and not kept.exists()
            continue
        # U9: the answers so far are kept (mode 0600, no secrets) for `verlctl init` to continue from
        assert "nothing was written" in info.value.message and str(kept) in info.value.message
        assert kept.stat().st_mode & 0o777 == 0o600
        doc = yaml.safe_load(kept.read_text())
        assert doc["cluster"]["devices"] == list(range(8))
        if before >= 9:
            assert doc["paths"]["model"] == str(w.model)
        if before >= 16:
            assert doc["paths"]["checkpoints"] and doc["container"]["name"] == "verlctl"


def test_input_that_ends_early_is_one_clear_error(tmp_path: Path) -> None:
    from verlctl.wizard.prompter import InputEnded

    w = make_world(tmp_path)
    with pytest.raises(InputEnded) as info:
        drive(RUN + ENTER * 3, w.machine)
    assert "nothing was changed" in info.value.message


def test_device_rows_mark_busy_and_unhealthy_devices_and_prefill_only_free_ones(tmp_path: Path) -> None:
    from verlctl.wizard import machine_view as mv

    warn = make_world(tmp_path / "a", npu=NPU_WARNING).machine
    rows = {r.id: r for r in mv.device_rows(warn)}
    assert rows[0].problem == "health: Warning" and rows[7].free
    assert mv.prefill(warn)["cluster.devices"] == [7]

    busy = make_world(tmp_path / "b", npu=NPU_BUSY).machine
    rows = {r.id: r for r in mv.device_rows(busy)}
    assert rows[0].problem and rows[0].problem.startswith("busy:")
    assert rows[7].problem and rows[7].problem.startswith("busy:")
    # Nothing is free: every detected device is pre-filled, marked, for the user to decide.
    assert mv.prefill(busy)["cluster.devices"] == [0, 7]


def test_nothing_detected_every_value_is_typed_or_default(tmp_path: Path) -> None:
    from verlctl.detect.machine import MachineState

    w = make_world(tmp_path)
    keys = (
        ENTER                                                        # single node
        + CLEAR + "0,1,2,3" + ENTER                                  # device ids (no NPU/GPU detected)
        + str(w.model) + ENTER + str(w.train) + ENTER                # model, train file
        + str(tmp_path / "data" / "missing.parquet") + ENTER         # refused: does not exist
        + CLEAR + str(w.val) + ENTER + ENTER                         # val file, checkpoints
        + ENTER + ENTER + ENTER                                      # new container (the only entry), name
        + ENTER + ENTER + ENTER                                      # pull the default image, proxies
        + ENTER + ENTER + ENTER                                      # SwanLab off, mask
        + ENTER * 4 + ENTER + ENTER                                  # 4 devices: TP 4, PP 1 (pre-filled), n
    )
    d = drive(RUN + keys, MachineState())
    r, spec = d.resolved, d.resolved.spec
    assert "Device ids (comma-separated)" in d.prompter.asked and "Model path" in d.prompter.asked
    assert any(x.endswith("missing.parquet does not exist") for x in reasons(d))
    assert spec.cluster.devices == [0, 1, 2, 3] and src(r, "cluster.devices") is Source.TYPED
    assert spec.paths.model == str(w.model) and src(r, "paths.model") is Source.TYPED
    assert spec.paths.val_files == [str(w.val)]
    assert spec.container.name == "verlctl" and spec.container.image == DEFAULT_IMAGE
    assert spec.container.pull is True and src(r, "container.pull") is Source.TYPED
    assert src(r, "container.image") is Source.DEFAULT and spec.device == "npu"
    assert (spec.train.tensor_parallel, spec.train.pipeline_parallel) == (4, 1)
    # PP 2 (the default) does not fit TP 4 on 4 devices: the question is pre-filled with the PP that does
    assert "pre-filled PP 1: PP 2 does not fit the other answers (valid PP here: 1)" in d.text
    assert make_plan(r).ok


def test_a_given_value_at_fault_does_not_trap_other_questions(tmp_path: Path) -> None:
    w = make_world(tmp_path)  # 8 layers: PP 3 cannot split them, and 8 devices are not divisible by TP*3
    keys = (
        ENTER * 6 + ENTER * 5 + ENTER                                # rounds 1-3 as pre-filled
        + ENTER + CLEAR + "1000001" + ENTER                          # mask with vpp: not refused for PP 3
        + ENTER * 3 + ENTER + ENTER                                  # steps, batch, lr, TP (no TP fits PP 3), n
        + ENTER * 3 + ENTER + CLEAR + "2" + ENTER + ENTER            # round 5 again, every value: PP 2
    )
    d = drive(RUN + keys, w.machine, flags={"train.pipeline_parallel": 3},
              names={"train.pipeline_parallel": "--set train.pipeline_parallel"})
    r = d.resolved
    assert "Pipeline parallel size (PP)" not in d.prompter.asked[:19]  # given: not asked in the first pass
    assert "model_layers_pp" in d.text and "these answers need another look" in d.text
    assert r.spec.features.mask == "1000001"
    assert r.spec.train.pipeline_parallel == 2 and src(r, "train.pipeline_parallel") is Source.TYPED
    assert make_plan(r).ok


# ------------------------------------------------------------------ issue 24: the wizard asks what matters


def test_busy_devices_are_never_pre_selected_and_choosing_one_is_explicit(tmp_path: Path) -> None:
    # U18: the busy 910B1 capture (both NPUs busy): nothing is checked; Enter alone is refused.
    w = make_world(tmp_path, npu=NPU_BUSY)
    keys = (ENTER + ENTER + SPACE + ENTER          # single node; Enter refused (nothing checked); NPU 0
            + ENTER * 15                          # model .. steps, batch, lr
            + CLEAR + "1" + ENTER + CLEAR + "1" + ENTER + ENTER)  # one NPU: TP 1, PP 1; n
    d = drive(RUN + keys, w.machine)
    assert "choose at least one device" in reasons(d), reasons(d)
    assert "none is pre-selected" in d.text, d.text
    assert d.resolved.spec.cluster.devices == [0]
    # choosing a busy device is the explicit opt-in that check and launch ask for (U21), saved and said
    assert d.resolved.spec.cluster.allow_busy_devices is True
    assert "cluster.allow_busy_devices: true saved (you chose busy device(s) 0)" in d.text


def test_fsdp_is_not_asked_a_pipeline_parallel_size(tmp_path: Path) -> None:
    # U8: FSDP has no pipeline parallelism; the Summary says no PP either.
    from verlctl.wizard.checklist import summary_lines

    w = make_world(tmp_path)
    d = drive(ENTER * 3 + ENTER * 19, w.machine, flags={"strategy": "fsdp"}, names={"strategy": "--strategy"})
    assert "Pipeline parallel size (PP)" not in d.prompter.asked
    assert d.prompter.asked[-1] == "Responses per prompt (n)"
    assert "no pipeline parallel size to choose: fsdp has no pipeline parallelism" in d.text
    hyper = dict(summary_lines(d.resolved, make_plan(d.resolved).command))["hyperparameters"]
    assert "PP" not in hyper and "TP 4" in hyper


def test_a_gpu_host_gets_no_ascend_image_default(tmp_path: Path) -> None:
    # U19: device gpu: the image question offers no "Pull the default" (Ascend 910B) and asks for a reference.
    w = make_world(tmp_path, images=False)
    image = "verlai/verl:app-verl0.7-vllm0.10"
    keys = ENTER * 8 + ENTER + image + ENTER + ENTER + ENTER * 20
    d = drive(RUN + keys, w.machine, flags={"device": "gpu"}, names={"device": "--set device"})
    assert "Image reference" in d.prompter.asked, d.prompter.asked
    assert d.resolved.spec.container.image == image
    assert "Pull the default" not in d.text


def test_a_path_that_differs_only_in_case_gets_a_did_you_mean(tmp_path: Path) -> None:
    from verlctl.wizard.rounds import same_but_case

    w = make_world(tmp_path)
    typo = str(w.model).replace("Qwen3-0.6B", "qwen3-0.6b")
    assert same_but_case(typo) == str(w.model) and same_but_case(str(w.model)) is None
    assert same_but_case(str(tmp_path / "nothing-like-it")) is None
    # in the wizard: the model question, "Type a path…", the case typo is refused with the right path named
    keys = ENTER + ENTER + DOWN + ENTER + CLEAR + typo + ENTER + CLEAR + str(w.model) + ENTER + ENTER * 17
    d = drive(RUN + keys, w.machine)
    assert any(r.endswith(f"does not exist; did you mean {w.model}?") for r in reasons(d)), reasons(d)


def test_no_proxy_coverage_reads_names_suffixes_and_ranges() -> None:
    from verlctl.wizard.rounds import no_proxy_covers

    assert no_proxy_covers("localhost,10.0.0.0/8", "10.143.2.129")
    assert no_proxy_covers(".corp", "swanlab.corp") and no_proxy_covers("corp", "swanlab.corp")
    assert no_proxy_covers("*", "anything") and not no_proxy_covers("localhost,127.0.0.1", "10.143.2.129")
    assert not no_proxy_covers("", "swanlab.corp") and not no_proxy_covers("lab.corp", "swanlab.corp")


def test_a_disaggregated_mode_asks_the_trainer_rollout_split_and_shows_it(tmp_path: Path) -> None:
    # U7: one-step-off-policy: the split is asked in round 1 (half/half pre-filled), TP/PP then fit the
    # training side, and the Summary shows the split.
    from verlctl.wizard.checklist import summary_lines

    w = make_world(tmp_path)
    keys = (ENTER + ENTER + CLEAR + "2" + ENTER     # single node, 8 NPUs, 2 of them train
            + ENTER * 15 + CLEAR + "2" + ENTER + CLEAR + "1" + ENTER + ENTER)  # ... TP 2, PP 1 (2 training devices)
    d = drive(ENTER * 3 + keys, w.machine, flags={"mode": "one_step_off_policy"}, names={"mode": "--mode"})
    asked = d.prompter.asked
    assert asked[5] == "Training devices per node (of 8; the others run the rollout)", asked
    spec = d.resolved.spec
    assert (spec.train.trainer_devices, spec.train.rollout_devices) == (2, 6)
    assert "split per node: 2 training + 6 rollout device(s)" in d.text
    rows = dict(summary_lines(d.resolved, make_plan(d.resolved).command))
    assert rows["split"].startswith("2 training + 6 rollout device(s) per node")
    refused = drive(ENTER * 3 + ENTER + ENTER + CLEAR + "8" + ENTER + CLEAR + "2" + ENTER + ENTER * 15 + CLEAR + "2" + ENTER
                    + CLEAR + "1" + ENTER + ENTER, w.machine, flags={"mode": "one_step_off_policy"},
                    names={"mode": "--mode"})
    assert any("type a whole number from 1 to 7" in r for r in reasons(refused))
