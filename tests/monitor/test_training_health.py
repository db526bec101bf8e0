"""Training health: warnings from verl's own step metrics (monitor/health.py), shown by the watcher, `status`
and `report`, each from the one evaluator; a resume that trained nothing is a failure with or without a
watcher.

The logs are real verl 0.9.1 logs captured from the real-verl tests (tests/fixtures/verl-logs/realverl-*):
GRPO with verl's gsm8k reward on the random tiny model (every advantage 0) and the demo's DAPO with its
digit-share reward (a learning signal). The watcher tests run a TEST DOUBLE of the training (a bash script
printing those real lines, tests/orchestrator/test_recovery_host.py's HostRuns); the watcher, `status` and `report` run as
the real CLI.
"""

from __future__ import annotations

import ast
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from test_recovery_host import HostRuns, _progress, host_runs_in
from verlctl.monitor import health
from verlctl.monitor.health import RULES, HealthTracker, Settings, evaluate, evaluate_text
from verlctl.spec.model import RunSpec

from conftest import FIXTURES, ROOT, run_cli

FIXTURES = FIXTURES / "verl-logs"
GRPO_GSM8K = FIXTURES.parent / "health-logs" / "realverl-0.9.1-cpu-grpo-gsm8k-all-advantages-zero-steps.txt"
DEMO_DAPO = FIXTURES.parent / "health-logs" / "realverl-0.9.1-cpu-demo-dapo-digit-share-steps.txt"
VERL = ROOT / ".cache" / "verl"
SRC = ROOT / "src" / "verlctl"


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    yield from host_runs_in(tmp_path, monkeypatch)


def step_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if re.search(r"(?:^|\s)step:\d+ - ", ln)]


def line(step: int, **metrics: object) -> str:
    """A step line as verl 0.7.0/0.9.1 print it (aggregate_logger.concat_dict_to_str: pprint of each value)."""
    return " - ".join([f"step:{step}"] + [f"{k.replace('__', '/')}:{v!r}" for k, v in metrics.items()])


def rules_of(text: str, settings: Settings | None = None) -> list[str]:
    return [w.rule for w in evaluate_text(text, settings)]


# ------------------------------------------------------------------------------------ verl decides the names


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_each_rule_cites_where_verl_logs_its_metric(rule: health.Rule) -> None:
    """Each cited line of verl's source (0.7.0 / 0.9.1, as installed for the tests) names one of the rule's
    metrics there, or the key verl renames into it, within a few lines; every metric is cited."""
    seen: set[str] = set()
    for version, path, lineno in rule.sources:
        cited = (VERL / version / path).read_text().splitlines()[lineno - 1]
        # the cited line itself writes the metric: its full name, its name after a prefix verl formats in
        # (f"{prefix}/filter_groups/..."), or the key verl renames into it ("lr")
        names = [m for m in rule.metrics
                 if m in cited or f"}}/{m.split('/', 1)[-1]}" in cited or f'"{m.rsplit("/", 1)[-1]}"' in cited]
        assert names, (rule.name, version, path, lineno, cited)
        seen.update(names)
    assert seen, rule.name
    assert "verl 0.9.1 " in rule.citation and rule.metrics[0] in rule.citation


def test_the_spec_names_the_rules_the_evaluator_has() -> None:
    from verlctl.spec.model import HEALTH_RULES, RunSpec

    assert tuple(HEALTH_RULES) == health.RULE_NAMES
    spec = RunSpec.model_validate({"recovery": {"health": {"stop_on": "no_learning_signal,lr_zero"}}})
    assert Settings.from_spec(spec).stop_on == ("no_learning_signal", "lr_zero")
    assert Settings.from_spec(RunSpec.model_validate({"recovery": {"health": {"stop_on": ["all"]}}})).stop_on \
        == health.RULE_NAMES
    assert Settings.from_spec(RunSpec.model_validate({})).stop_on == ()  # warnings never stop a run by default


def test_a_bad_stop_on_is_one_line_naming_the_field_and_the_rules(tmp_path: Path) -> None:
    spec = tmp_path / "run.yaml"
    spec.write_text("recovery:\n  health:\n    stop_on: [no_signal]\n")
    res = run_cli("check", "-c", str(spec))
    assert res.code != 0 and "Traceback" not in res.err + res.out
    said = res.err + res.out
    assert "recovery.health.stop_on" in said and "unknown health rule(s) no_signal" in said, said
    assert "no_learning_signal" in said


