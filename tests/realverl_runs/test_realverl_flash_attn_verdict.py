"""flash_attn on an image without the flash-attn package, on real verl 0.9.1 on CPU (reference/realverl.md; the
image, the user's spec and the run lock come from tests/realverl_support.py): `check`, `launch --dry-run` and
`launch` refuse it alike, before anything starts, with the fix (before: ImportError at model init after minutes;
then only `launch` looked). ``launch --canary`` and Ray's CPU count on a small host are walked in
tests/realverl_runs/test_realverl.py's life of a run.

What is a double: the accelerator only (tests/realverl/verl_cpu_device_double.py, tests/image/nvidia-smi).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

pytest.importorskip("realverl_support")  # the real-verl image's fixtures (tests/realverl_support.py)

pytestmark = [pytest.mark.docker, pytest.mark.real_verl, pytest.mark.xdist_group("real_verl")]


def test_flash_attn_without_the_package_is_one_verdict_before_launch_with_the_fix(realverl_env: Any) -> None:
    """RV4-3: `check` and `launch --dry-run` passed what `launch` refused 16 s later. Now the three look into the
    user's running container the same way and refuse alike, before anything starts."""
    env = realverl_env
    env.spec["features"] = {}  # the default: flash_attn on
    spec = str(env.spec_file)
    t0 = time.monotonic()
    check = env.cli("check", "-c", spec, "--json", timeout=600)
    check_s = time.monotonic() - t0
    dry = env.cli("launch", "-c", spec, "--dry-run", "--json", timeout=600)
    t0 = time.monotonic()
    res = env.cli("launch", "-c", spec, "--yes", "--json", "--verify-timeout", "600", timeout=900)
    took = time.monotonic() - t0
    assert [r.code for r in (check, dry, res)] == [2, 2, 2], [r.out[-3000:] + r.err[-2000:] for r in (check, dry, res)]

    def errors(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
        return sorted((f["code"], f["field"], f["message"]) for f in doc["findings"] if f["severity"] == "error")

    docs = [json.loads(r.out) for r in (check, dry, res)]
    assert errors(docs[0]) == errors(docs[1]) == errors(docs[2]), [errors(d) for d in docs]
    (missing,) = [f for f in docs[0]["findings"] if f["code"] == "target_package_missing"]
    assert missing["field"] == "features"
    assert missing["message"].startswith("`+actor_rollout_ref.model.override_config.attn_implementation="
                                         "flash_attention_2` needs the Python package flash-attn"), missing
    assert f"(looked up in container {env.name})" in missing["message"]
    assert "`--disable flash_attn`" in missing["hint"] and "Traceback" not in res.err
    assert not list(env.state.rglob("events.jsonl"))  # refused before anything was started or recorded
    assert took < 300 and check_s < 300, (check_s, took)
    print(f"flash-attn verdict: check {check_s:.1f} s, launch refused in {took:.1f} s")
