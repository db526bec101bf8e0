"""``verlctl import`` of verl's async-trainer NPU scripts (issue 23): the fully-async policy scripts of v0.9.0 and
verl's separate_async ascend CI script of ``main`` (commit b0135c24, newer than 0.9.1).

Every override the script passes is accounted for: reproduced from a spec field, kept verbatim as an extra
override, or named in a note with the reason it is not imported. An override that vanishes without a word (the
import silently changing what the script does) fails here; so does a device split or a batch that the imported
spec gets wrong for the mode, and a spec that `plan` refuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.importer import import_script

from conftest import ROOT, clean_env, run_cli

OFFICIAL = ROOT / "tests" / "fixtures" / "official-scripts"
ENVIRON = {"HOME": "/home/verl", "PWD": "/verl"}
FA = "0.9.0/verl/experimental/fully_async_policy/shell"
SEPARATE = "main/tests/special_e2e/run_v1_separate_async_ascend.sh"
ASYNC_SCRIPTS = [
    f"{FA}/dapo_30b_a3b_math_fsdp_npu.sh",
    f"{FA}/geo3k_qwen3vl_30b_megatron_6_2_npu_async.sh",
    f"{FA}/geo3k_qwen3vl_8b_fsdp2_16_16_npu.sh",
    f"{FA}/grpo_qwen3_235b_megatron_npu.sh",
    SEPARATE,
]


def _import(rel: str):
    return import_script(OFFICIAL / rel, None, dict(ENVIRON))


@pytest.mark.parametrize("rel", ASYNC_SCRIPTS)
def test_every_override_of_the_script_is_reproduced_kept_or_named(rel: str) -> None:
    result = _import(rel)
    covered = {ov.raw for ov in result.covered}
    extras = set(result.extras)
    notes = "\n".join(result.notes)
    for ov in result.mapped.overrides:
        if ov.raw in covered or ov.raw in extras:
            continue
        assert f"{ov.raw} not imported" in notes or f"{ov.key} not imported" in notes, (ov.raw, result.notes)


def test_the_separate_async_ascend_script_names_the_key_verl_091_lacks() -> None:
    """The script's `actor.use_rollout_log_probs=True` composes on no verl config (0.9.1 nor its own commit):
    import leaves it out and says which key and why, and imports the rest as verl's separate_async/fsdp2 run."""
    result = _import(SEPARATE)
    doc = result.document
    assert (doc["verl_version"], doc["mode"], doc["strategy"], doc["device"]) == ("0.9.1", "separate_async", "fsdp2",
                                                                                "npu")
    key = "actor_rollout_ref.actor.use_rollout_log_probs"
    assert not any(e.startswith(key) for e in result.extras), result.extras
    assert not any(key in a for a in result.command_argv)
    note = next(n for n in result.notes if n.startswith(f"{key}=True not imported"))
    assert "verl 0.9.1's ppo_trainer config has no actor.use_rollout_log_probs" in note, note
    assert "bypass_mode=True" in note
    # the V1 trainer's keys the script sets are verlctl's spec fields
    assert doc["train"]["parameter_sync_step"] == 4
    assert doc["train"]["trainer_devices"] == 4 and doc["train"]["rollout_devices"] == 4
    assert doc["train"]["checkpoint_engine"] == "nccl"
    assert "algorithm.rollout_correction.bypass_mode=True" in result.extras


def test_the_key_stays_for_a_fully_async_run_whose_config_has_it(tmp_path: Path) -> None:
    """fully_async_ppo_trainer.yaml:87 has actor.use_rollout_log_probs: only main_ppo's config lacks it."""
    script = tmp_path / "fa.sh"
    script.write_text(
        "python3 -m verl.experimental.fully_async_policy.fully_async_main \\\n"
        "    actor_rollout_ref.actor.ppo_mini_batch_size=8 \\\n"
        "    actor_rollout_ref.actor.use_rollout_log_probs=False \\\n"
        "    async_training.trigger_parameter_sync_step=2 \\\n"
        "    data.train_batch_size=0 trainer.n_gpus_per_node=4 rollout.n_gpus_per_node=4\n",
        encoding="utf-8",
    )
    result = import_script(script, None, dict(ENVIRON), device="npu")
    assert "actor_rollout_ref.actor.use_rollout_log_probs=False" in result.extras, result.notes


