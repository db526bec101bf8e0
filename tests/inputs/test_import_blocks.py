"""Values decided inside ``case`` / ``if`` blocks: the simple forms are evaluated with the script's own variables
(``case "$DEVICE" in npu) ...;;``, ``if [ "$X" = "y" ]``, ``[[ $X == y ]]``, tests joined by ``&&`` / ``||``);
where a value the training command uses comes from a block that was not evaluated, the import refuses, naming the
variable, the block's lines and what its test needs. It used to take whatever the script had before the block
(verl's ``examples/grpo_trainer/run_qwen3_8b_fsdp.sh`` on NPU: the GPU defaults, batch 1024 instead of 16 and
responses of 2048 instead of 32768 tokens) with only a note that blocks are not evaluated."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from verlctl.importer import import_script
from verlctl.inputs.shell_script import ScriptError, parse_script

from conftest import FIXTURES

OFFICIAL = FIXTURES / "official-scripts"
DEVICE_CASE = "0.9.0/examples/grpo_trainer/run_qwen3_8b_fsdp.sh"
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}
ENTRY = "python3 -m verl.trainer.main_ppo"


def test_a_value_from_a_case_block_that_cannot_be_evaluated_is_refused_naming_the_variable() -> None:
    """DEVICE=${DEVICE:-$(python3 -c 'import torch_npu' ... )} (line 20) needs a command: the `case "${DEVICE}"`
    blocks are not evaluated, and the command reads what they set."""
    with pytest.raises(ScriptError) as exc:
        import_script(OFFICIAL / DEVICE_CASE, None, dict(ENVIRON))
    msg = str(exc.value)
    assert "line 190: the training command uses ACTOR, DATA, EXTRA, ROLLOUT, TRAINER," in msg, msg
    assert "which the `case` block at lines 69-127 may set and import did not evaluate" in msg, msg
    assert "it tests DEVICE (line 20: its value needs a command's output: give it with --var DEVICE=VALUE)" in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("device", "batch", "prompt", "response", "mini", "rollout_tp"),
    [("npu", 16, 2048, 32768, 16, 4), ("gpu", 1024, 1024, 2048, 256, 2)],
)
def test_the_device_case_takes_the_branch_of_the_given_device(device: str, batch: int, prompt: int, response: int,
                                                              mini: int, rollout_tp: int) -> None:
    r = import_script(OFFICIAL / DEVICE_CASE, None, {**ENVIRON, "DEVICE": device})
    train = r.document["train"]
    assert (train["train_batch_size"], train["max_prompt_length"], train["max_response_length"]) == (
        batch, prompt, response)
    assert (train["mini_batch_size"], train["rollout_tensor_parallel"]) == (mini, rollout_tp)
    assert any("`case` evaluated" in n for n in r.notes), r.notes
    argv = r.command_argv
    if device == "npu":
        # the NPU branch's exports and EXTRA overrides, and its nested `if` on INFER_BACKEND (vllm: nothing)
        assert r.env_kept.get("HCCL_CONNECT_TIMEOUT") == "1500"
        assert "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=4" in argv
        assert "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=4096" in argv
        assert not any("attention_backend" in a for a in argv)
    else:
        assert "HCCL_CONNECT_TIMEOUT" not in r.env_kept
        assert not any("ulysses_sequence_parallel_size" in a for a in argv)
        assert r.document["cluster"]["devices"] == list(range(8))  # NGPUS_PER_NODE from the nested `case`


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize(
    "setup",
    [
        'X=y\ncase "$X" in\n  y) V=case-y ;;\n  *) V=other ;;\nesac',
        'X=z\ncase "$X" in\n  y) V=case-y ;;\n  *) V=other ;;\nesac',
        'X=npu\ncase "${X}" in\n  gpu | npu) V=either ;;\n  *) V=none ;;\nesac',
        'X=ab\ncase $X in\n  a*) V=glob ;;\nesac',
        'X=ab\ncase $X in\n  "a*") V=quoted ;;\n  *) V=star ;;\nesac',
        'X=y\nif [ "$X" = "y" ]; then V=one; else V=two; fi',
        'X=n\nif [[ $X == y ]]; then V=one; elif [[ $X == n ]]; then V=two; fi',
        'X=y\nB=vllm\nif [ "$X" = y ] && [ "$B" = trtllm ]; then V=both; else V=not; fi',
        'X=y\nB=vllm\nif [ "$X" = n ] || [ "$B" = vllm ]; then V=either; fi',
        'M=\ncase "${M}" in\n  gb200) V=big ;;\n  *) V=default ;;\nesac',
        'X=npu\nV=start\ncase "$X" in\n  npu)\n    case "$V" in\n      start) V=nested ;;\n    esac\n    ;;\nesac',
    ],
)
def test_the_simple_forms_are_evaluated_as_bash_does(setup: str) -> None:
    bash = subprocess.run(["bash", "-c", setup + "\nprintf '%s' \"${V-unset}\""], capture_output=True, text=True,
                          check=True).stdout
    p = parse_script(f"{setup}\n{ENTRY} v=${{V-unset}}\n", "t.sh", {})
    assert p.command.overrides == [f"v={bash}"]


@pytest.mark.parametrize(
    ("setup", "needs"),
    [
        ('case "$FROM_ENV" in\n  a) V=1 ;;\nesac', "it tests FROM_ENV (not set by the script: give it with --var "
                                                   "FROM_ENV=VALUE)"),
        ('X=$(hostname)\nif [ "$X" = a ]; then V=1; fi', "it tests X (line 1: its value needs a command's output"),
        ("if [ -f /etc/hosts ]; then V=1; fi", "its test is not a plain comparison of values"),
        ("for h in a b; do V=$h; done", "the `for` block at lines 1-1 may set"),
    ],
)
def test_refusal_names_the_variable_the_block_and_its_test(setup: str, needs: str) -> None:
    with pytest.raises(ScriptError, match="uses V, which") as exc:
        parse_script(f"{setup}\n{ENTRY} v=$V\n", "t.sh", {})
    assert needs in str(exc.value), str(exc.value)


def test_a_value_passed_on_through_variables_and_arrays_is_still_refused() -> None:
    text = ('case "$DEV" in\n  npu) bs=16 ;;\nesac\nDATA=(data.train_batch_size=${bs})\nMORE="${DATA[@]}"\n'
            f'{ENTRY} $MORE\n')
    with pytest.raises(ScriptError, match=r"line 6: the training command uses MORE, which the `case` block at "
                                          r"lines 1-3 may set"):
        parse_script(text, "t.sh", {})
    # given the variable the block tests, it is evaluated
    assert parse_script(text, "t.sh", {"DEV": "npu"}).command.overrides == ["data.train_batch_size=16"]
    # set again at top level from known values: known again
    ok = text.replace("MORE=", "bs=8\nDATA=(data.train_batch_size=${bs})\nMORE=")
    assert parse_script(ok, "t.sh", {}).command.overrides == ["data.train_batch_size=8"]


def test_a_block_the_command_does_not_read_is_only_reported() -> None:
    p = parse_script(f'if [ -f /etc/hosts ]; then V=1; fi\n{ENTRY} a=1\n', "t.sh", {})
    assert p.command.overrides == ["a=1"]
    assert any("'if' block not evaluated" in n for n in p.notes)


def test_a_function_refuses_only_where_the_script_calls_it() -> None:
    body = "setv() {\n  V=1\n}\n"
    assert parse_script(f"V=0\n{body}{ENTRY} v=$V\n", "t.sh", {}).command.overrides == ["v=0"]
    with pytest.raises(ScriptError, match=r"uses V, which the function setv \(lines 2-4\), called at line 5"):
        parse_script(f"V=0\n{body}setv\n{ENTRY} v=$V\n", "t.sh", {})


def test_an_export_in_a_block_not_evaluated_is_refused_naming_it() -> None:
    """The training runs with what the script exports: an export inside a block that was not evaluated (the NPU
    branch's HCCL settings) leaves its environment unknown."""
    text = f'if [ "$DEV" = npu ]; then\n  export HCCL_CONNECT_TIMEOUT=1500\nfi\n{ENTRY} a=1\n'
    with pytest.raises(ScriptError, match=r"HCCL_CONNECT_TIMEOUT is exported in the `if` block at lines 1-3, "
                                          r"which import did not evaluate: it tests DEV"):
        parse_script(text, "t.sh", {})
    assert parse_script(text, "t.sh", {"DEV": "npu"}).exports == {"HCCL_CONNECT_TIMEOUT": "1500"}
    assert parse_script(text, "t.sh", {"DEV": "gpu"}).exports == {}
    assert parse_script(text.replace("fi\n", "fi\nexport HCCL_CONNECT_TIMEOUT=9\n"), "t.sh", {}).exports == {
        "HCCL_CONNECT_TIMEOUT": "9"}
