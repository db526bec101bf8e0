"""`verlctl import` of a script in the shape of verl's newer CI launchers (issue 23): a wrapper collects
overrides in an array, picks them with `if [[ "$STRATEGY" == ... ]]` and hands them to a common script with
`exec bash "${SCRIPT_DIR}/common.sh" "${params[@]}" "$@"`, whose `python3 -m` sits in an `if` branch too
(verl's tests/special_e2e/run_v1_separate_async_ascend.sh -> run_v1_separate_async.sh). The scripts here are
written for the test (the same shape, not verl's text). Nothing is run: the reader evaluates string tests and
reads the script it hands over to, beside it."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from verlctl.importer import import_script
from verlctl.inputs.shell_script import ScriptError, parse_file

COMMON = """\
    #!/usr/bin/env bash
    set -xeuo pipefail
    STRATEGY=${STRATEGY:-fsdp2}
    N_TRAIN=${N_TRAIN:-4}
    if ((N_TRAIN <= 0)); then
        echo "bad split"; exit 1
    fi
    name="$(basename "${MODEL_ID,,}")-sep-${STRATEGY}"
    common=(
        trainer.use_v1=True
        trainer.v1.trainer_mode=separate_async
        trainer.v1.separate_async.parameter_sync_step=4
        data.train_files=/d/train.parquet
        data.val_files=/d/test.parquet
        data.train_batch_size=16
        algorithm.adv_estimator=grpo
        actor_rollout_ref.model.path=/m/Qwen3-8B
        actor_rollout_ref.actor.ppo_mini_batch_size=4
        actor_rollout_ref.rollout.name=vllm
        actor_rollout_ref.rollout.n=4
        actor_rollout_ref.rollout.nnodes=1
        actor_rollout_ref.rollout.n_gpus_per_node=${N_ROLLOUT}
        actor_rollout_ref.rollout.checkpoint_engine.backend=nccl
        trainer.experiment_name="${name}"
        trainer.val_before_train=False
        trainer.device=npu
        trainer.nnodes=1
        trainer.n_gpus_per_node=${N_TRAIN}
        trainer.total_epochs=1
    )
    if [[ "${STRATEGY}" == "fsdp2" ]]; then
        python3 -m verl.trainer.main_ppo "${common[@]}" actor_rollout_ref.actor.strategy=fsdp2 "$@"
    elif [[ "${STRATEGY}" == "megatron" ]]; then
        python3 -m verl.trainer.main_ppo model_engine=megatron "${common[@]}" "$@"
    else
        echo "unknown ${STRATEGY}"
        exit 1
    fi
    echo done
"""

WRAPPER = """\
    #!/usr/bin/env bash
    set -euo pipefail
    SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
    STRATEGY=${STRATEGY:-fsdp2}
    export N_ROLLOUT=${N_ROLLOUT:-4}
    export MODEL_ID=${MODEL_ID:-Qwen/Qwen3-8B}
    params=(
        actor_rollout_ref.rollout.gpu_memory_utilization=0.5
        trainer.val_before_train=True
    )
    if [[ "${STRATEGY}" == "fsdp2" ]]; then
        params+=(actor_rollout_ref.actor.fsdp_config.param_offload=True)
    elif [[ "${STRATEGY}" == "megatron" ]]; then
        params+=(actor_rollout_ref.actor.megatron.param_offload=True)
    else
        echo "unknown"; exit 1
    fi
    exec bash "${SCRIPT_DIR}/{common}" "${params[@]}" "$@"