# ------------------------------------------------------------------------------------ the rules on real logs


def test_real_grpo_with_the_gsm8k_reward_on_a_random_model_has_no_learning_signal() -> None:
    """verl's gsm8k reward scores the random tiny model 0 everywhere: every advantage is 0 in every step."""
    text = GRPO_GSM8K.read_text()
    found = evaluate_text(text)
    rule = next(w for w in found if w.rule == "no_learning_signal")
    assert rule.step == 1 and rule.metric == "critic/advantages/max" and rule.value == 0.0
    assert "every advantage was 0 for 3 steps in a row (steps 1-3" in rule.message
    assert "metric_utils.py" in rule.citation and "reward" in rule.hint
    # the window is the spec's: 4 steps in a row needed, the log's 3 steps are not enough
    assert "no_learning_signal" not in rules_of(text, Settings(no_signal_steps=len(step_lines(GRPO_GSM8K)) + 1))


def test_real_demo_dapo_with_the_digit_share_reward_raises_no_warning(tmp_path: Path) -> None:
    """The demo's real DAPO steps (digit-share reward: advantages of +-0.71) raise nothing, with the default
    bounds and with the demo's own spec (which does not judge overlong: its random model fills
    max_response_length, 87-100 % of the responses in this log)."""
    import yaml

    from verlctl.demo.spec import demo_spec
    from verlctl.spec.model import RunSpec

    text = DEMO_DAPO.read_text()
    assert len(step_lines(DEMO_DAPO)) == 3
    assert evaluate_text(text) == []
    spec = RunSpec.model_validate(yaml.safe_load(demo_spec(tmp_path, tmp_path / "env", "dapo", 2)))
    assert spec.recovery.health.ignore == ["overlong"]
    assert evaluate_text(text, Settings.from_spec(spec)) == []
    # the bound decides: at 0.85 the demo's 0.875 / 1.0 / 0.875 clip ratios are "overlong"
    assert rules_of(text, Settings(overlong_ratio=0.85)) == ["overlong"]


# ------------------------------------------------------------------------------------ each rule's bounds


