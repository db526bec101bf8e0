"""The log parser's and the catalogue's gaps from the turn-3 mutation sample (reference/mutation-turn3.md,
monitor/events.py and monitor/catalogue.py): each test feeds what a real log can hold."""

from __future__ import annotations

import shutil
import subprocess
from pprint import pformat

import pytest

from verlctl.monitor.catalogue import CATALOGUE, Classifier, ere_patterns, to_ere
from verlctl.monitor.events import (
    ErrorFound,
    LogParser,
    Phase,
    PhaseKind,
    StepMetrics,
    ValidationMetrics,
    parse_progress,
    parse_text,
    parse_value,
)
from verlctl.monitor.finding import Finding


def test_a_step_line_right_after_a_cut_off_validation_print_is_kept() -> None:
    """verl pprints "Initial validation metrics" over several quoted lines; a run killed (or a log cut by Ray's
    log monitor) before the closing line leaves the block open. The next step line is still a step."""
    metrics = {f"val-core/openai/gsm8k/acc/mean@{i}": 0.25 + i for i in range(12)}
    printed = pformat(f"Initial validation metrics: {metrics}").splitlines()
    assert len(printed) >= 3 and printed[-1].endswith(")")
    cut = printed[:-1]  # the closing literal never came
    text = "\n".join(f"(TaskRunner pid=7) {line}" for line in cut) + "\n"
    text += "(TaskRunner pid=7) step:1 - actor/pg_loss:0.5 - training/global_step:1\n"
    events = LogParser(Classifier()).feed(text)
    steps = [e for e in events if isinstance(e, StepMetrics)]
    assert [(s.step, s.metrics) for s in steps] == [(1, {"actor/pg_loss": 0.5, "training/global_step": 1})]
    assert steps[0].line == len(cut) + 1
    assert not [e for e in events if isinstance(e, ValidationMetrics)]  # a half dict is not reported as values


def test_a_wrapped_step_line_piece_is_metrics_never_a_failure() -> None:
    """A step line wrapped by the terminal or the log collector: the second physical line holds only metrics.
    A user's reward function may name its extra metrics anything (verl logs them under critic/... keys), here
    an error code's name; metric names are never failures, and the piece's metrics join the step."""
    text = ("(TaskRunner pid=7) step:3 - actor/pg_loss:0.25 - critic/rewards/mean:1.0 - \n"
            "critic/reward_extra/EADDRINUSE_retries:0 - response_length/mean:300.5\n"
            "next line\n")
    events = LogParser(Classifier()).feed(text)
    assert not [e for e in events if isinstance(e, ErrorFound)], events
    [step] = [e for e in events if isinstance(e, StepMetrics)]
    assert step.step == 3 and step.metrics == {
        "actor/pg_loss": 0.25, "critic/rewards/mean": 1.0, "critic/reward_extra/EADDRINUSE_retries": 0,
        "response_length/mean": 300.5}
    # the same piece alone on a line is a failure line: the catalogue does match it
    alone = [e for e in parse_text("critic/reward_extra/EADDRINUSE_retries:0 - x:1\n", Classifier())
             if isinstance(e, ErrorFound)]
    assert [e.finding.category for e in alone] == ["port_in_use"]


@pytest.mark.parametrize(
    ("raw", "value"),
    [("False", 0), ("np.True_", 1), ("np.False_", 0), ("numpy.True_", 1), ("numpy.False_", 0)],
)
def test_boolean_metrics_as_python_and_numpy_print_them(raw: str, value: int) -> None:
    got = parse_value(raw)
    assert got == value and type(got) is int
    [step] = [e for e in parse_text(f"step:1 - actor/is_clipped:{raw} - a:2\n") if isinstance(e, StepMetrics)]
    assert step.metrics["actor/is_clipped"] == value


@pytest.mark.parametrize(
    "clock",
    ["0a:01", "00:0(TaskRunner pid=1) x", "1:2:3:4", "5", "1d 0x:00:01", ":"],
)
def test_a_malformed_tqdm_clock_is_unknown_not_a_crash(clock: str) -> None:
    """tqdm's elapsed time interleaved with another process's output, or garbled: the bar is still read (its
    step and total), its elapsed time is unknown."""
    p = parse_progress(1, f"Training Progress:  50%|█████     | 5/10 [{clock}<00:02,  2.50it/s]")
    assert p is not None and (p.step, p.total) == (5, 10)
    assert p.elapsed_s is None and p.remaining_s == 2.0


