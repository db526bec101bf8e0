"""The log parser on the real verl logs of tests/fixtures/verl-logs (expected values typed from the files)."""

from __future__ import annotations

import math
from pprint import pformat

import pytest

from monitor_helpers import capture, fixture_names
from verlctl.monitor.catalogue import Classifier
from verlctl.monitor.events import (
    LogParser,
    Phase,
    PhaseKind,
    Progress,
    StepMetrics,
    TotalSteps,
    ValidationMetrics,
    of_type,
    parse_file,
    parse_progress,
    parse_text,
    parse_value,
    split_metrics,
)

# Every step line of every verl-logs fixture: file -> [(step, number of distinct metric keys)].
STEP_LINES = {
    "realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt": [(1, 7), (2, 5)],
    "realverl-0.9.1-cpu-grpo-atexit-dataloader-killed-after-last-step.txt": [],  # the teardown only (the step line was not kept)
    "docs-quickstart-step-metrics.txt": [
        (0, 40),
        (1, 39),
    ],  # step 1 repeats actor/reward_kl_penalty (doc typo)
    # one step line broken by the archive inside 'response_length/cl|ip_ratio'; cut after 'timing_per_token_ms/ref:'
    "step-metrics-gh200-sglang-issue1208.txt": [(2, 45)],
    # broken inside 'prom|pt_length/min'; cut at 'timing_s/s' (no value: not a metric)
    "step-metrics-main_task-old-format-issue316.txt": [(5, 42)],
    # broken inside 'response_length/me|an'; ends with 'timing_s/adv:0.0'
    "step-metrics-taskrunner-3dp-sglang-issue106.txt": [(83, 46)],
    # ends with a dangling ' -' after the last value
    "step-metrics-with-validation-multi-dataset-prime-issue21.txt": [(4, 29)],
    "verl-npu-platform-not-available-cpu-only-actor-warning-issue6741.txt": [],
    "vllm-ascend-0.7.3-startup-plugin-lines-issue644.txt": [],
    "verl-0.9.1-cpu-startup-optional-engines-not-available-verlctl-realverl.txt": [],
}

DOCS_STEP0 = {
    "timing/gen": 21.470, "timing/ref": 4.360, "timing/values": 5.800, "actor/reward_kl_penalty": 0.000,
    "actor/reward_kl_penalty_coeff": 0.001, "timing/adv": 0.109, "timing/update_critic": 15.664,
    "critic/vf_loss": 14.947, "critic/vf_clipfrac": 0.000, "critic/vpred_mean": -2.056, "critic/grad_norm": 1023.278,
    "critic/lr(1e-4)": 0.100, "timing/update_actor": 20.314, "actor/entropy_loss": 0.433, "actor/pg_loss": -0.005,
    "actor/pg_clipfrac": 0.000, "actor/ppo_kl": 0.000, "actor/grad_norm": 1.992, "actor/lr(1e-4)": 0.010,
    "critic/score/mean": 0.004, "critic/score/max": 1.000, "critic/score/min": 0.000, "critic/rewards/mean": 0.004,
    "critic/rewards/max": 1.000, "critic/rewards/min": 0.000, "critic/advantages/mean": -0.000,
    "critic/advantages/max": 2.360, "critic/advantages/min": -2.280, "critic/returns/mean": 0.003,
    "critic/returns/max": 0.000, "critic/returns/min": 0.000, "critic/values/mean": -2.045,
    "critic/values/max": 9.500, "critic/values/min": -14.000, "response_length/mean": 239.133,
    "response_length/max": 256.000, "response_length/min": 77.000, "prompt_length/mean": 104.883,
    "prompt_length/max": 175.000, "prompt_length/min": 68.000,
}  # fmt: skip

