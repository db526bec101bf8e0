"""One look inside the target before launch (orchestrator/preflight.py through orchestrator/machine_facts.collect_lookup): `check`,
`launch --dry-run` and `launch` run the same in-target look-up and give the same verdict (RV4-3: before, only
`launch` looked, 16 s into the launch, and `check` / `--dry-run` passed a spec it then refused).

Here the target is this host's Python environment (``container.runtime: host`` with ``container.python_env``:
this test venv, which has Hydra and no flash-attn; verl's config tree comes from the real 0.7.0 wheel under
.cache/verl). The Docker targets (a running container, a throw-away container of a local image) are
tests/orchestrator/test_target_lookup_docker.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.checks.verdict import decide
from verlctl.orchestrator.machine_facts import collect_facts, collect_lookup
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import clean_env, run_cli
from launch_support import free_port, write_run_files

ENV = sys.prefix  # this venv: python3, Hydra, no flash-attn
FLASH = "+actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
#: What needs no flash_attn on verl 0.7.0 FSDP off an NPU (verl/utils/attention_utils.py:27-30 unpads with it).
NO_FLASH = ["flash_attn", "remove_padding"]


def _need_verl() -> str:
    if not verlcompose.available("0.7.0"):
        if os.environ.get("CI"):
            pytest.fail(f"verl 0.7.0 missing under {verlcompose.CACHE}")
        pytest.skip(f"verl 0.7.0 not under {verlcompose.CACHE}")
    if importlib.util.find_spec("flash_attn") is not None:
        pytest.skip("flash_attn is installed here")
    return str(verlcompose.verl_root("0.7.0"))


def _spec(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    (tmp_path / "work").mkdir(exist_ok=True)
    paths = write_run_files(tmp_path)
    spec: dict[str, Any] = {
        "verl_version": "0.7.0", "algorithm": "grpo", "device": "gpu", "strategy": "fsdp",
        "paths": {"model": paths["paths.model"], "train_files": [paths["paths.train_files"]],
                  "val_files": [paths["paths.val_files"]], "checkpoints": str(tmp_path / "ckpt"),
                  "logs": str(tmp_path / "logs")},
        "container": {"runtime": "host", "python_env": ENV, "workdir": str(tmp_path / "work")},
        "cluster": {"devices": [0], "ray_port": free_port(), "dashboard_port": free_port()},
        "train": {"tensor_parallel": 1, "pipeline_parallel": 1},
    }
    for key, value in extra.items():
        spec.setdefault(key, {}).update(value) if isinstance(value, dict) else spec.__setitem__(key, value)
    return spec


def _errors(doc: dict[str, Any]) -> list[tuple[str, str | None, str, str | None]]:
    return sorted((f["code"], f["field"], f["message"], f["hint"]) for f in doc["findings"]
                  if f["severity"] == "error")


def test_check_dry_run_and_launch_refuse_flash_attn_missing_from_the_host_env_alike(tmp_path: Path) -> None:
    root = _need_verl()
    spec_file = tmp_path / "run.yaml"
    spec_file.write_text(yaml.safe_dump(_spec(tmp_path)))
    env = clean_env(PYTHONPATH=root, VERLCTL_STATE_DIR=str(tmp_path / "state"), COLUMNS="200")
    check = run_cli("check", "-c", str(spec_file), "--json", env=env, timeout=300)
    dry = run_cli("launch", "-c", str(spec_file), "--dry-run", "--json", env=env, timeout=300)
    launch = run_cli("launch", "-c", str(spec_file), "--yes", "--json", env=env, timeout=300)
    docs = [json.loads(r.out) for r in (check, dry, launch)]
    assert [r.code for r in (check, dry, launch)] == [2, 2, 2], [r.err for r in (check, dry, launch)]
    assert _errors(docs[0]) == _errors(docs[1]) == _errors(docs[2]), docs
    (missing,) = [f for f in docs[0]["findings"] if f["code"] == "target_package_missing"]
    assert missing["field"] == "features" and missing["message"].startswith(
        f"`actor_rollout_ref.model.use_remove_padding=True` and `{FLASH}` need the Python package flash-attn (module "
        "flash_attn)"), missing["message"]
    assert "this host's python3" in missing["message"]
    assert "`--disable remove_padding --disable flash_attn`" in missing["hint"], missing["hint"]
    for r in (check, dry, launch):
        assert "Traceback" not in r.err
    # launch refused before anything: no run recorded, no work-dir files, no log
    assert not (tmp_path / "state" / "runs").exists() or not any((tmp_path / "state" / "runs").iterdir())
    assert not (tmp_path / "work" / ".verlctl").exists() and not (tmp_path / "logs").exists()
    # No trigger: the features off (verl 0.7.0 on a GPU unpads with flash_attn too), the command says sdpa and
    # composes in the same env (nothing refused by it).
    spec_file.write_text(yaml.safe_dump(_spec(tmp_path, features={"disable": NO_FLASH})))
    off = json.loads(run_cli("check", "-c", str(spec_file), "--json", env=env, timeout=300).out)
    assert not [f for f in off["findings"] if f["code"].startswith("target_")], off["findings"]
    assert not [n for n in off["not_checked"] if n["rule"] == "target_preflight"], off["not_checked"]


def test_a_misspelled_key_is_refused_by_check_from_the_targets_own_verl(tmp_path: Path) -> None:
    root = _need_verl()
    bad = "actor_rollout_ref.actor.nope=1"
    resolved = load_spec(None, flags=_flat(_spec(tmp_path, features={"disable": NO_FLASH},
                                                 extra_overrides=[bad])), environ={})
    os.environ["PYTHONPATH"], old = root, os.environ.get("PYTHONPATH")
    try:
        facts = collect_facts(resolved, 20)
    finally:
        os.environ.pop("PYTHONPATH") if old is None else os.environ.__setitem__("PYTHONPATH", old)
    look = facts.target_lookup
    assert look is not None and look.finished and look.where == "this host's python3", look
    assert look.versions is not None and look.versions.python == ".".join(map(str, sys.version_info[:3]))
    assert facts.image_versions == look.versions  # one look-up: the versions come from it, not a second probe
    (f,) = [f for f in decide(resolved, facts).findings if f.code == "target_preflight_failed"]
    assert (f.field, f.severity.value) == ("extra_overrides", "error") and f.message.endswith(f"(override: {bad})")
    assert f.hint is not None and f.hint.startswith("fix the key")


def test_no_target_to_look_into_is_listed_as_not_checked_with_what_would_look(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    spec["container"]["workdir"] = str(tmp_path / "not-yet")
    resolved = load_spec(None, flags=_flat(spec), environ={})
    facts = collect_facts(resolved, 20)
    assert facts.target_lookup is None
    lines = decide(resolved, facts).not_checked_lines()
    assert any(ln.startswith("not checked: target_preflight (the work dir ") and "launch looks inside" in ln
               for ln in lines), lines


def test_a_look_up_ended_by_its_bound_says_so_and_launch_looks_again(tmp_path: Path) -> None:
    resolved = load_spec(None, flags=_flat(_spec(tmp_path)), environ={})
    # a bound no process start fits in (a microsecond): the look-up cannot finish, whatever the machine's load
    look, why = collect_lookup(resolved, None, 1e-6)
    assert look is not None and not look.finished and why == "", (look, why)
    assert look.message.startswith("the look-up did not finish within"), look.message
    (f,) = [f for f in decide(resolved, collect_facts(resolved, 20).model_copy(
        update={"target_lookup": look})).findings if f.code.startswith("target_")]
    assert f.code == "target_preflight_unfinished" and "launch runs it again" in f.message


def _flat(spec: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in spec.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
