"""verl/compose.py and verl/features.py: values that still compose but would be wrong, and the bookkeeping
around the overrides (issue 16, ``reference/mutation.md``): the attention setting per device × strategy ×
flash_attn on/off, FSDP recompute, the batched-token floor, an extra override replacing a built-in key,
notes kept on their own lines, config-group keys, feature reasons, ``verl_version: auto`` with a container
version, and the immutable feature tables."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from verlctl.spec.resolve import load_spec
from verlctl.verl import compose
from verlctl.verl.compose import OverrideLine, TrainingCommand, _dedupe, build_command
from verlctl.verl.entrypoints import DEFAULT_VERSION
from verlctl.verl.features import BY_NAME, CONFLICTS, FEATURES, Emit, mask_for, mask_legend
from verlctl.verl.table import MEGATRON, STATE, Ov, when

from conftest import BASE_PATHS

AR = "actor_rollout_ref"
OTC = f"{AR}.actor.megatron.override_transformer_config"


def command(container_version: str | None = None, **flags: Any) -> TrainingCommand:
    return build_command(load_spec(None, flags={**BASE_PATHS, **flags}, environ={}), container_version)


def attention(cmd: TrainingCommand) -> list[str]:
    return [o.text for o in cmd.overrides if "attn" in o.key or "attention" in o.key]


ATTENTION = {
    # (device, strategy, flash_attn on): the attention overrides
    ("npu", "megatron", True): [f"+{OTC}.use_flash_attn=True"],
    ("npu", "megatron", False): [f"+{OTC}.use_flash_attn=False"],
    ("npu", "fsdp", True): [],  # transformers' NPU flash-attention integration, verl's default
    ("npu", "fsdp", False): [f"+{AR}.model.override_config.attn_implementation=eager"],
    ("npu", "fsdp2", True): [],
    ("npu", "fsdp2", False): [f"+{AR}.model.override_config.attn_implementation=eager"],
    ("gpu", "megatron", True): [f"{OTC}.attention_backend=flash"],
    ("gpu", "megatron", False): [f"{OTC}.attention_backend=unfused"],
    ("gpu", "fsdp", True): [f"+{AR}.model.override_config.attn_implementation=flash_attention_2"],
    ("gpu", "fsdp", False): [f"+{AR}.model.override_config.attn_implementation=sdpa"],
    ("gpu", "fsdp2", True): [f"+{AR}.model.override_config.attn_implementation=flash_attention_2"],
    ("gpu", "fsdp2", False): [f"+{AR}.model.override_config.attn_implementation=sdpa"],
}


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
@pytest.mark.parametrize(("device", "strategy", "on"), list(ATTENTION), ids=lambda v: str(v))
def test_attention_setting_per_device_strategy_and_flash_attn(version: str, device: str, strategy: str, on: bool) -> None:
    flags: dict[str, Any] = {"verl_version": version, "device": device, "strategy": strategy}
    if not on:
        flags["features.disable"] = ["flash_attn"]
    assert attention(command(**flags)) == ATTENTION[(device, strategy, on)]


@pytest.mark.parametrize("strategy", ["fsdp", "fsdp2"])
def test_fsdp_recompute_turns_on_gradient_and_entropy_checkpointing(strategy: str) -> None:
    texts = command(strategy=strategy, **{"features.enable": ["recompute"]}).override_texts()
    assert f"{AR}.model.enable_gradient_checkpointing=True" in texts
    assert f"{AR}.actor.entropy_checkpointing=True" in texts
    assert f"{AR}.actor.entropy_checkpointing=False" not in texts


def rollout_limits(version: str, chunked: str, prompt: int, response: int) -> list[str]:
    flags = {"verl_version": version, "train.max_prompt_length": prompt, "train.max_response_length": response}
    if chunked:
        flags[f"features.{chunked}"] = ["chunked_prefill"]
    texts = command(**flags).override_texts()
    return [t for t in texts if "max_num_batched_tokens" in t or "max_model_len" in t or "chunked_prefill" in t]


@pytest.mark.parametrize(("prompt", "response", "tokens"), [(512, 1024, 8192), (2048, 8192, 10240), (4096, 4096, 8192)])
def test_batched_tokens_hold_a_whole_sequence_and_at_least_8192(prompt: int, response: int, tokens: int) -> None:
    # verl 0.9.1 with chunked prefill turned off: vLLM needs max_num_batched_tokens >= max_model_len, and verl
    # sets an unset max_model_len to max_position_embeddings (workers/rollout/vllm_rollout/vllm_async_server.py
    # _validate_configs): max_model_len is prompt+response, the batch at least that and never below 8192.
    assert rollout_limits("0.9.1", "disable", prompt, response) == [
        f"{AR}.rollout.enable_chunked_prefill=False",
        f"{AR}.rollout.max_model_len={prompt + response}",
        f"{AR}.rollout.max_num_batched_tokens={tokens}",
    ]
    # verl's default (chunked prefill on) stands: nothing written, nor when it is turned on explicitly
    assert rollout_limits("0.9.1", "", prompt, response) == []
    assert rollout_limits("0.9.1", "enable", prompt, response) == [f"{AR}.rollout.enable_chunked_prefill=True"]
    # verl 0.7.0 drops a False flag (it cannot turn chunked prefill off) and sets max_model_len itself
    assert rollout_limits("0.7.0", "disable", prompt, response) == []
    assert rollout_limits("0.7.0", "", prompt, response) == []


@pytest.mark.parametrize("raw", ["trainer.total_training_steps=7", "~trainer.total_training_steps=7"])
def test_an_extra_override_replaces_a_built_in_key(raw: str) -> None:
    base = command()
    assert [o.text for o in base.overrides if o.key == "trainer.total_training_steps"] == [
        "trainer.total_training_steps=4"
    ]
    cmd = command(extra_overrides=[raw])
    same = [o for o in cmd.overrides if o.key == "trainer.total_training_steps"]
    assert [(o.text, o.section) for o in same] == [(raw, "extra")]
    assert len(cmd.overrides) == len(base.overrides)


def test_an_extra_override_of_a_new_key_is_added_last() -> None:
    cmd = command(extra_overrides=["+trainer.verlctl_test_key=1"])
    assert cmd.override_texts()[-1] == "+trainer.verlctl_test_key=1"
    assert cmd.overrides[-1].key == "trainer.verlctl_test_key"


def notes(cmd: TrainingCommand) -> dict[str, str | None]:
    return {o.key: o.note for o in cmd.overrides}


RECOMPUTE_NOTE = "the keys exist with null defaults, so they are set without '+' (a typo then fails to compose)"
DAPO_NOTE = "DAPO: no KL, clip-higher (0.2 / 0.28), token-level loss"


CHUNKED_NOTE = "verl's default is True: written only when the feature is set explicitly"
LIMITS_NOTE = "without chunked prefill vLLM needs max_num_batched_tokens >= max_model_len, and verl 0.9.1 sets"
GRAD_OFFLOAD_NOTE = "verl 0.9.1 has no actor.megatron.grad_offload"


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_each_note_stays_on_the_lines_of_its_own_setting(version: str) -> None:
    flags = {"features.enable": ["offload", "recompute", "prefix_cache"], "features.disable": ["chunked_prefill"]}
    cmd = command(verl_version=version, **flags)
    by_key = notes(cmd)
    recompute_keys = [f"{OTC}.recompute_granularity", f"{OTC}.recompute_method", f"{OTC}.recompute_num_layers"]
    assert [k for k, n in by_key.items() if n and RECOMPUTE_NOTE in n] == recompute_keys
    assert all(by_key[k] == RECOMPUTE_NOTE for k in recompute_keys)
    dapo = [k for k, n in by_key.items() if n and DAPO_NOTE in n]
    assert dapo and all(by_key[k] == DAPO_NOTE for k in dapo)
    assert by_key[f"{AR}.rollout.enable_prefix_caching"] == CHUNKED_NOTE  # the same wording, its own row
    limits = [f"{AR}.rollout.max_model_len", f"{AR}.rollout.max_num_batched_tokens"]
    if version == "0.9.1":
        assert by_key[f"{AR}.rollout.enable_chunked_prefill"] == CHUNKED_NOTE
        assert [k for k, n in by_key.items() if n and LIMITS_NOTE in n] == limits
        assert by_key[limits[0]] == by_key[limits[1]] == BY_NAME["chunked_prefill"].emits[1].note
        # the note-only row (no grad_offload on 0.9.1) joins the offload section's own last line, not the next
        carrying = [(o.section, o.key) for o in cmd.overrides if o.note and GRAD_OFFLOAD_NOTE in o.note]
        assert carrying == [("feature:offload", f"{AR}.ref.megatron.param_offload")]
    else:
        # 0.7.0 cannot turn chunked prefill off (a False flag never reaches vLLM): nothing is written
        assert not [k for k in by_key if "chunked_prefill" in k or k in limits]
        assert not [k for k, n in by_key.items() if n and GRAD_OFFLOAD_NOTE in n]
    assert not [k for k, n in by_key.items() if n and "None" in n]
    assert "" not in by_key  # a note-only row is no override of its own


def test_a_note_only_row_lands_on_exactly_one_line() -> None:
    # verl 0.9.1 has no actor.megatron.grad_offload: the offload feature says so on the next line
    cmd = command(verl_version="0.9.1", **{"features.enable": ["offload"]})
    carrying = [o.key for o in cmd.overrides if o.note and "has no actor.megatron.grad_offload" in o.note]
    assert len(carrying) == 1
    assert "grad_offload" not in " ".join(cmd.override_texts())
    assert not [o for o in command(verl_version="0.7.0", **{"features.enable": ["offload"]}).overrides
                if o.note and "has no actor.megatron.grad_offload" in o.note]  # fmt: skip


def test_a_config_group_override_is_keyed_by_its_group() -> None:
    groups = [o for o in command(verl_version="0.9.1").overrides if o.section == "config group"]
    assert groups and all(o.text.startswith(f"{o.key}=") for o in groups)
    assert [(o.key, o.text) for o in groups] == [("model_engine", "model_engine=megatron")]


def test_feature_reasons_name_where_the_state_comes_from() -> None:
    reasons = {n: s.reason for n, s in command(**{"features.enable": ["vpp"]}).features.items()}
    assert reasons["remove_padding"] == "default (performance feature)"
    assert reasons["offload"] == "default off (memory feature, added on out-of-memory)"
    assert reasons["recompute"] == "default off (memory feature, added on out-of-memory)"
    # verl's own default is on: "off by default" writes nothing and says so (fidelity audit D1)
    assert reasons["prefix_cache"] == "default off (optional feature); verl's default (on): nothing is written"
    assert reasons["chunked_prefill"] == "default off (optional feature); verl's default (on): nothing is written"
    assert reasons["dynamic_batch"] == "default (performance feature)"
    assert reasons["vpp"] == "enabled (flag)"


def test_a_feature_on_by_default_is_not_explicit() -> None:
    states = command().features
    assert not [n for n, s in states.items() if s.explicit_on]
    # gradient_checkpointing is on by default and not applicable to Megatron: no "you asked for it" note
    assert states["gradient_checkpointing"].applicable is False
    assert not [f for f in command().findings if f.code == "feature_not_applicable"]


def test_auto_version_takes_the_container_version() -> None:
    cmd = command("0.7.0", verl_version="auto")
    assert cmd.version == "0.7.0" and cmd.findings == []
    planned = command(verl_version="auto")
    assert planned.version == DEFAULT_VERSION
    assert [f.code for f in planned.findings] == ["verl_version_auto"]
    assert command("0.7.0", verl_version="0.9.1").version == "0.9.1"  # an explicit version wins


def test_swanlab_key_unused_only_outside_cloud_mode() -> None:
    swan = {"logging.swanlab.enabled": True, "logging.swanlab.host": "http://192.0.2.1:8000",
            "logging.swanlab.api_key": "k"}  # fmt: skip
    codes = lambda **f: [x.code for x in command(**{**swan, **f}).findings]  # noqa: E731
    assert codes(**{"logging.swanlab.mode": "cloud"}) == []
    assert codes(**{"logging.swanlab.mode": "local"}) == ["swanlab_key_unused"]
    assert codes(**{"logging.swanlab.mode": "offline"}) == ["swanlab_key_unused"]
    assert codes(**{"logging.swanlab.mode": "local", "logging.swanlab.enabled": False}) == []


def test_the_mask_legend_names_the_seven_bits_in_order() -> None:
    assert mask_legend() == "RemovePadding DynamicBatchSize Offload PrefixCache Recompute SwapOptimizer VPP"


def test_the_mask_of_some_states_counts_the_missing_ones_off() -> None:
    assert mask_for({"vpp": True, "offload": False}) == "0000001"
    assert mask_for({}) == "0000000"


def test_the_feature_tables_are_immutable() -> None:
    """They are module-level and shared by every plan: a change through one reference would change them all."""
    vpp = BY_NAME["vpp"]
    for obj, attr in ((vpp, "default_on"), (vpp.emits[0], "note"), (vpp.requires[0], "message"),
                      (CONFLICTS[0], "notice")):  # fmt: skip
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, attr, None)


def prefix_lines(cmd: TrainingCommand) -> list[str]:
    return [t for t in cmd.override_texts() if "enable_prefix_caching" in t]


def test_off_is_written_only_when_asked_for_and_the_target_verl_can_turn_it_off() -> None:
    """Fidelity audit D1 / S1 / S4: a default-off feature whose verl default is on writes nothing; an explicit
    off is written on 0.9.1, stays vLLM's default on 0.7.0 (with a warning), and means nothing for sglang."""
    default = command(verl_version="0.9.1")
    assert prefix_lines(default) == [] and default.features["prefix_cache"].label() == "verl default"
    off = command(verl_version="0.9.1", **{"features.disable": ["prefix_cache"]})
    assert prefix_lines(off) == [f"{AR}.rollout.enable_prefix_caching=False"]
    assert off.features["prefix_cache"].label() == "off" and off.features["prefix_cache"].reason == "disabled (flag)"
    old = command(verl_version="0.7.0", **{"features.disable": ["prefix_cache"]})
    assert prefix_lines(old) == [] and old.features["prefix_cache"].label() == "verl default"
    assert old.features["prefix_cache"].reason.startswith("disabled (flag); vLLM's default (on): verl 0.7.0 passes")
    assert [(f.code, f.field) for f in old.findings] == [("feature_cannot_turn_off", "features")]
    sglang = command(verl_version="0.9.1", **{"train.rollout_engine": "sglang", "features.enable": ["prefix_cache"]})
    assert prefix_lines(sglang) == [] and sglang.features["prefix_cache"].label() == "n/a"
    assert [f.code for f in sglang.findings] == ["feature_not_applicable"]


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_a_zero_mask_bit_writes_off_only_for_a_feature_on_by_default(version: str) -> None:
    """Seed 1: a 0 bit turns a default-on feature off, and deletes the line of a default-off one."""
    texts = command(verl_version=version, **{"features.mask": "0000000"}).override_texts()
    assert f"{AR}.model.use_remove_padding=False" in texts  # remove_padding is on by default
    assert f"{AR}.actor.use_dynamic_bsz=False" in texts
    assert not [t for t in texts if "enable_prefix_caching" in t or "param_offload" in t or "recompute_" in t]


