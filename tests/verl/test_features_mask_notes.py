"""``verlctl features --mask M`` says what the mask's features exclude or need: the conflict notice (swap_optimizer
forces optimizer offload off), the keys an on feature turns off (vpp: use_mbridge on NPU/Megatron/verl 0.7.0) and
the prerequisites (vpp: PP > 1), in the table's text and in --json."""

from __future__ import annotations

import json

from conftest import run_cli_many


def test_mask_notes_name_what_an_exclusion_turns_off() -> None:
    both, vpp, plain, as_json = run_cli_many([
        ["features", "--mask", "1110011"], ["features", "--mask", "1100001"], ["features", "--mask", "1100000"],
        ["features", "--mask", "1110011", "--json"],
    ], env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert both.code == vpp.code == plain.code == as_json.code == 0
    assert "optimizer offload is forced off" in both.out
    assert "vpp turns off actor_rollout_ref.actor.megatron.use_mbridge (megatron, npu, verl 0.7.0)" in vpp.out
    assert "vpp needs pipeline parallelism > 1" in vpp.out
    assert "optimizer offload is forced off" not in vpp.out
    assert "mask 1100000: no feature of it excludes or needs another" in plain.out
    notes = json.loads(as_json.out)["notes"]
    assert any("optimizer offload is forced off" in n for n in notes)
    assert any("use_mbridge" in n for n in notes)