# A sample of values per file: (step, key, value).
SAMPLES = {
    "docs-quickstart-step-metrics.txt": [
        (1, "timing/gen", 23.020), (1, "actor/reward_kl_penalty", 0.001), (1, "critic/vf_clipfrac", 0.384),
        (1, "critic/grad_norm", 942.924), (1, "critic/advantages/min", -2.616), (1, "critic/values/min", -16.000),
        (1, "prompt_length/min", 70.000),
    ],
    "step-metrics-gh200-sglang-issue1208.txt": [
        (2, "global_seqlen/min", 538646.0), (2, "global_seqlen/mean", 547190.5), (2, "actor/kl_loss", 0.001),
        (2, "perf/mfu/actor", 1.018), (2, "perf/max_memory_reserved_gb", 61.611), (2, "critic/advantages/min", -0.730),
        (2, "response_length/max", 1024.0), (2, "response_length/clip_ratio", 0.004),  # joined across the wrap
        (2, "prompt_length/min", 63.0), (2, "timing_s/gen", 74.020), (2, "timing_s/step", 96.551),
        (2, "timing_per_token_ms/adv", 0.001),
    ],
    "step-metrics-main_task-old-format-issue316.txt": [
        (5, "global_seqlen/max", 1002660.0), (5, "actor/entropy_loss", 5.683), (5, "mfu/actor", 0.083),
        (5, "val/test_score/openai/gsm8k", 0.171), (5, "response_length/clip_ratio", 0.521),
        (5, "prompt_length/max", 201.0), (5, "prompt_length/min", 52.0),  # 'prom' + 'pt_length/min' joined
        (5, "timing_s/update_actor", 157.615), (5, "timing_s/testing", 78.133),
    ],
    "step-metrics-taskrunner-3dp-sglang-issue106.txt": [
        (83, "global_seqlen/mean", 355023.75), (83, "actor/entropy_loss", 0.317), (83, "actor/pg_clipfrac_lower", 0.0),
        (83, "perf/max_memory_allocated_gb", 44.192), (83, "training/global_step", 83.0), (83, "training/epoch", 2.0),
        (83, "critic/score/mean", 0.906), (83, "response_length/mean", 330.437),  # 'response_length/me' + 'an'
        (83, "prompt_length/mean", 362.969), (83, "timing_s/reward", 1.042), (83, "timing_s/adv", 0.0),
    ],
    "step-metrics-with-validation-multi-dataset-prime-issue21.txt": [
        (4, "global_seqlen/min", 192519), (4, "global_seqlen/mean", 208836.375),
        (4, "actor/pg_loss", 0.025936965830624104), (4, "actor/pg_clipfrac", 0.0),
        (4, "perf/max_memory_reserved_gb", 118.98046875), (4, "actor/lr", 1e-06),
        (4, "val-aux/omni-math/format_score/mean@1", 0.8174406238922368),
        (4, "val-core/omni-math/acc/mean@1", 0.16129032258064516), (4, "val-core/math/acc/mean@1", 0.706),
        (4, "val-aux/olympiad_bench/format_score/mean@1", 0.92),
        (4, "val-aux/minerva/reward/mean@1", 0.27941176470588236),
    ],
}  # fmt: skip


def _steps(text: str) -> list[StepMetrics]:
    return of_type(parse_text(text), StepMetrics)


@pytest.mark.parametrize("name", fixture_names("verl-logs"))
def test_every_step_line_of_every_file(name: str) -> None:
    assert name in STEP_LINES, f"new fixture {name}: add its step lines to STEP_LINES"
    steps = _steps(capture("verl-logs", name))
    assert [(s.step, len(s.metrics)) for s in steps] == STEP_LINES[name]


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_metric_values(name: str) -> None:
    by_step = {s.step: s.metrics for s in _steps(capture("verl-logs", name))}
    for step, key, value in SAMPLES[name]:
        got = by_step[step][key]
        assert got == value and type(got) is type(value), (step, key, got)


def test_docs_step_zero_complete() -> None:
    steps = _steps(capture("verl-logs", "docs-quickstart-step-metrics.txt"))
    assert steps[0].metrics == DOCS_STEP0
    assert list(steps[0].metrics) == list(DOCS_STEP0)  # log order is kept
    assert math.copysign(1, steps[0].metrics["critic/advantages/mean"]) == -1  # '-0.000' stays negative zero


def test_cut_off_items_are_not_metrics() -> None:
    gh200 = _steps(capture("verl-logs", "step-metrics-gh200-sglang-issue1208.txt"))[0].metrics
    assert "timing_per_token_ms/ref" not in gh200 and "response_length/cl" not in gh200
    old = _steps(capture("verl-logs", "step-metrics-main_task-old-format-issue316.txt"))[0].metrics
    assert "timing_s/s" not in old and "prom" not in old and "pt_length/min" not in old


def test_step_line_validation_keys_become_a_validation_event() -> None:
    events = parse_text(capture("verl-logs", "step-metrics-with-validation-multi-dataset-prime-issue21.txt"))
    (val,) = of_type(events, ValidationMetrics)
    assert val.kind == "step" and val.step == 4 and len(val.metrics) == 13
    assert all(k.startswith(("val-core/", "val-aux/")) for k in val.metrics)
    old = of_type(
        parse_text(capture("verl-logs", "step-metrics-main_task-old-format-issue316.txt")), ValidationMetrics
    )
    assert [v.metrics for v in old] == [{"val/test_score/openai/gsm8k": 0.171}]


def test_no_events_from_non_training_lines() -> None:
    assert parse_text(capture("verl-logs", "vllm-ascend-0.7.3-startup-plugin-lines-issue644.txt")) == []