def test_the_grep_form_finds_tab_indented_lines_as_the_python_form_does(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``ere_patterns()`` is the catalogue for ``grep -E -f``: a tab-indented line (a log collector's, or a
    traceback's own indentation) matches there exactly where a signature's Python regex matches it."""
    assert to_ere(r"[ \t]") == "[ \t]"
    grep = shutil.which("grep")
    if grep is None:
        pytest.skip("no grep")
    lines = ["\tTraceback (most recent call last):", "\t\tMemoryError", "  MemoryError", "\tall is well"]
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pats = tmp_path / "patterns"
    pats.write_text("\n".join(ere_patterns()) + "\n", encoding="utf-8")
    out = subprocess.run([grep, "-E", "-n", "-f", str(pats), "--", str(log)], capture_output=True, text=True,
                         check=False).stdout
    by_grep = [int(row.split(":", 1)[0]) for row in out.splitlines()]
    by_python = [i for i, line in enumerate(lines, 1)
                 if any(sig.regex.search(line) for cat in CATALOGUE for sig in cat.signatures)]
    assert by_grep == by_python == [1, 2, 3]


def test_a_finding_made_without_a_count_counts_once() -> None:
    """The watcher's own findings (``ray_gcs_unreachable`` when the head dies, ``host_oom`` on exit 137) are
    made without a count: their alert and JSON say 1, as for a line the catalogue saw once."""
    f = Finding(category="host_oom", line=0, excerpt="start_verl.sh exits with status 137", message="m", hint="h")
    assert f.to_dict()["count"] == 1
    assert f.to_check_finding().code == "host_oom"


# ---- the fresh sample (seed 4242, after the gaps above): survivors that a real log would expose ------------


def test_a_checkpoint_saved_line_is_the_saved_phase_and_other_global_step_lines_are_not() -> None:
    """verl's checkpoint managers log ``Saved model to .../global_step_N/actor/...`` once the files are
    written; a resume prints ``Load from checkpoint folder: .../global_step_N``, which saves nothing."""
    log = ("(TaskRunner pid=7) Load from checkpoint folder: /ckpt/global_step_3\n"
           "(WorkerDict pid=9) Saved model to /ckpt/global_step_4/actor/model_world_size_8_rank_0.pt\n")
    phases = [(p.kind, p.step, p.line) for p in parse_text(log) if isinstance(p, Phase)]
    assert (PhaseKind.CHECKPOINT_SAVED, 4, 2) in phases
    assert not [p for p in phases if p[0] is PhaseKind.CHECKPOINT_SAVED and p[1] == 3]


def test_the_first_line_from_a_worker_actor_is_the_workers_starting_phase() -> None:
    """Before any other marker, the first line a Ray worker actor prints (``(WorkerDict pid=...)``) says the
    workers are starting, whatever it says."""
    log = "(TaskRunner pid=7) loading data\n(WorkerDict pid=9) model config loaded\n(WorkerDict pid=9) again\n"
    phases = [(p.kind, p.line, p.detail) for p in parse_text(log) if isinstance(p, Phase)]
    assert phases == [(PhaseKind.WORKERS_STARTING, 2, "first line from WorkerDict")]


def test_events_and_catalogue_entries_are_immutable() -> None:
    """One parsed event goes to several consumers (status, charts, the watcher), and the catalogue is
    module-level, shared by every classifier: neither can be changed through one reference."""
    import dataclasses

    finding = Finding(category="c", line=1, excerpt="e", message="m", hint="h")
    events = [ErrorFound(1, finding), StepMetrics(1, 1, {"a": 1}), Phase(1, PhaseKind.RAY_STARTED)]
    for obj in [*events, CATALOGUE[0], CATALOGUE[0].signatures[0]]:
        field = dataclasses.fields(obj)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, None)


def test_a_failure_between_tqdm_redraws_is_quoted_alone() -> None:
    """A traceback line that shares a physical line with tqdm's carriage-return redraws: the excerpt is its
    own segment, not the progress bars around it."""
    line = ("Training Progress:  10%|#         | 1/10 [00:01<00:09, 1.00s/it]"
            "\rtorch.OutOfMemoryError: NPU out of memory. Tried to allocate 2.00 GiB"
            "\rTraining Progress:  10%|#         | 1/10 [00:02<00:09, 1.00s/it]")
    f = Classifier().feed_line(1, line)
    assert f is not None and f.category == "device_oom"
    assert f.excerpt == "torch.OutOfMemoryError: NPU out of memory. Tried to allocate 2.00 GiB"