@pytest.mark.parametrize(("rule", "lines", "settings", "fires_at"), [
    ("no_learning_signal", [line(s, critic__advantages__max=0.0, critic__advantages__min=0.0) for s in (1, 2)],
     Settings(), None),
    ("no_learning_signal", [line(s, critic__advantages__max=0.0, critic__advantages__min=0.0) for s in (1, 2, 3)],
     Settings(), 1),
    # one step with a signal breaks the streak
    ("no_learning_signal", [line(1, critic__advantages__max=0.0, critic__advantages__min=0.0),
                            line(2, critic__advantages__max=0.7, critic__advantages__min=-0.7),
                            line(3, critic__advantages__max=0.0, critic__advantages__min=0.0),
                            line(4, critic__advantages__max=0.0, critic__advantages__min=0.0)], Settings(), None),
    # without advantages in the line: every score equal
    ("no_learning_signal", [line(s, critic__score__max=1.0, critic__score__min=1.0) for s in (1, 2, 3)],
     Settings(), 1),
    ("lr_zero", [line(1, actor__lr=0.0), line(2, actor__lr=0.0)], Settings(warmup_steps=1), 2),
    ("lr_zero", [line(1, actor__lr=0.0)], Settings(warmup_steps=1), None),
    ("lr_zero", [line(1, actor__lr=1e-06), line(2, actor__lr=1e-06)], Settings(), None),
    ("lr_pinned", [line(s, actor__lr=1e-06) for s in (1, 2, 3, 4)], Settings(warmup_steps=3), 4),
    ("lr_pinned", [line(s, actor__lr=s * 1e-07) for s in (1, 2, 3, 4)], Settings(warmup_steps=3), None),
    ("lr_pinned", [line(s, actor__lr=1e-06) for s in (1, 2, 3)], Settings(warmup_steps=2), 3),
    ("lr_pinned", [line(s, actor__lr=1e-06) for s in (1, 2)], Settings(warmup_steps=1), None),  # no warm-up to see
    ("lr_pinned", [line(s, actor__lr=0.0) for s in (1, 2, 3, 4)], Settings(warmup_steps=3), None),  # that is lr_zero
    ("lr_zero", [line(s, actor__lr=0.0) for s in (1, 2, 3, 4)], Settings(warmup_steps=3), 4),
    ("overlong", [line(s, response_length__clip_ratio=1.0) for s in (1, 2, 3)], Settings(), 1),
    ("overlong", [line(s, response_length__clip_ratio=0.89) for s in (1, 2, 3)], Settings(), None),
    ("overlong", [line(s, response_length__clip_ratio=1.0) for s in (1, 2, 3)], Settings(overlong_ratio=1.0), 1),
    ("entropy_collapse", [line(s, actor__entropy=0.004) for s in (1, 2, 3)], Settings(), 1),
    ("entropy_collapse", [line(s, actor__entropy=0.004) for s in (1, 2, 3)], Settings(min_entropy=0), None),
    ("entropy_collapse", [line(s, actor__entropy=0.3) for s in (1, 2, 3)], Settings(), None),
    ("grad_norm_nonfinite", [line(1, actor__grad_norm=1.0), line(2, actor__grad_norm=math.nan)], Settings(), 2),
    ("grad_norm_nonfinite", [line(1, critic__grad_norm=math.inf)], Settings(), 1),
    ("logprob_drift", [line(s, training__rollout_probs_diff_valid=1, training__rollout_probs_diff_mean=0.2)
                       for s in (1, 2, 3)], Settings(), 1),
    # verl writes nan and valid 0 when it could not compare (verl/utils/debug/metrics.py:106-109)
    ("logprob_drift", [line(s, training__rollout_probs_diff_valid=0, training__rollout_probs_diff_mean=math.nan)
                       for s in (1, 2, 3)], Settings(), None),
    ("logprob_drift", [line(s, training__rollout_probs_diff_valid=1, training__rollout_probs_diff_mean=0.001)
                       for s in (1, 2, 3)], Settings(), None),
    ("filter_groups_evict_all", [line(s, training__filter_groups__evicted_samples=16) for s in (1, 2, 3)],
     Settings(batch_samples=16), 1),
    ("filter_groups_evict_all", [line(s, training__filter_groups__evicted_samples=4) for s in (1, 2, 3)],
     Settings(batch_samples=16), None),
    # at the bound exactly: 9 of 10 evicted is recovery.health.evicted_ratio's 0.9
    ("filter_groups_evict_all", [line(s, training__filter_groups__evicted_samples=9) for s in (1, 2, 3)],
     Settings(batch_samples=10), 1),
    # an entropy at recovery.health.min_entropy is not below it
    ("entropy_collapse", [line(s, actor__entropy=0.01) for s in (1, 2, 3)], Settings(min_entropy=0.01), None),
])
def test_each_rule_fires_at_its_bound_and_not_before(rule: str, lines: list[str], settings: Settings,
                                                     fires_at: int | None) -> None:
    found = [w for w in evaluate_text("\n".join(lines) + "\n", settings) if w.rule == rule]
    assert [w.step for w in found] == ([] if fires_at is None else [fires_at]), found


def test_a_rule_fires_once_and_a_restart_that_repeats_steps_does_not_count_them_twice() -> None:
    flat = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0}
    # steps 1, 2, then a restart resumed from step 1: 2, 3 -> the streak is 1, 2, 3 (not 4 steps)
    tracker = HealthTracker(Settings(no_signal_steps=4))
    for s in (1, 2, 2, 3):
        tracker.feed(s, flat)
    assert tracker.warnings == []
    tracker.feed(4, flat)
    tracker.feed(5, flat)
    assert [w.step for w in tracker.warnings] == [1]


# ------------------------------------------------------------------------------------ one evaluator, every caller


CALLERS = {"orchestrator/watcher.py", "orchestrator/slurm_run.py", "orchestrator/inspect.py", "commands/report.py"}
EVALUATOR = {"HealthTracker", "evaluate", "evaluate_text", "run_warnings"}


def test_every_caller_of_the_evaluator_is_known_and_no_module_judges_the_metrics_itself() -> None:
    """The watchers (local and Slurm: events), `status` and `report` reach the rules through monitor/health.py,
    and no other
    module compares a metric the rules judge (others may show or draw them: diagnose, the charts)."""
    callers = set()
    judges = set()
    for path in SRC.rglob("*.py"):
        rel = str(path.relative_to(SRC))
        if rel == "monitor/health.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (isinstance(node, ast.ImportFrom) and node.module == "verlctl.monitor.health"
                    and {a.name for a in node.names} & EVALUATOR):
                callers.add(rel)
            if isinstance(node, ast.Compare) and any(
                    isinstance(n, ast.Constant) and n.value in health.KEYS
                    for part in (node.left, *node.comparators) for n in ast.walk(part)):
                judges.add(rel)
    assert callers == CALLERS
    assert judges == set(), judges