def test_a_note_only_row_without_lines_of_its_own_goes_to_its_sections_next_line() -> None:
    """_dedupe: a note-only line (a feature with no override of its own before it) lands on the next line of
    the same section, joined to that line's own note, and never crosses into another section."""
    def lines() -> list[OverrideLine]:
        return [OverrideLine("", None, "", "feature:a", "A-note", raw=""), OverrideLine("a.x", 1, "", "feature:a"),
                OverrideLine("a.y", 2, "", "feature:a"), OverrideLine("", None, "", "feature:b", "B-note", raw=""),
                OverrideLine("b.x", 3, "", "feature:b", "own"), OverrideLine("", None, "", "feature:c", "C-note", raw=""),
                OverrideLine("d.x", 4, "", "feature:d")]  # fmt: skip
    assert [(o.key, o.note) for o in _dedupe(lines())] == [
        ("a.x", "A-note"), ("a.y", None), ("b.x", "own; B-note"), ("d.x", None)
    ]


def test_feature_aliases_and_the_hint_for_an_unknown_name() -> None:
    cmd = command(verl_version="0.9.1", **{"features.enable": ["Prefix-Caching", "recomputation"],
                                           "features.disable": ["DYNBSZ"]})  # fmt: skip
    assert cmd.findings == []
    assert [(n, s.on, s.explicit_on, s.explicit_off) for n, s in cmd.features.items()
            if n in ("prefix_cache", "recompute", "dynamic_batch")] == [
        ("dynamic_batch", False, False, True), ("prefix_cache", True, True, False), ("recompute", True, True, False)
    ]  # fmt: skip
    assert f"{AR}.rollout.enable_prefix_caching=True" in cmd.override_texts()
    close = [f for f in command(**{"features.enable": ["vppp"]}).findings if f.code == "unknown_feature"]
    assert [(f.message, f.hint) for f in close] == [("unknown feature 'vppp'", "did you mean 'vpp'?")]
    far = [f for f in command(**{"features.disable": ["zzz"]}).findings if f.code == "unknown_feature"]
    assert [(f.message, f.hint) for f in far] == [("unknown feature 'zzz'", f"known: {', '.join(sorted(BY_NAME))}")]


