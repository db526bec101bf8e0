"""Small honesty fixes of issue 24: `detect` without an engine says so in words and reads at 80 columns (F7);
quickstart's messages name environment variables, not spec keys or --set (F3)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT, clean_env, run_cli
from launch_support import write_run_files


def test_detect_without_an_engine_says_so_in_words(tmp_path: Path) -> None:
    res = run_cli("detect", "docker", env=clean_env(DOCKER_HOST=f"unix://{tmp_path}/no-such.sock", COLUMNS="200"))
    out = res.out + res.err
    assert "no Docker engine is running here (no socket at unix://" in out and "start dockerd" in out, out
    assert "FileNotFoundError" not in out and "Connection aborted" not in out and "(2," not in out


def test_detect_models_at_80_columns_breaks_no_word(tmp_path: Path) -> None:
    write_run_files(tmp_path)
    res = run_cli("detect", "models", "--scan-root", str(tmp_path), env=clean_env(COLUMNS="80"))
    assert res.code == 0, res.err
    words = set(res.out.split())
    assert "Qwen3ForCausalLM," in words and str(tmp_path / "models" / "Qwen3-tiny") in words, res.out
    assert "layers," in words and "heads/KV," in words
    empty = run_cli("detect", "models", "--scan-root", str(tmp_path / "data"), env=clean_env(COLUMNS="80"))
    assert empty.out.startswith("Models: no model directories found"), empty.out


def test_quickstart_names_environment_variables(tmp_path: Path) -> None:
    res = run_cli("quickstart", "--dry-run", env=clean_env(VERLCTL_STATE_DIR=str(tmp_path)))
    assert res.code == 2
    line = next(ln for ln in res.err.splitlines() if ln.startswith("error:"))
    assert "MODEL_PATH (paths.model)" in line and "TRAIN_FILE (paths.train_files)" in line, line
    assert "--set" not in line and "stdin is not a terminal" not in line


def test_quickstart_hints_name_the_variable_of_a_spec_key() -> None:
    from verlctl.orchestrator.flow import env_name_for, in_env_words

    assert env_name_for("container.image") == "VERLCTL_CONTAINER__IMAGE" and env_name_for("paths.model") == "MODEL_PATH"
    hint = in_env_words("pass --pull (or set container.pull: true), or choose a local image with container.image")
    assert hint is not None and "VERLCTL_CONTAINER__IMAGE (container.image)" in hint
    assert not re.search(r"(?<![(\w])container\.image(?!\))", hint), hint


def test_generated_scripts_and_findings_use_the_users_words(tmp_path: Path) -> None:
    # F9: not "the upper/lower script" or "the seed's rule": say what each script does and whose rule it is.
    root = ROOT
    out = tmp_path / "out"
    res = run_cli("plan", "-c", str(root / "examples" / "run.yaml"), "-o", str(out), "--json",
                  "--set", "train.tensor_parallel=2", "--set", "train.pipeline_parallel=2",
                  "--set", "train.rollout_tensor_parallel=4",
                  env=clean_env(), cwd=root)
    assert res.code == 0, res.err
    texts = [p.read_text() for p in out.iterdir()] + [res.out]
    codes = {f["code"] for f in __import__("json").loads(res.out)["findings"]}
    assert {"seed_rule_tp_pp_per_node", "seed_rule_gen_tp"} <= codes, codes  # the findings are there ...
    for text in texts:  # ... in words a user knows
        low = text.lower()
        assert "upper script" not in low and "lower script" not in low and "the seed" not in low, text[:300]
    start = (out / "start_verl.sh").read_text().splitlines()[1]
    assert "starts Ray on this node, then the training (run_training.sh)" in start