def test_total_training_steps_from_the_trainer() -> None:
    events = parse_text(capture("errors", "c10d-tcpstore-socket-timeout-ascend-verl-issue849.txt"))
    assert of_type(events, TotalSteps) == [TotalSteps(line=3, total=435)]  # this fork prints 'Test~Total ...'


def test_parse_file_skips_nothing_and_streams(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = capture("verl-logs", "docs-quickstart-step-metrics.txt")
    path = tmp_path / "train.log"
    path.write_text(text * 3, encoding="utf-8")
    steps = of_type(parse_file(path), StepMetrics)
    assert [s.step for s in steps] == [0, 1, 0, 1, 0, 1]
    assert [s.line for s in steps] == [1, 2, 3, 4, 5, 6]


# ---- values -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("0.000", 0.0), ("83.000", 83.0), ("192519", 192519), ("-5", -5), ("1e-06", 1e-06),
        ("-8.163164312320433e-06", -8.163164312320433e-06), ("np.float64(0.3165)", 0.3165), ("np.int64(7)", 7),
        ("tensor(0.5, device='npu:0')", 0.5), ("tensor(2)", 2), ("True", 1), (" 0.5 ", 0.5),
    ],
)  # fmt: skip
def test_parse_value(raw: str, value: float) -> None:
    got = parse_value(raw)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("raw", ["nan", "np.float64(nan)", "inf", "-inf"])
def test_parse_value_non_finite(raw: str) -> None:
    got = parse_value(raw)
    assert isinstance(got, float) and not math.isfinite(got)


@pytest.mark.parametrize("raw", ["", "abc", "1_000", "1e", "0x1F", "None", "-", "np.float64()"])
def test_parse_value_rejects(raw: str) -> None:
    assert parse_value(raw) is None


def test_split_metrics_tail_and_dangling_separator() -> None:
    assert split_metrics("a:1 - b:2.5 - resp/cl").tail == "resp/cl"
    assert split_metrics("a:1 - b:").tail == "b:"
    dangling = split_metrics("a:1 - b:2 -")
    assert dangling.metrics == {"a": 1, "b": 2} and dangling.open and not dangling.tail
    closed = split_metrics("a:1 - b:nan - c:np.float64(3.5)")
    assert not closed.open and closed.metrics["c"] == 3.5 and math.isnan(closed.metrics["b"])


# ---- progress -----------------------------------------------------------------------------------------


def test_progress_bar_as_verl_prints_it() -> None:
    # the tqdm line quoted in the fixtures index (a real slurm log of verl)
    p = parse_progress(9, "Training Progress:   0%|          | 4/1000 [11:18<45:49:11, 165.61s/it]")
    assert p == Progress(
        line=9, step=4, total=1000, percent=0, elapsed_s=678.0, remaining_s=45 * 3600 + 49 * 60 + 11.0,
        seconds_per_step=165.61,
    )  # fmt: skip


def test_progress_rates_and_unknown_values() -> None:
    fast = parse_progress(1, "Training Progress:  50%|█████     | 5/10 [00:02<00:02,  2.50it/s]")
    assert fast is not None and fast.seconds_per_step == pytest.approx(0.4) and fast.percent == 50
    start = parse_progress(1, "Training Progress:   0%|          | 0/435 [00:00<?, ?it/s]")
    assert start is not None and (start.step, start.total, start.remaining_s, start.seconds_per_step) == (
        0,
        435,
        None,
        None,
    )
    no_total = parse_progress(1, "Training Progress: 7it [01:10, 10.00s/it]")
    assert no_total is not None and (no_total.step, no_total.total, no_total.elapsed_s) == (7, None, 70.0)
    days = parse_progress(1, "Training Progress:  99%|█████████▉| 99/100 [1d 2:03:04<00:10, 10.00s/it]")
    assert days is not None and days.elapsed_s == 86400 + 2 * 3600 + 3 * 60 + 4


# ---- validation dicts and phases ----------------------------------------------------------------------


class _NpFloat(float):
    """Prints like a numpy >= 2 scalar inside a dict, as verl's metrics do."""

    def __repr__(self) -> str:
        return f"np.float64({float(self)!r})"


def test_initial_validation_metrics_pprinted_over_several_lines() -> None:
    metrics = {
        "val-core/openai/gsm8k/acc/mean@1": _NpFloat(0.7103866565579985),
        "val-aux/openai/gsm8k/reward/mean@1": _NpFloat(0.7103866565579985),
        "val-aux/num_turns/min": 2,
        "timing_s/testing": 55.29,
    }
    # verl: pprint(f"Initial validation metrics: {val_metrics}") -- a long string pprints as several literals
    printed = pformat(f"Initial validation metrics: {metrics}")
    assert printed.count("\n") >= 2
    text = "\n".join(f"(TaskRunner pid=3017) {line}" for line in printed.splitlines()) + "\n"
    (val,) = of_type(
        parse_text("(TaskRunner pid=3017) unrelated\n" + text + "next line\n"), ValidationMetrics
    )
    assert val.kind == "initial" and val.line == 2
    assert val.metrics == {k: float(v) if isinstance(v, _NpFloat) else v for k, v in metrics.items()}


