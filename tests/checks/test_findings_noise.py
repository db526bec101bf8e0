"""What a check prints is what needs a look: the info findings that only say a value is fine (rules some launch
scripts have and verl does not) stay in --json but are not printed."""

from __future__ import annotations

import json

from conftest import ROOT, run_cli_many


def test_reassuring_infos_are_in_json_only() -> None:
    args = ["plan", "-c", str(ROOT / "examples" / "run.yaml"), "--set", "train.tensor_parallel=2",
            "--set", "train.pipeline_parallel=2", "--set", "train.rollout_tensor_parallel=4"]
    text, as_json = run_cli_many([args, [*args, "--json"]])
    assert text.code == as_json.code == 0, text.err
    codes = {f["code"] for f in json.loads(as_json.out)["findings"]}
    assert {"seed_rule_tp_pp_per_node", "seed_rule_gen_tp"} <= codes
    assert "seed_rule" not in text.out and "fine —" not in text.out
