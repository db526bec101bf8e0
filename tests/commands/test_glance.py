"""The checklist and the plan at a glance (issue 24, newcomer F1): by default the values that differ from the
defaults (with their source), the Summary, the findings, the files and the actions, in at most 60 lines at
120 columns for examples/run.yaml; the full table with --verbose (and always in spec.resolved.yaml); a wrapped
path never breaks mid-word at 80 columns."""

from __future__ import annotations

import io
import re

import pytest

from conftest import ROOT, clean_env, run_cli

EXAMPLE = ROOT / "examples" / "run.yaml"


def plan_out(*args: str, columns: int) -> str:
    res = run_cli("plan", "-c", str(EXAMPLE), *args, env=clean_env(COLUMNS=str(columns)), cwd=ROOT)
    assert res.code == 0, res.err
    return res.out


def resolved_example():  # type: ignore[no-untyped-def]
    import os

    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec

    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        resolved = load_spec(EXAMPLE, environ={})
        return resolved, make_plan(resolved)
    finally:
        os.chdir(cwd)


def test_plan_of_the_example_fits_one_screen_and_names_what_differs() -> None:
    out = plan_out(columns=120)
    lines = out.splitlines()
    assert len(lines) <= 60, len(lines)
    assert all(len(ln) <= 120 for ln in lines)
    # what differs from the defaults, with its source; what equals its default is not listed
    assert re.search(r"train\.save_freq +2 +← file \(.*run\.yaml\)", out), out
    assert "paths.logs" in out and "derived" in out
    assert "cluster.ssh_config" not in out and "recovery.stall_min_s" not in out
    # the Summary, the findings, the files
    for part in ("Summary", "hyperparameters  steps 4, batch 32, lr 1e-06, TP 4, PP 2, n 8",
                 "not checked: model_fit", "start_verl.sh, run_training.sh, spec.resolved.yaml", "--verbose"):
        assert part in out, part


def test_verbose_is_the_full_table_of_every_value_with_its_source() -> None:
    out = plan_out("--verbose", columns=120)
    resolved, _plan = resolved_example()
    for path in resolved.leaves():
        assert re.search(rf"^  {re.escape(path)} ", out, re.M), path
    assert re.search(r"cluster\.ssh_config +- +← default", out), out


@pytest.mark.parametrize("verbose", [False, True])
def test_paths_never_break_mid_word_at_80_columns(verbose: bool) -> None:
    out = plan_out(*(["--verbose"] if verbose else []), columns=80)
    resolved, _plan = resolved_example()
    spec = resolved.spec
    shown = [spec.paths.model, *spec.paths.train_files, *spec.paths.val_files, spec.paths.checkpoints,
             spec.paths.logs, spec.container.image]
    if verbose:
        shown.append(spec.logging.swanlab.log_dir)
    for p in shown:  # each whole on one line (on a line of its own when it does not fit beside the name)
        assert any(p in line for line in out.splitlines()), (p, out)
    for line in out.splitlines():
        assert len(line) <= 80 or len(line.split()) == 1, line


def test_the_launch_checklist_of_the_example_fits_in_60_lines_with_its_actions() -> None:
    from rich.console import Console

    from verlctl.wizard.checklist import show_checklist

    resolved, plan = resolved_example()
    # 18 actions, as the reviewed launch of this spec listed (container, mounts, scripts, start, verify ...),
    # each as long as a real one
    actions = [f"action {i}: create container verl-dapo from quay.io/ascend/verl:verl-8.3.rc1-910b" for i in range(18)]
    buf = io.StringIO()
    show_checklist(Console(file=buf, width=120, color_system=None), resolved, plan.command, plan.findings, actions)
    lines = buf.getvalue().splitlines()
    assert len(lines) <= 60, "\n".join(lines)
    assert "Summary" in buf.getvalue() and "These actions will be taken" in buf.getvalue()
    full = io.StringIO()
    show_checklist(Console(file=full, width=120, color_system=None), resolved, plan.command, plan.findings, actions,
                   verbose=True)
    assert "cluster.ssh_config" in full.getvalue() and "cluster.ssh_config" not in buf.getvalue()