def test_final_validation_metrics_finish_the_run() -> None:
    text = (
        "step:3 - a:1\n" + pformat(f"Final validation metrics: { ({'val-core/x/acc/mean@1': 0.5}) }") + "\n"
    )
    events = parse_text(text)
    (val,) = of_type(events, ValidationMetrics)
    assert (val.kind, val.step, val.metrics) == ("final", 3, {"val-core/x/acc/mean@1": 0.5})
    assert [p.kind for p in of_type(events, Phase)] == [PhaseKind.TRAINING_FINISHED]
    none = parse_text(pformat(f"Final validation metrics: {None}") + "\n")
    assert [p.kind for p in of_type(none, Phase)] == [PhaseKind.TRAINING_FINISHED]


def test_phase_markers_in_run_order() -> None:
    log = "\n".join(
        [
            # verl tutorial notebook output (verbatim, with Ray's ANSI colour codes)
            "2025-10-16 23:20:11,956\tINFO worker.py:2004 -- Started a local Ray instance. View the dashboard at "
            "\x1b[1m\x1b[32mhttp://127.0.0.1:8265 \x1b[39m\x1b[22m",
            "(TaskRunner pid=904050) colocated worker base class <class 'verl.single_controller.base.worker.Worker'>",
            "(WorkerDict pid=904548) [W331 20:50:12.694407484 TCPStore.cpp:358] [c10d] TCP client failed to connect",
            "(TaskRunner pid=904050) test_gen_batch meta info: {'eos_token_id': 151643, 'do_sample': False}",
            "(TaskRunner pid=904050) step:1 - timing_s/gen:12.5 - actor/pg_loss:0.01",
            "(TaskRunner pid=904050) local_global_step_folder: checkpoints/verl_grpo/qwen/global_step_2",
            "(TaskRunner pid=904050) step:2 - timing_s/gen:12.0 - timing_s/save_checkpoint:30.5",
            "(TaskRunner pid=904050) Final validation metrics: None",
            "(TaskRunner pid=904050) Started a local Ray instance.",  # one-shot phases are not repeated
        ]
    )
    phases = [(p.kind, p.step, p.line) for p in of_type(parse_text(log), Phase)]
    assert phases == [
        (PhaseKind.RAY_STARTED, None, 1),
        (PhaseKind.WORKERS_STARTING, None, 2),
        (PhaseKind.ROLLOUT_STARTED, None, 4),
        (PhaseKind.CHECKPOINT_SAVING, 2, 6),
        (PhaseKind.CHECKPOINT_SAVED, 2, 7),  # the step's metrics are logged after _save_checkpoint() returned
        (PhaseKind.TRAINING_FINISHED, None, 8),
    ]


def test_rollout_phase_inferred_from_the_first_generation_time() -> None:
    events = parse_text(capture("verl-logs", "docs-quickstart-step-metrics.txt"))
    assert isinstance(events[0], Phase) and events[0].kind is PhaseKind.ROLLOUT_STARTED
    assert isinstance(events[1], StepMetrics) and events[1].step == 0


def test_parser_reports_lines_it_has_seen() -> None:
    parser = LogParser()
    parser.feed("a\nb\nc")
    assert parser.lines == 2
    parser.close()
    assert parser.lines == 3


def test_validation_values_printed_as_numpy_scalars_or_tensors_are_read() -> None:
    """verl's validation dict holds ``np.float64(...)`` reprs (numpy 2) and, from some reward functions, torch
    tensors with their dtype/device (``tensor(0.7500, dtype=torch.float64)``): the values are numbers, not
    dropped for the parentheses and commas around them."""
    text = ("(TaskRunner pid=7) Initial validation metrics: {'val-core/openai/gsm8k/acc/mean@1': np.float64(0.25), "
            "'val-aux/num_turns/min': np.int64(2), 'val-core/openai/gsm8k/reward/mean@1': tensor(0.5000, dtype=torch.float64), "
            "'val-aux/openai/gsm8k/score/std@1': tensor(0.1250, device='npu:0')}\n")
    events = LogParser(Classifier()).feed(text)
    vals = [e for e in events if isinstance(e, ValidationMetrics)]
    assert len(vals) == 1, events
    assert vals[0].metrics == {"val-core/openai/gsm8k/acc/mean@1": 0.25, "val-aux/num_turns/min": 2,
                               "val-core/openai/gsm8k/reward/mean@1": 0.5,
                               "val-aux/openai/gsm8k/score/std@1": 0.125}, vals[0]