def test_watcher_status_and_report_say_the_same_warnings_on_a_real_log(runs: HostRuns, tmp_path: Path) -> None:
    """The real GRPO/gsm8k step lines through the watcher (a health event, a line, the run goes on and
    finishes), then `status --json` and `report --json` on the same run: the same rule, once each."""
    lines = ["Total training steps: 3"]
    for n, ln in enumerate(step_lines(GRPO_GSM8K), start=1):
        lines += [ln, _progress(n, 3)]
    record = runs.start(lines, pause=0.05, train={"steps": 3})
    res = runs.watch(record)
    assert res.code == 0, res.out + res.err
    assert "verlctl watch: health: no learning signal (step 1): every advantage was 0" in res.out, res.out
    assert "a warning: the run goes on" in res.out
    events = runs.events(record)
    watched = [e["rule"] for e in events if e["event"] == "health"]
    assert watched == ["no_learning_signal"], events
    assert events[-1]["event"] == "finished"
    st = runs.status(record)
    assert st["state"] == "finished", st
    assert [w["rule"] for w in st["health"]] == watched
    assert st["health"][0]["citation"].startswith("critic/advantages/max")
    text = run_cli("status", record.run_id, env=runs.env(), timeout=120)
    assert "health: no learning signal (step 1)" in text.out, text.out
    page = tmp_path / "r.html"
    rep = run_cli("report", record.run_id, "-o", str(page), "--json", env=runs.env(), timeout=120)
    assert rep.code == 0, rep.err
    assert [w["rule"] for w in json.loads(rep.out)["health"]] == watched
    html = page.read_text()
    assert 'data-rule="no_learning_signal"' in html and 'data-chart="advantages"' in html
    assert "training health: no learning signal at step 1" in html  # the timeline's sentence of the event


def test_stop_on_stops_the_run_and_the_watcher_gives_up_with_the_warning(runs: HostRuns) -> None:
    lines = ["Total training steps: 9"]
    for n in range(1, 10):
        lines += [line(n, critic__advantages__max=0.0, critic__advantages__min=0.0), _progress(n, 9)]
    record = runs.start(lines, pause=0.3, train={"steps": 9},
                        top={"recovery": {"health": {"stop_on": ["no_learning_signal"], "no_signal_steps": 2}}})
    res = runs.watch(record)
    assert res.code == 1, res.out + res.err
    events = runs.events(record)
    given = next(e for e in events if e["event"] == "gave_up")
    assert given["category"] == "health_no_learning_signal", given
    assert "training health: no learning signal" in given["reason"] and "recovery.health.stop_on" in given["reason"]
    assert next(e for e in events if e["event"] == "health")["stops"] is True
    st = runs.status(record)
    assert st["state"] == "failed" and st["alive"] is False, st
    assert st["last_step"]["step"] < 9  # stopped, not run to its end


# ------------------------------------------------------------------------------------ a resume that trained nothing


def test_a_resume_that_trained_nothing_says_its_facts_before_a_long_checkpoint_path() -> None:
    """`status` cuts a verdict to its first line's first 160 characters: the facts come before the path (a
    pytest or cluster checkpoint path is often longer than the line)."""
    from verlctl.monitor.health import resume_trained_nothing

    path = "/" + "/".join(["a-deep-shared-filesystem-directory"] * 8) + "/global_step_3"
    why = resume_trained_nothing(path, 3, 5, 2)
    assert why is not None
    head = why[:150]
    assert head.startswith("attempt 2 exited 0 having trained 0 steps (last seen: step 3 of 5) after resuming "
                           "from global_step_3: "), why
    assert why.endswith(f"(resumed from {path})"), why
    assert resume_trained_nothing(path, 4, 5, 2) is None and resume_trained_nothing(path, 3, 3, 2) is None
    assert resume_trained_nothing(path, None, 5, 1) is not None and "(last seen: no step of 5)" in \
        (resume_trained_nothing(path, None, 5, 1) or "")