"""


def write(tmp_path: Path, common: str = COMMON, wrapper: str = WRAPPER, name: str = "common.sh") -> Path:
    (tmp_path / name).write_text(textwrap.dedent(common), encoding="utf-8")
    w = tmp_path / "run_ascend.sh"
    w.write_text(textwrap.dedent(wrapper).replace("{common}", name), encoding="utf-8")
    return w


def test_the_wrapper_hands_its_overrides_to_the_common_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    parsed = parse_file(write(tmp_path).name)
    cmd = parsed.command
    assert cmd.module == "verl.trainer.main_ppo"
    ov = cmd.overrides
    assert ov[0] == "trainer.use_v1=True" and "model_engine=megatron" not in ov  # the fsdp2 branch
    # the common overrides, the branch's own, then the wrapper's ("$@"), in that order
    assert ov[-4:] == ["actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
                       "trainer.val_before_train=True", "actor_rollout_ref.actor.fsdp_config.param_offload=True"]
    assert "actor_rollout_ref.rollout.n_gpus_per_node=4" in ov  # exported by the wrapper
    assert "trainer.experiment_name=qwen3-8b-sep-fsdp2" in ov  # ${MODEL_ID,,} and basename
    assert any("followed `bash common.sh` (3 arguments)" in n for n in parsed.notes), parsed.notes
    assert any("'if' block not evaluated" in n for n in parsed.notes)  # the arithmetic guard is still skipped


def test_a_string_test_picks_the_branch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    ov = parse_file(write(tmp_path).name, {"STRATEGY": "megatron"}).command.overrides
    assert ov[0] == "model_engine=megatron" and ov[-1] == "actor_rollout_ref.actor.megatron.param_offload=True"
    with pytest.raises(ScriptError, match="no `python3 -m <entry>` command"):
        parse_file(write(tmp_path).name, {"STRATEGY": "veomni"})  # the else branch exits


def test_import_keeps_the_last_value_of_a_key_the_wrapper_sets_again(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The common script says val_before_train=False, the wrapper's "$@" True later: Hydra applies the last."""
    monkeypatch.chdir(tmp_path)
    r = import_script(write(tmp_path).name, None, {"HOME": "/home/u"})
    assert (r.document["verl_version"], r.document["mode"], r.document["strategy"]) == ("0.9.1", "separate_async",
                                                                                         "fsdp2")
    assert r.document["train"]["val_before_train"] is True
    assert not [e for e in r.extras if e.startswith("trainer.val_before_train")], r.extras
    assert any(n.startswith("trainer.val_before_train=False not imported: the script sets trainer.val_before_train "
                            "again later") for n in r.notes), r.notes


def test_only_a_script_beside_it_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    w = write(tmp_path / "sub")
    outside = tmp_path / "outside.sh"
    outside.write_text(textwrap.dedent(COMMON), encoding="utf-8")
    w.write_text(w.read_text(encoding="utf-8").replace('"${SCRIPT_DIR}/common.sh"', '"${SCRIPT_DIR}/../outside.sh"'),
                 encoding="utf-8")
    with pytest.raises(ScriptError, match="no `python3 -m"):
        parse_file(str(w))
    os.symlink(outside, tmp_path / "sub" / "link.sh")
    w.write_text(w.read_text(encoding="utf-8").replace("/../outside.sh", "/link.sh"), encoding="utf-8")
    with pytest.raises(ScriptError, match="no `python3 -m"):
        parse_file(str(w))


def test_following_stops_after_two_scripts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.sh").write_text(textwrap.dedent(COMMON), encoding="utf-8")
    (tmp_path / "b.sh").write_text('exec bash ./c.sh "$@"\n', encoding="utf-8")
    (tmp_path / "a.sh").write_text('bash ./b.sh "$@"\n', encoding="utf-8")
    (tmp_path / "top.sh").write_text("export N_ROLLOUT=2\nexec bash ./b.sh x=1\n", encoding="utf-8")
    assert parse_file("top.sh").command.overrides[-1] == "x=1"  # top -> b -> c: two deep
    (tmp_path / "top.sh").write_text("exec bash ./a.sh x=1\n", encoding="utf-8")
    with pytest.raises(ScriptError, match="no `python3 -m"):
        parse_file("top.sh")  # top -> a -> b -> c: c is not read


def test_deeply_nested_ifs_cost_bounded_work(tmp_path: Path) -> None:
    """A hostile file: 3,000 `if`s inside each other all true. Evaluated 16 deep, the rest skipped as blocks (no
    recursion error, no traceback)."""
    n = 3000
    text = "A=x\n" + "if [[ $A == x ]]; then\n" * n + "python3 -m verl.trainer.main_ppo a=1\n" + "fi\n" * n
    text += "python3 -m verl.trainer.main_ppo b=2\n"
    (tmp_path / "deep.sh").write_text(text, encoding="utf-8")
    parsed = parse_file(tmp_path / "deep.sh")
    assert parsed.command.overrides == ["b=2"]
    assert sum("`if` evaluated" in n for n in parsed.notes) == 16
