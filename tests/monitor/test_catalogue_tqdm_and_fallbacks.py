"""monitor/catalogue.py, mutation round 6 (#25): the excerpt of a match inside a tqdm redraw line, and a
Classifier over a catalogue of its own (which categories are fallbacks is the classifier's catalogue's word)."""

from __future__ import annotations

from verlctl.monitor.catalogue import Category, Classifier, Matcher, Signature, classify_lines
from verlctl.monitor.events import ErrorFound, parse_text

OOM = "RuntimeError: NPU out of memory. Tried to allocate 1.00 GiB"


def _bar(n: int) -> str:
    return f"Training Progress:  {n * 10}%|##        | {n}/10 [00:0{n}<00:09,  1.00s/it]"


def test_the_excerpt_is_the_tqdm_segment_that_holds_the_match() -> None:
    # tqdm redraws with '\r': the OOM is printed between two redraws on one physical line
    line = "\r" + _bar(1) + "\r" + _bar(2) + "(WorkerDict pid=2) " + OOM + "\r" + _bar(3)
    finding = Classifier().feed_line(1, line)
    assert finding is not None and finding.category == "device_oom"
    assert finding.excerpt == _bar(2) + "(WorkerDict pid=2) " + OOM
    # the match's segment reaches the end of the line (no '\r' after it)
    tail = "\r" + _bar(1) + "\r(WorkerDict pid=2) " + OOM
    last = Classifier().feed_line(1, tail)
    assert last is not None and last.excerpt == "(WorkerDict pid=2) " + OOM
    # and the segment starts at the line's first character
    head = "(WorkerDict pid=2) " + OOM + "\r" + _bar(4)
    first = Classifier().feed_line(1, head)
    assert first is not None and first.excerpt == "(WorkerDict pid=2) " + OOM


def test_a_long_tqdm_segment_is_cut_around_the_match_within_the_segment() -> None:
    segment = "x" * 400 + " " + OOM + " " + "y" * 400
    line = "\r" + _bar(1) + "\r" + segment + "\r" + _bar(2)
    finding = Classifier().feed_line(1, line)
    assert finding is not None
    at = segment.index("NPU out of memory")  # where device_oom's pattern starts: the cut is 300 // 3 before it
    assert finding.excerpt == "…" + segment[at - 100 : at + 200] + "…"


def _own_catalogue() -> tuple[Category, ...]:
    return (
        Category("flaky_disk", "the disk flaked", "replace it",
                 (Signature(r"disk flake at (?P<where>\S+)", ("disk flake",), ("disk flake at /dev/sda",)),)),
        Category("any_error", "some error", "read the log",
                 (Signature(r"\bError\b", ("Error",), ("Error",)),), fallback=True),
    )


def test_a_classifier_over_its_own_catalogue_reads_fallbacks_from_it() -> None:
    own = Classifier(Matcher(_own_catalogue()))
    assert own.feed_line(1, "Error: something odd") is not None
    assert [f.category for f in own.findings()] == ["any_error"]  # the fallback alone is reported
    assert own.feed_line(30, "disk flake at /dev/sdb") is not None
    # a specific finding hides the fallback one
    assert [f.category for f in own.findings()] == ["flaky_disk"]


def _fixture_lines(name: str) -> list[str]:
    from conftest import capture

    return capture("verl-logs", name).splitlines()


def test_a_real_import_error_right_after_verls_optional_engine_warnings_is_reported() -> None:
    # verl 0.9.1's healthy start-up warns (two lines each: the warning and its source line) for every optional
    # engine it cannot load; the ImportError that follows them is the run's own and must not be silenced
    lines = _fixture_lines("verl-0.9.1-cpu-startup-optional-engines-not-available-verlctl-realverl.txt")
    assert lines[-1].endswith('warnings.warn(f"megatron engine is not available: {e!r}", stacklevel=1)')
    error = "(TaskRunnerV1 pid=878) ModuleNotFoundError: No module named 'vllm'"
    found = Classifier()
    for lineno, line in enumerate([*lines, error], 1):
        found.feed_line(lineno, line)
    assert [(f.category, f.line) for f in found.findings()] == [("missing_module", len(lines) + 1)]


def test_a_specific_error_after_the_last_step_is_not_taken_back_by_the_teardown_message() -> None:
    # the real finished run: its DataLoader-killed teardown traceback is no finding; a disk-full error printed
    # between the last step's line and that teardown is one (only the fallback traceback is taken back)
    lines = _fixture_lines("realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt")
    finished = next(i for i, line in enumerate(lines) if "Final validation metrics" in line)
    full = "(TaskRunnerV1) OSError: [Errno 28] No space left on device"
    run = [*lines[: finished + 1], full, *lines[finished + 1 :]]
    assert [f.category for f in classify_lines(lines)] == []
    assert [(f.category, f.line) for f in classify_lines(run)] == [("disk_full", finished + 2)]



def test_an_error_after_the_last_step_is_reported_as_it_comes() -> None:
    # a watcher reacts to what feed_line returns (the parser's ErrorFound): an error printed after verl's final
    # line (a disk full while the teardown writes) is a new finding when its line comes, not only at the end
    lines = _fixture_lines("realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt")
    finished = next(i for i, line in enumerate(lines) if "Final validation metrics" in line)
    c = Classifier()
    for lineno, line in enumerate(lines[: finished + 1], 1):
        assert c.feed_line(lineno, line) is None
    full = c.feed_line(finished + 2, "(TaskRunnerV1) OSError: [Errno 28] No space left on device")
    assert full is not None and (full.category, full.line) == ("disk_full", finished + 2)
    head = c.feed_line(finished + 3, "(TaskRunnerV1) Traceback (most recent call last):")
    assert head is not None and head.category == "python_exception"
    events = parse_text("\n".join([*lines[: finished + 1], "(TaskRunnerV1) OSError: [Errno 28] No space left on device"])
                        + "\n", Classifier())
    assert [(e.line, e.finding.category) for e in events if isinstance(e, ErrorFound)] == [(finished + 2, "disk_full")]


def test_lines_of_one_category_fold_into_one_incident_within_the_fold_window() -> None:
    # two different exceptions of one category: one incident when the second comes within fold_window lines
    # of the first, two beyond it
    first, second = "(TaskRunnerV1) ValueError: bad", "(TaskRunnerV1) KeyError: 'prompt'"
    filler = "(TaskRunnerV1) INFO: working"
    w = Classifier.fold_window
    within = [first, *[filler] * (w - 1), second]  # the second at line 1 + w
    assert [(f.category, f.line, f.count) for f in classify_lines(within)] == [("python_exception", 1, 1)]
    beyond = [first, *[filler] * w, second]  # line 2 + w
    assert [(f.category, f.line) for f in classify_lines(beyond)] == [("python_exception", 1), ("python_exception", w + 2)]
