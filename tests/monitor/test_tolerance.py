"""The parser and the classifier tolerate what a real console log does to lines: Ray prefixes and repeat
suffixes, tqdm's carriage returns, ANSI colours, stderr interleaved, and lines split across reads."""

from __future__ import annotations

import random

from monitor_helpers import capture
from verlctl.monitor.catalogue import Classifier
from verlctl.monitor.events import (
    ErrorFound,
    LogParser,
    Progress,
    StepMetrics,
    clean_segment,
    of_type,
    parse_text,
)

STEP = "step:7 - actor/pg_loss:-0.01 - critic/score/mean:0.5 - timing_s/step:96.5"
METRICS = {"actor/pg_loss": -0.01, "critic/score/mean": 0.5, "timing_s/step": 96.5}


def _bar(n: int, total: int = 10) -> str:
    done = "█" * n + " " * (total - n)
    return f"Training Progress: {n * 100 // total:3d}%|{done}| {n}/{total} [00:{n * 5:02d}<00:{(total - n) * 5:02d},  5.00s/it]"


def test_ray_prefixes() -> None:
    for prefix in ("(TaskRunner pid=87031) ", "(main_task pid=51520) ", "(WorkerDict pid=904548, ip=10.0.0.2) ",
                   "(pid=904548) ", "(raylet, ip=10.0.0.128) ", ""):  # fmt: skip
        (step,) = of_type(parse_text(prefix + STEP + "\n"), StepMetrics)
        assert (step.step, step.metrics) == (7, METRICS), prefix
    assert clean_segment("(WorkerDict pid=1, ip=10.0.0.2) hello").source == "WorkerDict"
    assert clean_segment("(raylet) x").source == "raylet"
    # a shell prompt is not a Ray prefix
    assert clean_segment("(base) user@host:~$ python x.py").text == "(base) user@host:~$ python x.py"


def test_repeated_suffix_is_removed_and_counted() -> None:
    (step,) = of_type(parse_text(f"(TaskRunner pid=1) {STEP} [repeated 3x across cluster]\n"), StepMetrics)
    assert step.metrics == METRICS
    line = capture(
        "errors", "ray-actor-died-SYSTEM_ERROR-thread-resource-unavailable-verl-issue472.txt"
    ).splitlines()[7]
    assert "[repeated 2x across cluster] (Ray deduplicates logs" in line
    classifier = Classifier()
    finding = classifier.feed_line(1, line)
    assert finding is not None and finding.category == "resource_limit"
    assert finding.count == 3  # the line itself plus the 2 that Ray folded into it
    assert "[repeated" not in finding.excerpt


def test_carriage_return_updates_on_one_line() -> None:
    # tqdm redraws with '\r' and no newline; the next print lands on the same physical line
    line = "".join("\r" + _bar(n) for n in range(4)) + STEP + "\n"
    events = parse_text("before\n" + line)
    progress = of_type(events, Progress)
    assert [(p.step, p.total, p.line) for p in progress] == [(0, 10, 2), (1, 10, 2), (2, 10, 2), (3, 10, 2)]
    (step,) = of_type(events, StepMetrics)
    assert (step.step, step.metrics, step.line) == (7, METRICS, 2)


def test_live_progress_before_the_newline_arrives() -> None:
    parser = LogParser()
    assert of_type(parser.feed("\r" + _bar(1)), Progress) == []  # the segment may still grow
    got = of_type(parser.feed("\r" + _bar(2)), Progress)
    assert [p.step for p in got] == [1]  # a following '\r' completes the previous redraw
    got = of_type(parser.feed("\r" + _bar(3) + "\n"), Progress)
    assert [p.step for p in got] == [2, 3]
    assert of_type(parser.close(), Progress) == []  # nothing is reported twice


def test_ansi_colours() -> None:
    coloured = f"\x1b[36m(TaskRunner pid=87031)\x1b[0m {STEP}\n"
    (step,) = of_type(parse_text(coloured), StepMetrics)
    assert step.metrics == METRICS
    bar = "\x1b[A\r\x1b[32m" + _bar(5) + "\x1b[0m\n"
    (p,) = of_type(parse_text(bar), Progress)
    assert p.step == 5
    oom = "\x1b[31m(WorkerDict pid=9)\x1b[0m \x1b[1mtorch.OutOfMemoryError: NPU out of memory. Tried to allocate 2.0 GiB\x1b[0m"
    finding = Classifier().feed_line(1, oom)
    assert finding is not None and finding.category == "device_oom" and "\x1b" not in finding.excerpt


