"""What a user and a script touch around the flows (issue 15, "Scriptable and consistent"; newcomer review
D8, D9, D10; wizard review D16, D21): `--json` on every reporting command with empty states as JSON, one
exit-code table, run ids never cut, no word broken at 80 columns, `check` and `launch` agreeing about a
missing host `npu-smi`, and help/README texts without the project's internal jargon."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import ROOT, CliResult, clean_env, run_cli, run_cli_many

LONG_A = "20261130-194512-verl-dapo-qwen3-8b-long-experiment-a1b2"
LONG_B = "20261130-194513-verl-dapo-qwen3-8b-long-experiment-c3d4"
NO_TOOL_PATH = "/usr/bin:/bin"  # no npu-smi / nvidia-smi on this machine's PATH


def cli(state: Path, *args: str, columns: int = 200, **env: str) -> CliResult:
    return run_cli(*args, env=clean_env(VERLCTL_STATE_DIR=str(state), COLUMNS=str(columns), **env))


def write_record(state: Path, run_id: str, **over: object) -> None:
    d = state / "runs" / run_id
    d.mkdir(parents=True)
    doc = {"run_id": run_id, "created_at": time.time(), "runtime": "host", "workdir": "/tmp",
           "scripts_dir": f"/tmp/.verlctl/runs/{run_id}", "run_log": f"/tmp/verlctl-face-no-such-{run_id}.log",
           "train_log": "", "checkpoints": "", "experiment": "exp", "verl_version": "0.7.0",
           "container_name": "verl-dapo-container-x", **over}
    (d / "run.json").write_text(json.dumps(doc), encoding="utf-8")


def host_spec(tmp_path: Path, device: str = "npu") -> Path:
    from launch_support import write_run_files

    paths = write_run_files(tmp_path)
    spec = {"paths": {"model": paths["paths.model"], "train_files": paths["paths.train_files"],
                      "val_files": paths["paths.val_files"], "checkpoints": str(tmp_path / "ckpt")},
            "device": device, "container": {"runtime": "host"}, "logging": {"swanlab": {"enabled": False}}}
    p = tmp_path / "run.yaml"
    p.write_text(yaml.safe_dump(spec), encoding="utf-8")
    return p


def json_out(res: CliResult) -> Any:
    """The one JSON document on stdout; on failure it is the error object and stderr has the one `error:`
    line of every failure; on success stderr has no `error:` line."""
    doc = json.loads(res.out)
    errors = [line for line in res.err.splitlines() if line.startswith("error:")]
    if isinstance(doc, dict) and "error" in doc:
        assert res.code == doc["error"]["exit_code"] != 0 and errors == [f"error: {doc['error']['message']}"]
    else:  # (check / plan with error findings: their own document, exit 2)
        assert errors == [], res.err
    return doc


# ------------------------------------------------------------------------------- exit statuses


def test_the_exit_code_table_is_one_table_shown_in_the_scripting_guide_help_and_operations_guide() -> None:
    from verlctl.errors import EXIT_CODE_MEANINGS, ExitCode, exit_code_table

    assert set(EXIT_CODE_MEANINGS) == set(ExitCode)
    assert exit_code_table() in (ROOT / "docs" / "scripting.md").read_text(encoding="utf-8")
    assert exit_code_table() in (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    res = run_cli("--help", env=clean_env(COLUMNS="200"))
    flat = " ".join(res.out.replace("│", " ").split())
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"{int(code)} {' '.join(meaning.split())}" in flat, meaning


def test_exit_statuses_reachable_without_an_engine(tmp_path: Path) -> None:
    from verlctl.errors import ExitCode

    state = tmp_path / "state"
    assert cli(state, "list").code == ExitCode.OK
    assert cli(state, "status").code == ExitCode.USAGE
    oom = ROOT / "tests" / "fixtures" / "errors" / "npu-oom-runtimeerror-vllm-ascend-issue1987.txt"
    assert cli(state, "diagnose", str(oom)).code == ExitCode.FAILURE
    # DECLINED (3): tests/wizard/test_wizard_cli.py answers no to "Write the spec?" and "Launch with these
    # settings?"; TIMEOUT (4): tests/orchestrator/test_export_hf.py; INTERRUPTED (130): the wizard's Ctrl-C tests.


# ------------------------------------------------------------------------------------------ --json


def test_every_reporting_command_prints_json_empty_states_included(tmp_path: Path) -> None:
    state = tmp_path / "state"
    # No run recorded: an empty array, and one error object (not a table, not plain text on stderr).
    res = cli(state, "list", "--json")
    assert res.code == 0 and json_out(res) == []
    for args in (("status", "--json"), ("stop", "--json"), ("export-hf", "x", "-o", str(tmp_path / "o"), "--json")):
        res = cli(state, *args)
        doc = json_out(res)
        assert res.code == 2 and doc["error"]["exit_code"] == 2 and "no runs recorded" in doc["error"]["message"]
    # One recorded run that started nothing.
    write_record(state, LONG_A)
    res = cli(state, "list", "--json")
    assert [r["run_id"] for r in json_out(res)] == [LONG_A]
    doc = json_out(cli(state, "status", "--json"))
    assert doc["run_id"] == LONG_A and doc["alive"] is False and doc["state"] == "never started"
    res = cli(state, "stop", "--json")
    doc = json_out(res)
    assert res.code == 0 and doc["run_id"] == LONG_A and doc["signalled"] == []
    assert doc["not_signalled"] == "no process group was recorded for this run" and doc["containers"] == []
    # Spec commands.
    spec = host_spec(tmp_path)
    assert "findings" in json_out(cli(state, "check", "-c", str(spec), "--json", PATH=NO_TOOL_PATH))
    assert "overrides" in json_out(cli(state, "plan", "-c", str(spec), "--json"))
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert json_out(cli(state, "diagnose", str(empty), "--json")) == {"steps": [], "progress": None, "findings": []}
    assert "npu" in json_out(cli(state, "detect", "--json", "--budget", "2", PATH=NO_TOOL_PATH))
    # launch / quickstart: --json asks nothing, so without --yes or --dry-run it is refused, as JSON.
    res = cli(state, "launch", "-c", str(spec), "--json")
    assert res.code == 2 and "--json asks no question" in json_out(res)["error"]["message"]
    res = cli(state, "launch", "-c", str(spec), "--dry-run", "--json", "--set", "device=gpu",
              PATH=f"{tmp_path / 'bin'}:{NO_TOOL_PATH}")
    doc = json_out(res)
    assert doc["actions"] and doc["run_id"] is None and isinstance(doc["findings"], list)
    assert (res.code, doc["outcome"]) in ((0, "dry_run"), (2, "error"))
    res = cli(state, "quickstart", "--dry-run", "--json")  # nothing in the environment: one error object
    doc = json_out(res)
    assert res.code == 2 and "paths.model" in doc["error"]["message"]


def test_launch_dry_run_json_outcome_lists_actions_and_findings(tmp_path: Path) -> None:
    """A host-runtime GPU spec with an nvidia-smi on PATH (a TEST DOUBLE printing a real capture): the
    dry run is `check` plus the action list (issue 21), so on this host (no Ray for python3) its outcome is the
    error object with every planned action and the same error findings as `check`."""
    from conftest import FIXTURES

    spec = host_spec(tmp_path, device="gpu")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "nvidia-smi"
    capture = FIXTURES / "nvidia-smi" / "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt"
    tool.write_text(f"#!/bin/sh\ncat '{capture}'\n")
    tool.chmod(0o755)
    res = cli(tmp_path / "state", "launch", "-c", str(spec), "--dry-run", "--json",
              PATH=f"{bin_dir}:{NO_TOOL_PATH}")
    doc = json_out(res)
    checked = json_out(cli(tmp_path / "state", "check", "-c", str(spec), "--json", PATH=f"{bin_dir}:{NO_TOOL_PATH}"))
    errors = {f["code"] for f in doc["findings"] if f["severity"] == "error"}
    assert errors == {f["code"] for f in checked["findings"] if f["severity"] == "error"}
    if errors:
        assert res.code == 2 and doc["outcome"] == "error" and doc["error"]["exit_code"] == 2
    else:
        assert res.code == 0 and doc["outcome"] == "dry_run"
    assert doc["run"] is None and doc["watcher_pid"] is None
    assert any("record the run" in a for a in doc["actions"])
    assert "→" not in res.out and "dry run" in res.err  # the human listing went to stderr


# ------------------------------------------------------------------------- npu-smi: check = launch


def _tool_findings(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return [(f["code"], f["severity"]) for f in doc["findings"] if f["code"] == "npu_smi_missing"]


def test_check_and_launch_agree_about_a_missing_host_npu_smi_host_runtime(tmp_path: Path) -> None:
    spec = host_spec(tmp_path)
    state = tmp_path / "state"
    check = cli(state, "check", "-c", str(spec), "--json", PATH=NO_TOOL_PATH)
    launch = cli(state, "launch", "-c", str(spec), "--dry-run", "--json", PATH=NO_TOOL_PATH)
    assert _tool_findings(json_out(check)) == _tool_findings(json_out(launch)) == [("npu_smi_missing", "error")]
    assert check.code == launch.code == 2


def test_check_and_launch_agree_about_a_missing_host_npu_smi_in_a_container(tmp_path: Path, docker_engine: Any,
                                                                            test_image: str) -> None:
    """Docker runtime: the container's own npu-smi is what launch checks (readiness), so a missing host tool
    is a warning in both, with the same words."""
    from launch_support import make_launch_env

    (tmp_path / "w").mkdir()
    lenv = make_launch_env(tmp_path / "w", test_image)
    env = {"PATH": NO_TOOL_PATH}
    check = lenv.cli("check", "-c", str(lenv.spec_file), "--json", **env)
    launch = lenv.cli("launch", "-c", str(lenv.spec_file), "--dry-run", "--json", **env)
    check_doc, launch_doc = json_out(check), json_out(launch)
    assert _tool_findings(check_doc) == _tool_findings(launch_doc) == [("npu_smi_missing", "warning")]
    words = {f["message"] for d in (check_doc, launch_doc) for f in d["findings"] if f["code"] == "npu_smi_missing"}
    assert len(words) == 1 and "launch checks npu-smi inside the container" in words.pop()
    assert launch.code == 0 and launch_doc["outcome"] == "dry_run", launch.err
    assert not docker_engine.containers.list(all=True, filters={"name": lenv.name})


# ------------------------------------------------------------------------------- 80 columns


@pytest.mark.parametrize("columns", [80, 60])
def test_list_never_cuts_a_run_id(tmp_path: Path, columns: int) -> None:
    state = tmp_path / "state"
    write_record(state, LONG_A)
    write_record(state, LONG_B, stopped=True)
    res = cli(state, "list", columns=columns)
    assert res.code == 0, res.err
    tokens = re.findall(r"[\w.-]+", res.out)
    assert LONG_A in tokens and LONG_B in tokens, res.out
    assert "…" not in res.out


def test_list_with_no_runs_says_so(tmp_path: Path) -> None:
    res = cli(tmp_path / "state", "list")
    assert res.code == 0 and "no runs recorded under" in res.out and "┏" not in res.out


def _assert_words_whole(out: str, source: str, width: int) -> None:
    words = set(source.split())
    for line in out.splitlines():
        assert len(line) <= width or len(line.split()) == 1, line
        for word in line.split():
            assert word in words, f"{word!r} is not a whole word of the text (broken at the line end?)"


def test_findings_and_hints_break_between_words_only() -> None:
    from rich.console import Console

    from verlctl.checks.findings import error
    from verlctl.report import print_findings

    image = "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0-with-a-longer-tag-than-a-line"
    f = error("image_missing", f"image {image} is not present locally and pulling is not configured",
              "container.image", f"`docker pull {image}`, set container.pull: true (or launch --pull), or choose "
              "a local image with container.image")
    buf = io.StringIO()
    print_findings(Console(file=buf, width=80, force_terminal=False, color_system=None), [f])
    out = buf.getvalue()
    _assert_words_whole(out, f"error {f.code} {f.field}: {f.message} hint: {f.hint}", 80)
    assert image in out.split() and f"{image}`," in out.split()


def test_wizard_result_lines_break_between_words_only(tmp_path: Path) -> None:
    """`init` prints "wrote PATH" (and the launch checklist its actions) wrapped by words, not as one
    overlong line that the terminal breaks mid-word."""
    long_dir = tmp_path / ("a-directory-name-long-enough-to-need-wrapping-at-eighty-columns-" + "x" * 20)
    long_dir.mkdir()
    out = long_dir / "run.yaml"
    # (container.runtime docker: init does not ask the Docker engine, and a host run here has no npu-smi)
    res = cli(tmp_path / "state", "init", "--yes", "-c", str(host_spec(tmp_path)), "-o", str(out),
              "--set", "container.runtime=docker", columns=80)
    assert res.code == 0, res.err
    _assert_words_whole(res.out, f"wrote {out}", 80)


# ------------------------------------------------------------------------------ the user's words

JARGON = re.compile(r"\bseeds\b|\bseed's\b|\bseeds'|\b(first|second) seed\b|\b(upper|lower) script\b", re.I)


def _command_paths() -> list[list[str]]:
    import typer

    from verlctl.cli import app

    group = typer.main.get_command(app)
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    paths: list[list[str]] = [[]]
    for name in group.list_commands(ctx):  # type: ignore[attr-defined]
        paths.append([name])
        sub = group.get_command(ctx, name)  # type: ignore[attr-defined]
        if hasattr(sub, "list_commands"):
            paths += [[name, s] for s in sub.list_commands(ctx)]
    return paths


def test_help_and_readme_speak_the_users_words() -> None:
    paths = _command_paths()
    assert ["export-hf"] in paths and ["quickstart"] in paths
    # every command's help in one interpreter (the CLI's own entry point), not one start-up per command
    helps = run_cli_many([[*path, "--help"] for path in paths], env=clean_env(COLUMNS="200"))
    for path, res in zip(paths, helps):
        assert res.code == 0 and "Usage" in res.out, (path, res.code, res.err)
        assert not JARGON.search(res.out), (path, JARGON.search(res.out))
    # the one-process help is the help a user sees (`python -m verlctl ... --help` in a process of its own)
    assert run_cli("export-hf", "--help", env=clean_env(COLUMNS="200")).out == helps[paths.index(["export-hf"])].out
    from verlctl.guides import GUIDES

    written = [ROOT / "README.md", ROOT / "CONTRIBUTING.md",
               *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name not in GUIDES)]
    assert len(written) > 4
    for page in written:  # the README and the hand-written guides (the generated ones speak the code's words)
        text = page.read_text(encoding="utf-8")
        assert not JARGON.search(text), (page.name, JARGON.search(text))
    quick = run_cli("quickstart", "--help", env=clean_env(COLUMNS="200")).out
    assert "environment variables" in " ".join(quick.split())


def test_the_json_error_object_is_written_for_bad_flags_too(tmp_path: Path) -> None:
    res = cli(tmp_path / "state", "list", "--json", "--no-such-flag")
    doc = json.loads(res.out)
    assert res.code == 2 and "no-such-flag" in doc["error"]["message"]


def test_launch_status_stop_json_on_a_real_engine(launch_env: Any, docker_engine: Any) -> None:
    """`launch --yes --json` gives the run id a script needs (no text scraping), `status --json` reads it,
    `stop --json --remove-container` says what it signalled and removed."""
    lenv = launch_env
    lenv.spec["train"]["steps"] = 40
    lenv.spec["env"]["VERLCTL_STANDIN_STEP_SECONDS"] = "1"
    res = lenv.cli("launch", "-c", str(lenv.spec_file), "--yes", "--json", "--verify-timeout", "180")
    doc = json_out(res)
    assert res.code == 0, res.err
    assert doc["outcome"] == "launched" and doc["run"]["run_id"] == doc["run_id"]
    assert doc["run"]["container_name"] == lenv.name and doc["actions"]
    assert "training is running" in res.err and "training is running" not in res.out
    run_id = doc["run_id"]
    st = json_out(lenv.cli("status", run_id, "--json"))
    assert st["run_id"] == run_id and st["alive"] is True
    res = lenv.cli("stop", run_id, "--json", "--remove-container")
    doc = json_out(res)
    assert res.code == 0, res.err
    assert doc["run_id"] == run_id and doc["not_signalled"] is None
    assert [g["pgid"] for g in doc["signalled"]] == [st["pgid"]]
    assert doc["containers"] == [{"name": lenv.name, "node": None, "action": "removed", "why": None}]
    assert not docker_engine.containers.list(all=True, filters={"name": lenv.name})


def test_check_at_60_columns_keeps_every_long_name_whole(tmp_path: Path) -> None:
    image = yaml.safe_load((ROOT / "examples" / "run.yaml").read_text())["container"]["image"]
    assert len(image) > 60
    res = cli(tmp_path / "state", "check", "-c", str(ROOT / "examples" / "run.yaml"), columns=60, PATH=NO_TOOL_PATH)
    assert res.code == 2 and "Traceback" not in res.err
    for line in res.out.splitlines():
        assert len(line) <= 60 or len(line.split()) == 1, line
    tokens = res.out.split()
    # whole in the machine line and in every finding that names it (and in the hint); never a piece of it
    doc = json.loads(cli(tmp_path / "state", "check", "-c", str(ROOT / "examples" / "run.yaml"), "--json",
                         PATH=NO_TOOL_PATH).out)
    named = sum(f["message"].split().count(image) for f in doc["findings"])
    named += sum(reason.split().count(image) for reason in {str(n["reason"]) for n in doc["not_checked"]})
    assert tokens.count(image) == 1 + named
    assert f"{image}`," in tokens