def test_the_cli_prints_the_key_it_leaves_out(tmp_path: Path) -> None:
    out = tmp_path / "run.yaml"
    res = run_cli("import", str(OFFICIAL / SEPARATE), "-o", str(out), env=clean_env(HOME="/home/verl", COLUMNS="300"))
    assert res.code == 0, res.err
    text = " ".join(res.out.split())
    assert "separate_async / fsdp2 / npu" in text, text
    assert "note: actor_rollout_ref.actor.use_rollout_log_probs=True not imported: verl 0.9.1's ppo_trainer " \
           "config has no actor.use_rollout_log_probs" in text, text
    spec = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert not any("use_rollout_log_probs" in e for e in spec.get("extra_overrides", []))


@pytest.mark.parametrize(
    ("name", "strategy", "nnodes", "devices", "split", "rollout_nodes", "batch", "sync"),
    [
        # 16 trainer + 16 rollout NPUs, one node each: two 16-NPU nodes (a whole-node split), not 32 on one
        ("dapo_30b_a3b_math_fsdp_npu.sh", "fsdp", 2, 16, (16, 16), 1, 2 * 16, 2),
        ("geo3k_qwen3vl_8b_fsdp2_16_16_npu.sh", "fsdp2", 2, 16, (16, 16), 1, 4 * 64, 4),
        ("grpo_qwen3_235b_megatron_npu.sh", "megatron", 16, 16, (16, 16), 8, 1 * 128, 1),
        # 4 trainer + 12 rollout of each of 2 nodes of 16 (n_gpus_training = NGPUS_PER_NODE - n_gpus_rollout)
        ("geo3k_qwen3vl_30b_megatron_6_2_npu_async.sh", "megatron", 2, 16, (4, 12), None, 4 * 16, 4),
    ],
)
def test_fully_async_scripts_import_as_fully_async_with_their_device_split(
    name: str, strategy: str, nnodes: int, devices: int, split: tuple[int, int], rollout_nodes: int | None,
    batch: int, sync: int,
) -> None:
    result = _import(f"{FA}/{name}")
    doc = result.document
    assert (doc["verl_version"], doc["mode"], doc["strategy"]) == ("0.9.1", "fully_async", strategy)
    assert doc["cluster"]["nnodes"] == nnodes
    assert doc["cluster"]["devices"] == list(range(devices))
    train = doc["train"]
    assert (train["trainer_devices"], train["rollout_devices"]) == split
    assert train.get("rollout_nodes") == rollout_nodes
    # data.train_batch_size=0 (the rollouter streams prompts): the prompts between two weight syncs
    assert train["train_batch_size"] == batch and train["parameter_sync_step"] == sync
    assert result.command_argv.count("data.train_batch_size=0") == 1
    assert f"async_training.trigger_parameter_sync_step={sync}" in result.command_argv
    if rollout_nodes:
        assert any("whole-node split" in n and f"train.rollout_nodes={rollout_nodes}" in n for n in result.notes)
        assert f"rollout.nnodes={rollout_nodes}" in result.command_argv
        assert f"trainer.nnodes={nnodes - rollout_nodes}" in result.command_argv
    else:
        assert not any("whole-node split" in n for n in result.notes)


def test_an_imported_fully_async_script_plans(tmp_path: Path) -> None:
    """The 235B script (8 trainer + 8 rollout nodes, mini-batch 128) passes verlctl's fully_async rules."""
    out = tmp_path / "run.yaml"
    env = clean_env(HOME="/home/verl", COLUMNS="200")
    res = run_cli("import", str(OFFICIAL / FA / "grpo_qwen3_235b_megatron_npu.sh"), "-o", str(out), env=env)
    assert res.code == 0, res.err
    res = run_cli("plan", "-c", str(out), "--set", "paths.model=/m/Qwen3-235B-A22B", "--set",
                  "paths.train_files=/d/train.parquet", "--set", "paths.val_files=/d/test.parquet", env=env)
    assert res.code == 0, res.out + res.err
    assert "fully_async" in res.out
    assert not [line for line in res.out.splitlines() if line.startswith("error")], res.out


@pytest.mark.parametrize(
    ("test", "value"),
    [
        ('[ "$mode" = "async" ]', "True"),
        ('[ "$mode" == async ]', "True"),
        ('[ "$mode" != "async" ]', "False"),
        ('[ "$mode" = "sync" ]', "False"),
        ("[ $mode = async ]", "True"),  # one word, unquoted: the same test in bash
        ('[ "$other" = "async" ]', None),  # a variable only the environment gives: not evaluated
        ("[ $empty = async ]", None),  # unquoted and empty: `[ = async ]`, another test in bash
        ('[ "$mode" = a* ]', None),
    ],
)
def test_the_reader_evaluates_single_bracket_string_tests(test: str, value: str | None) -> None:
    """verl's fully-async scripts set return_raw_chat=True under `if [ "$rollout_mode" = "async" ]`."""
    from verlctl.inputs.shell_script import parse_script

    text = (
        'mode="async"\nempty=""\nraw="False"\n'
        f"if {test}; then\n    raw=True\nfi\n"
        "python3 -m verl.trainer.main_ppo data.return_raw_chat=${raw}\n"
    )
    if value is None:  # not evaluated: the block may set raw, which the command reads (refused, not guessed)
        from verlctl.inputs.shell_script import ScriptError

        with pytest.raises(ScriptError, match=r"uses raw, which the `if` block at lines 4-6 may set"):
            parse_script(text, "t.sh", {})
        return
    parsed = parse_script(text, "t.sh", {})
    assert parsed.command.overrides == [f"data.return_raw_chat={value}"]
    assert any("`if` evaluated" in n for n in parsed.notes), parsed.notes