def test_a_resume_that_trained_nothing_is_failed_without_a_watcher(runs: HostRuns) -> None:
    """No watcher judged it: `status` and `list` read the log's "training finished" and still say failed."""
    ckpt = str(runs.ckpt / "global_step_3")
    record = runs.start(["Total training steps: 5", f"Load from checkpoint folder: {ckpt}",
                         "Setting global step to 3", _progress(3, 5)], pause=0.05, resumed_from=ckpt)
    from verlctl.runtime.executor import HostExecutor

    ex = HostExecutor()
    import time

    deadline = time.monotonic() + 60
    while ex.group_alive(record.attempts[-1].ref) and time.monotonic() < deadline:
        time.sleep(0.2)
    st = runs.status(record)
    assert st["state"] == "failed", st
    assert "trained 0 steps (last seen: step 3 of 5) after resuming from global_step_3" in st["state_why"], st
    listed = json.loads(run_cli("list", "--json", env=runs.env(), timeout=120).out)
    row = next(r for r in listed if r["run_id"] == record.run_id) if isinstance(listed, list) else None
    if row is None:
        row = next(r for r in listed["runs"] if r["run_id"] == record.run_id)
    assert row["state"] == "failed", row


@pytest.mark.parametrize(("resumed", "seen", "total", "fails"), [
    ("/c/global_step_3", 3, 5, True), ("/c/global_step_3", None, None, True), ("/c/global_step_3", 4, 5, False),
    ("/c/global_step_5", 5, 5, False), (None, None, 5, False), ("/c/elsewhere", 1, 5, False),
])
def test_resume_trained_nothing(resumed: str | None, seen: int | None, total: int | None, fails: bool) -> None:
    assert (health.resume_trained_nothing(resumed, seen, total, 2) is not None) is fails


def test_evaluate_keeps_step_order_of_the_log() -> None:
    flat = {"critic/advantages/max": 0.0, "critic/advantages/min": 0.0}
    assert [w.step for w in evaluate([(1, flat), (2, flat), (3, flat)])] == [1]


def test_status_and_report_add_the_watchers_warnings_of_rules_their_log_read_did_not_find() -> None:
    found = evaluate_text("\n".join(line(n, actor__grad_norm=math.nan if n == 2 else 1.0) for n in (1, 2)))
    events = [{"event": "alert", "rule": "overlong", "message": "not a health event"},
              {"event": "health", "rule": "grad_norm_nonfinite", "step": 9, "message": "the watcher's"},
              {"event": "health", "rule": "no_learning_signal", "step": 1, "message": "every advantage was 0",
               "title": "no learning signal"}]
    merged = health.run_warnings(found, events)
    assert [(w["rule"], w["step"]) for w in merged] == [("grad_norm_nonfinite", 2), ("no_learning_signal", 1)]


def test_the_watchers_warning_of_one_rule_is_added_once() -> None:
    events = [{"event": "health", "rule": "lr_zero", "step": s, "message": "lr 0"} for s in (3, 4)]
    assert [(w["rule"], w["step"]) for w in health.run_warnings([], events)] == [("lr_zero", 3)]


def test_settings_from_a_spec() -> None:
    """The defaults without a spec or a health section; the warm-up from train.warmup_steps (0 when unset);
    the samples a step trains on from the batch and the responses per prompt."""
    from types import SimpleNamespace

    assert Settings.from_spec(None) == Settings() and Settings.from_spec(SimpleNamespace(recovery=None)) == Settings()
    spec = RunSpec.model_validate({"train": {"train_batch_size": 8, "responses_per_prompt": 4}})
    got = Settings.from_spec(spec)
    assert got.warmup_steps == 0 and got.batch_samples == 32, got
    assert Settings.from_spec(spec.model_copy(update={"train": spec.train.model_copy(
        update={"warmup_steps": 5})})).warmup_steps == 5
    partial = SimpleNamespace(recovery=spec.recovery, train=SimpleNamespace(train_batch_size=8))
    assert Settings.from_spec(partial).batch_samples is None


def test_a_record_whose_spec_cannot_be_read_is_judged_with_the_defaults() -> None:
    class Damaged:
        def load_spec(self) -> Any:
            raise ValueError("spec.resolved.yaml: not YAML")

    assert health.record_settings(Damaged()) == Settings()
