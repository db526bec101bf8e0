"""monitor/catalogue.py: what a mutation run showed unguarded (issue 16, ``reference/mutation.md``):
the excerpt's limit, ellipses and centring, step-line metrics that must not be classified, the
findings cap, the wording of the ERE translation error, and an immutable cached match."""

from __future__ import annotations

import dataclasses
import re

import pytest

from verlctl.monitor.catalogue import CATALOGUE, Classifier, Matcher, classify_lines, to_ere

OOM = "CUDA out of memory"


def match_of(line: str):  # type: ignore[no-untyped-def]
    m = Matcher().match(line)
    assert m is not None and m.category.name == "device_oom", line
    return m


def test_a_short_line_is_its_own_excerpt() -> None:
    line = "  " + OOM + " " + "y" * (300 - len(OOM) - 1) + "  "  # 300 characters once stripped
    assert match_of(line).excerpt() == line.strip()


def test_a_long_line_is_cut_to_300_characters_a_third_before_the_match() -> None:
    line = "x" * 400 + " " + OOM + " " + "y" * 400
    at = 401
    assert match_of(line).excerpt() == "…" + line[at - 100 : at + 200] + "…"


def test_a_match_near_the_start_keeps_the_start_and_no_leading_ellipsis() -> None:
    line = "x" * 50 + " " + OOM + " " + "y" * 400
    assert match_of(line).excerpt() == line[:300] + "…"


def test_no_trailing_ellipsis_when_the_piece_reaches_the_end() -> None:
    line = "x" * 200 + OOM + "y" * (200 - len(OOM))  # 400 characters; the piece is [100, 400)
    assert len(line) == 400
    assert match_of(line).excerpt() == "…" + line[100:]
    assert match_of(line + "z").excerpt() == "…" + line[100:] + "…"


def test_the_excerpt_limit_is_a_parameter() -> None:
    line = "x" * 400 + " " + OOM + " " + "y" * 400
    assert match_of(line).excerpt(limit=30) == "…" + line[391:421] + "…"


def test_a_step_line_whose_metrics_would_match_is_not_a_failure() -> None:
    metrics = f"val-aux/{OOM}/mean@1:0.5 - perf/throughput:12.0"
    assert [f.category for f in classify_lines([f"(TaskRunner pid=1) {metrics}"])] == ["device_oom"]  # it would match
    assert classify_lines([f"(TaskRunner pid=1) step:3 - {metrics}"]) == []
    assert Classifier().feed_line(1, f"(TaskRunner pid=1) step:3 - {metrics}") is None


def test_the_text_before_the_metrics_of_a_step_line_is_still_classified() -> None:
    (f,) = classify_lines([f"{OOM} step:3 - perf/throughput:12.0"])
    assert f.category == "device_oom"


def _distinct_failures() -> list[str]:
    """One example line of each of the first non-fallback, non-silencing categories."""
    lines = [c.signatures[0].examples[0] for c in CATALOGUE if not c.fallback and c.silence is None and not c.marks_finished
             and c.signatures[0].examples]
    return lines[:6]


def test_the_findings_cap_drops_and_counts_the_rest() -> None:
    lines = _distinct_failures()
    classifier = Classifier()
    classifier.max_findings = 2
    new = [classifier.feed_line(100 * i + 1, line) for i, line in enumerate(lines)]
    assert [f is not None for f in new] == [True, True] + [False] * (len(lines) - 2)
    assert len(classifier.findings()) == 2
    assert classifier.dropped == len(lines) - 2
    uncapped = Classifier()
    for i, line in enumerate(lines):
        uncapped.feed_line(100 * i + 1, line)
    assert uncapped.dropped == 0 and len(uncapped.findings()) == len(lines)


def test_a_lookaround_is_named_in_the_error() -> None:
    with pytest.raises(ValueError, match=re.escape("'(?=b' has no ERE form in 'a(?=b)'")):
        to_ere("a(?=b)")
    with pytest.raises(ValueError, match=re.escape("'(?<!' has no ERE form in '(?<!x)y'")):
        to_ere("(?<!x)y")


def test_a_match_is_immutable() -> None:
    # Classifier caches matches by line: a match changed after the fact would change every later repeat.
    m = match_of(OOM)
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.start = 1  # type: ignore[misc]


HYDRA_A = "Key 'foo' is not in struct"
HYDRA_B = "Key 'bar' is not in struct"


def test_a_line_fold_window_lines_later_is_the_same_incident() -> None:
    c = Classifier()
    assert c.feed_line(1, HYDRA_A) is not None
    assert c.feed_line(1 + Classifier.fold_window, HYDRA_B) is None  # 10 lines later: folded
    assert [f.line for f in c.findings()] == [1]
    later = Classifier()
    assert later.feed_line(1, HYDRA_A) is not None
    assert later.feed_line(2 + Classifier.fold_window, HYDRA_B) is not None  # 11 lines later: a new incident
    assert [f.line for f in later.findings()] == [1, 2 + Classifier.fold_window]


def test_the_fold_window_moves_with_each_line_of_the_incident() -> None:
    c = Classifier()
    assert c.feed_line(1, HYDRA_A) is not None
    assert c.feed_line(9, HYDRA_B) is None
    assert c.feed_line(18, "Key 'baz' is not in struct") is None  # 9 after the last line, 17 after the first
    assert len(c.findings()) == 1


def test_a_line_numbered_before_the_incident_is_not_folded_into_it() -> None:
    c = Classifier()
    assert c.feed_line(20, HYDRA_A) is not None
    assert c.feed_line(19, HYDRA_B) is not None
    assert sorted(f.line for f in c.findings()) == [19, 20]


def test_add_counts_one_sighting_by_default() -> None:
    c = Classifier()
    m = Matcher().match(OOM)
    assert m is not None
    f = c.add(5, m)
    assert f is not None and (f.line, f.count) == (5, 1)
    assert c.add(6, m) is None and f.count == 2
    assert c.add(7, m, repeats=3) is None and f.count == 6


def test_a_line_of_exactly_the_limit_is_whole_wherever_the_match_is() -> None:
    line = "y" * (300 - len(OOM)) + OOM  # the match at the end: a cut would start 100 characters before it
    assert len(line) == 300
    assert match_of(line).excerpt() == line


def test_a_log_finding_becomes_a_project_finding_with_its_line() -> None:
    [found] = classify_lines(["ok", "step 1", f"RuntimeError: {OOM}. Tried to allocate 2.00 GiB"])
    f = found.to_check_finding()
    assert (f.code, f.severity.value, f.field) == ("device_oom", "error", "line 3")
    assert f.message == found.message and f.hint == found.hint


def test_a_plain_group_passes_to_ere_unchanged() -> None:
    assert to_ere("(ab|cd)x") == "(ab|cd)x"
    assert to_ere("(?:ab|cd)x") == "(ab|cd)x"