def test_a_note_only_row_joins_the_note_of_its_features_last_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """The note-only row (as verl 0.9.1's missing grad_offload) is appended to the feature's last line, after
    that line's own note. The shipped tables have no such last line with a note, so this one is built here."""
    emits = (
        Emit(when(strategies=MEGATRON), (Ov(f"{AR}.actor.megatron.param_offload", STATE),)),
        Emit(when(strategies=MEGATRON), (Ov(f"{AR}.actor.megatron.optimizer_offload", STATE),), note="own note"),
        Emit(when(strategies=MEGATRON), note="the note-only row"),
    )
    table = tuple(dataclasses.replace(f, emits=emits) if f.name == "offload" else f for f in FEATURES)
    monkeypatch.setattr(compose, "FEATURES", table)
    cmd = command(**{"features.enable": ["offload"]})
    assert [(o.key, o.note) for o in cmd.overrides if o.section == "feature:offload"] == [
        (f"{AR}.actor.megatron.param_offload", None),
        (f"{AR}.actor.megatron.optimizer_offload", "own note; the note-only row"),
    ]


def test_dynamic_batch_sets_the_token_budget_only_when_on() -> None:
    def budget(**flags: Any) -> list[str]:
        texts = command(**{"train.max_prompt_length": 1024, "train.max_response_length": 3072, **flags}).override_texts()
        return [t for t in texts if "max_token_len" in t or "dynamic_bsz" in t]

    assert budget() == [
        f"{AR}.actor.use_dynamic_bsz=True", f"{AR}.ref.log_prob_use_dynamic_bsz=True",
        f"{AR}.rollout.log_prob_use_dynamic_bsz=True", f"{AR}.actor.ppo_max_token_len_per_gpu=4096",
        f"{AR}.ref.log_prob_max_token_len_per_gpu=4096", f"{AR}.rollout.log_prob_max_token_len_per_gpu=4096",
    ]  # fmt: skip
    assert budget(**{"features.disable": ["dynamic_batch"]}) == [
        f"{AR}.actor.use_dynamic_bsz=False", f"{AR}.ref.log_prob_use_dynamic_bsz=False",
        f"{AR}.rollout.log_prob_use_dynamic_bsz=False",
    ]  # fmt: skip