def _fully_async(tmp_path: Path, *words: str) -> Any:
    script = tmp_path / "fa.sh"
    script.write_text("python3 -m verl.experimental.fully_async_policy.fully_async_main \\\n    "
                      + " \\\n    ".join(words) + "\n", encoding="utf-8")
    return import_script(script, None, dict(ENVIRON), device="npu")


@pytest.mark.parametrize(
    ("words", "nnodes", "devices", "rollout_nodes"),
    [
        # no node counts: one node each side
        (("trainer.n_gpus_per_node=16", "rollout.n_gpus_per_node=16"), 2, 16, 1),
        # a count that is no node count (0) counts as one node
        (("trainer.nnodes=0", "rollout.nnodes=0", "trainer.n_gpus_per_node=16", "rollout.n_gpus_per_node=16"), 2, 16,
         1),
        (("trainer.nnodes=2", "rollout.nnodes=3", "trainer.n_gpus_per_node=16", "rollout.n_gpus_per_node=16"), 5, 16,
         3),
        # unequal pools that cannot share a node: each side's nodes, the larger side's devices a node
        (("trainer.n_gpus_per_node=16", "rollout.n_gpus_per_node=8"), 2, 16, 1),
        # 8 + 8 fit one 16-device node: a per-node split
        (("trainer.n_gpus_per_node=8", "rollout.n_gpus_per_node=8"), None, 16, None),
    ],
)
def test_the_device_split_of_a_fully_async_script(tmp_path: Path, words: tuple[str, ...], nnodes: int | None,
                                                  devices: int, rollout_nodes: int | None) -> None:
    result = _fully_async(tmp_path, "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                          "async_training.trigger_parameter_sync_step=2", "data.train_batch_size=0", *words)
    doc = result.document
    assert doc["cluster"].get("nnodes") == nnodes, doc["cluster"]
    assert doc["cluster"]["devices"] == list(range(devices))
    assert doc["train"].get("rollout_nodes") == rollout_nodes
    per = {w.split("=")[0]: int(w.split("=")[1]) for w in words}
    assert doc["train"]["trainer_devices"] == per["trainer.n_gpus_per_node"]
    assert doc["train"]["rollout_devices"] == per["rollout.n_gpus_per_node"]
    if rollout_nodes and "trainer.nnodes=0" not in words:  # a script's own 0 stays an extra override (it wins)
        assert f"rollout.nnodes={rollout_nodes}" in result.command_argv
        assert f"trainer.nnodes={nnodes - rollout_nodes}" in result.command_argv
        assert f"rollout.n_gpus_per_node={per['rollout.n_gpus_per_node']}" in result.command_argv


@pytest.mark.parametrize(
    ("words", "batch"),
    [
        (("actor_rollout_ref.actor.ppo_mini_batch_size=8", "async_training.trigger_parameter_sync_step=2",
          "data.train_batch_size=0"), 16),
        (("actor_rollout_ref.actor.ppo_mini_batch_size=1", "async_training.trigger_parameter_sync_step=1",
          "data.train_batch_size=0"), 1),
        # no mini-batch (verl's default) or a 0 one: the batch is verlctl's own, not derived
        (("async_training.trigger_parameter_sync_step=2", "data.train_batch_size=0"), None),
        (("actor_rollout_ref.actor.ppo_mini_batch_size=0", "async_training.trigger_parameter_sync_step=2",
          "data.train_batch_size=0"), None),
    ],
)
def test_a_fully_async_batch_is_the_prompts_between_two_syncs(tmp_path: Path, words: tuple[str, ...],
                                                               batch: int | None) -> None:
    result = _fully_async(tmp_path, "trainer.n_gpus_per_node=4", "rollout.n_gpus_per_node=4", *words)
    train = result.document["train"]
    assert train.get("train_batch_size") == batch, train
    assert train["parameter_sync_step"] == (2 if "async_training.trigger_parameter_sync_step=2" in words else 1)