def test_stderr_interleaved_with_progress_and_steps() -> None:
    log = (
        "\r" + _bar(1) + "\r" + _bar(2)
        + "\n/usr/lib/python3.10/site-packages/torch_npu/utils/collect_env.py:58: UserWarning: Warning: owner\n"
        + "  warnings.warn(f\"Warning: The {path} owner does not match the current owner.\")\n"
        + "(TaskRunner pid=1) " + STEP + "\n"
        + "\r" + _bar(3) + "(WorkerDict pid=2) RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB\n"
    )  # fmt: skip
    events = parse_text(log, Classifier())
    assert [p.step for p in of_type(events, Progress)] == [1, 2, 3]
    assert [(s.step, s.line) for s in of_type(events, StepMetrics)] == [(7, 4)]
    (error,) = of_type(events, ErrorFound)
    assert (error.line, error.finding.category) == (5, "device_oom")


def test_line_split_across_chunks() -> None:
    text = (
        capture("verl-logs", "step-metrics-gh200-sglang-issue1208.txt")
        + "\r" + _bar(1) + "\r" + _bar(2) + "\n"
        + capture("errors", "npu-oom-runtimeerror-vllm-ascend-issue1987.txt")
        + capture("verl-logs", "step-metrics-with-validation-multi-dataset-prime-issue21.txt")
    )  # fmt: skip
    whole = parse_text(text, Classifier())
    cut = text.index("prompt_length/mean")  # in the middle of a step line
    parser = LogParser(Classifier())
    two = parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close()
    assert _comparable(two) == _comparable(whole)
    rng = random.Random(7)
    for _ in range(20):  # and any other split, down to one character per read
        parser = LogParser(Classifier())
        events, pos = [], 0
        while pos < len(text):
            size = rng.choice([1, 2, 3, 17, 100, 1000])
            events += parser.feed(text[pos : pos + size])
            pos += size
        events += parser.close()
        assert _comparable(events) == _comparable(whole)
    assert [s.step for s in of_type(whole, StepMetrics)] == [2, 4]
    assert [p.step for p in of_type(whole, Progress)] == [1, 2]
    assert [e.finding.category for e in of_type(whole, ErrorFound)] == ["device_oom"]


def _comparable(events: list) -> list:
    out = []
    for e in events:
        if isinstance(e, ErrorFound):
            out.append(("error", e.line, e.finding.category, e.finding.excerpt))
        else:
            out.append(e)
    return out


def test_watcher_api_from_the_package() -> None:
    from verlctl.monitor import Classifier as C
    from verlctl.monitor import ErrorFound as E
    from verlctl.monitor import LogParser as P

    parser = P(C())
    events = parser.feed(
        "(WorkerDict pid=3) torch.OutOfMemoryError: NPU out of memory. Tried to allocate 1 GiB\n"
    )
    assert [e.finding.category for e in events if isinstance(e, E)] == ["device_oom"]


def test_excerpt_is_the_segment_with_the_error() -> None:
    line = (
        "\r"
        + _bar(3)
        + "\r"
        + _bar(4)
        + "(WorkerDict pid=2) RuntimeError: NPU out of memory. Tried to allocate 1 GiB"
    )
    finding = Classifier().feed_line(1, line)
    assert finding is not None and "\r" not in finding.excerpt
    assert finding.excerpt.startswith("Training Progress:  40%") and finding.excerpt.endswith(
        "allocate 1 GiB"
    )
    long = "x" * 500 + " RuntimeError: NPU out of memory. Tried to allocate 1 GiB " + "y" * 500
    short = Classifier().feed_line(1, long)
    assert short is not None and "NPU out of memory" in short.excerpt and len(short.excerpt) <= 302


def test_held_step_line_followed_by_a_redraw_on_the_same_line() -> None:
    text = "step:5 - a:1 - resp/cl\r" + _bar(2) + "\nip_ratio:0.5 - b:2\n"
    whole = parse_text(text)
    for cut in range(1, len(text)):
        parser = LogParser()
        assert parser.feed(text[:cut]) + parser.feed(text[cut:]) + parser.close() == whole, cut
    assert [(s.step, s.metrics) for s in of_type(whole, StepMetrics)] == [(5, {"a": 1})]
