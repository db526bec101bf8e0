"""``verlctl diagnose``: the fast scanner gives what the full parser gives, valid JSON, constant memory, and
the command line (``python -m verlctl diagnose``) classifies every error fixture."""

from __future__ import annotations

import io
import json
import math
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor_helpers import capture, fixture_names, run_verlctl
from test_catalogue import EXPECTED, HEALTHY
from test_events import SAMPLES, STEP_LINES
from verlctl.monitor.catalogue import Classifier
from verlctl.monitor.diagnose import (
    DiagnoseScanner,
    JsonStepWriter,
    LastStep,
    diagnose_bytes,
    diagnose_stream,
    fast_step_body,
    steps_json,
)
from verlctl.monitor.events import LogParser, Progress, StepMetrics, TotalSteps


def reference(text: str) -> dict:
    """What diagnose must print, computed the slow way: the full parser and classifier on every line."""
    classifier = Classifier()
    parser = LogParser(classifier)
    events = parser.feed(text) + parser.close()
    step = total = None
    steps = []
    for e in events:
        if isinstance(e, StepMetrics):
            steps.append({"step": e.step, "metrics": e.metrics})
            step = e.step
        elif isinstance(e, Progress):
            step = e.step
            total = e.total if e.total is not None else total
        elif isinstance(e, TotalSteps):
            total = e.total
    return {
        "steps": steps,
        "progress": None if step is None else {"step": step, "total": total},
        "findings": [f.to_dict() for f in classifier.findings()],
    }


def fast(data: bytes, chunk: int | None = None) -> dict:
    out = io.BytesIO()
    scanner = DiagnoseScanner(JsonStepWriter(out))
    for i in range(0, len(data), chunk or max(1, len(data))):
        scanner.feed(data[i : i + (chunk or len(data))])
    d = scanner.close()
    return {"steps": json.loads(b"[" + out.getvalue() + b"]"), "progress": d.progress,
            "findings": [f.to_dict() for f in d.findings]}  # fmt: skip


def _same(a: dict, b: dict) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)  # NaN-safe, order-sensitive


ALL_FIXTURES = [("errors", n) for n in fixture_names("errors")] + [
    ("verl-logs", n) for n in fixture_names("verl-logs")
]
ALL_LINES = [line for cat, name in ALL_FIXTURES for line in capture(cat, name).splitlines()]

TRICKY_LINES = [
    "step:1 - a:nan - b:np.float64(0.5) - c:np.int64(3) - d:1e-06 - e:-0.000 - f:tensor(0.25, device='npu:0')",
    "step:2 - a:1.2.3 - b:01 - c:+1 - d:.5 - e:1. - f:True",
    'step:3 - we"ird:1 - back\\slash:2 - tab\tkey:3 - ünï:4',
    "step:4 - a:1 - :2 - b - c:3",
    "(TaskRunner pid=1) step:5 - x:1 [repeated 2x across cluster]",
    "\x1b[36m(TaskRunner pid=1)\x1b[0m step:6 - x:1 - y:2",
    "\rTraining Progress:  10%|█         | 1/10 [00:05<00:45,  5.00s/it]step:7 - x:1",
    "step:8 - a:1 - b:2 -",
    "step:9 - a:1 - resp/cl",
    "ip_ratio:0.5 - z:3",
    "step:10 - global_step:4 - timing_s/step:2",
    "training/global_step:10 - x:1",
    "Training Progress: 100%|██████████| 10/10 [00:50<00:00,  5.00s/it]",
    "(TaskRunner pid=1) Total training steps: 10",
    "step:11 - a:1\r",
    "step:12 - a:1e5 - b:-2E-3 - c:0 - d:-0",
]


@pytest.mark.parametrize(("category", "name"), ALL_FIXTURES)
def test_fast_equals_full_parser_on_fixtures(category: str, name: str) -> None:
    text = capture(category, name)
    want = reference(text)
    for chunk in (None, 1, 7, 100):
        assert _same(fast(text.encode(), chunk), want), chunk


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.sampled_from(ALL_LINES + TRICKY_LINES), min_size=1, max_size=40),
    chunk=st.integers(min_value=1, max_value=4000),
)
def test_fast_equals_full_parser_on_any_mix(lines: list[str], chunk: int) -> None:
    text = "\n".join(lines) + "\n"
    assert _same(fast(text.encode(), chunk), reference(text))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=12),
            st.one_of(
                st.floats(allow_nan=True, allow_infinity=True).map(repr),
                st.integers().map(str),
                st.text(alphabet="0123456789.eE+-", max_size=8),
            ),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_json_is_always_valid_and_faithful(pairs: list[tuple[str, str]]) -> None:
    body = " - ".join(f"{k}:{v}" for k, v in pairs)
    line = f"step:3 - {body}"
    if "\n" in line or "\r" in line:
        return
    got = fast(line.encode() + b"\n")["steps"]
    assert _same({"s": got}, {"s": reference(line + "\n")["steps"]})


def test_fast_path_accepts_verl_lines_and_rejects_the_rest() -> None:
    assert fast_step_body(
        b"timing/gen:21.470 - actor/pg_loss:-0.005 - critic/lr(1e-4):0.100 - lr:1e-06 - n:192519"
    )
    for body in (b"a:nan", b"a:1.2.3", b"a:01", b"a:+1", b"a:.5", b"a:1.", b"a:1e", b'a"b:1', b"a:1 - b", b":1",
                 b"a:1 - :2", b"a:1 -", b"a:1 ", b"a\tb:1", b"a:1\r", "ä:1".encode(), b""):  # fmt: skip
        assert not fast_step_body(body), body
    out = steps_json([1, 2], [b"a:1 - b:-2.5e-3", b"c:0"])
    assert json.loads(b"[" + out + b"]") == [{"step": 1, "metrics": {"a": 1, "b": -0.0025}},
                                             {"step": 2, "metrics": {"c": 0}}]  # fmt: skip


def test_non_finite_values_survive_as_numbers() -> None:
    got = fast(b"step:1 - a:nan - b:-inf - c:np.float64(0.5)\n")["steps"]
    assert math.isnan(got[0]["metrics"]["a"]) and got[0]["metrics"]["b"] == -math.inf
    assert got[0]["metrics"]["c"] == 0.5


def test_last_step_sink_and_summary_fields() -> None:
    text = (capture("verl-logs", "docs-quickstart-step-metrics.txt")
            + "\rTraining Progress:  20%|██        | 2/10 [00:10<00:40,  5.00s/it]\n")  # fmt: skip
    sink = LastStep()
    d = diagnose_bytes(text.encode(), sink)
    last = sink.last()
    assert last is not None and last[0] == 1 and last[1]["critic/grad_norm"] == 942.924
    assert (d.step, d.total, d.steps, d.lines, d.findings) == (2, 10, 2, 3, [])


def test_memory_stays_flat_on_a_big_log() -> None:
    block = "".join(capture(c, n) for c, n in ALL_FIXTURES).encode()
    target = 48 << 20

    class Generated(io.RawIOBase):
        """A 48 MiB log that is never held in memory."""

        sent = 0

        def readable(self) -> bool:
            return True

        def read(self, size: int = -1) -> bytes:
            if self.sent >= target:
                return b""
            n = max(1, (size if size > 0 else 1 << 20) // len(block))
            self.sent += n * len(block)
            return block * n

    class Discard(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, b) -> int:  # type: ignore[no-untyped-def,override]
            return len(b)

    tracemalloc.start()
    try:
        d = diagnose_stream(Generated(), JsonStepWriter(Discard()))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert d.steps > 10_000 and d.findings
    assert peak < 40 << 20, f"peak {peak >> 20} MiB for a {target >> 20} MiB log"


# ---- the command ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", fixture_names("errors"))
def test_cli_json_on_error_fixtures(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text(capture("errors", name), encoding="utf-8")
    run = run_verlctl("diagnose", str(log), "--json")
    assert run.code == 1, run.err
    doc = run.json()
    assert set(doc) == {"findings", "progress", "steps"}
    assert [f["category"] for f in doc["findings"]] == EXPECTED[name]
    root = doc["findings"][0]
    assert set(root) == {"category", "line", "excerpt", "message", "hint", "count"} and root["hint"]


@pytest.mark.parametrize("name", fixture_names("verl-logs"))
def test_cli_json_on_training_logs(name: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text(capture("verl-logs", name), encoding="utf-8")
    run = run_verlctl("diagnose", str(log), "--json")
    doc = run.json()
    assert run.code == (1 if HEALTHY[name] else 0)
    assert [f["category"] for f in doc["findings"]] == HEALTHY[name]
    assert [(s["step"], len(s["metrics"])) for s in doc["steps"]] == STEP_LINES[name]
    by_step = {s["step"]: s["metrics"] for s in doc["steps"]}
    for step, key, value in SAMPLES.get(name, []):
        assert by_step[step][key] == value
    last = STEP_LINES[name][-1][0] if STEP_LINES[name] else None
    assert doc["progress"] == (None if last is None else {"step": last, "total": PROGRESS_TOTALS.get(name)})


#: The verl-logs fixtures with a tqdm "Training Progress: ... N/T" line: T.
PROGRESS_TOTALS = {"realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt": 2}


def test_cli_reads_stdin_and_prints_a_summary() -> None:
    text = capture("errors", "ray-RayTaskError-ActorDiedError-driver-traceback-ttrl-issue43.txt")
    run = run_verlctl("diagnose", "-", "--json", stdin=text)
    assert run.code == 1 and run.json()["findings"][0]["category"] == "ray_actor_died"
    text = capture("verl-logs", "docs-quickstart-step-metrics.txt") + capture(
        "errors", "npu-oom-runtimeerror-vllm-ascend-issue1987.txt"
    )
    run = run_verlctl("diagnose", "-", stdin=text)
    assert run.code == 1
    assert "root cause: device_oom (line 3)" in run.out and "offload" in run.out
    assert "progress: step 1" in run.out and "last step 1:" in run.out


def test_cli_clean_log_exits_zero() -> None:
    run = run_verlctl("diagnose", "-", stdin=capture("verl-logs", "docs-quickstart-step-metrics.txt"))
    assert run.code == 0 and "no known failure" in run.out


@pytest.mark.parametrize("target", ["missing.log", "."])
def test_cli_unreadable_log_is_one_line(target: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / target) if target != "." else str(tmp_path)
    run = run_verlctl("diagnose", path, "--json")
    assert run.code == 2
    error = json.loads(run.out)["error"]  # --json: the error as one JSON object on stdout, too
    assert error["exit_code"] == 2 and error["message"].startswith("cannot read ")
    assert (
        run.err.startswith("error: cannot read ") and run.err.count("\n") == 1 and "Traceback" not in run.err
    )


# ---- the JSON writer in a second process (big files) ---------------------------------------------------


def _scan_to(writer, data: bytes) -> None:  # type: ignore[no-untyped-def]
    scanner = DiagnoseScanner(writer)
    for i in range(0, len(data), 4096):
        scanner.feed(data[i : i + 4096])
    scanner.close()


def test_pipelined_writer_writes_what_the_plain_writer_writes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from verlctl.monitor.diagnose import PipelinedJsonWriter

    data = ("\n".join(ALL_LINES + TRICKY_LINES) + "\n").encode() * 3
    plain = io.BytesIO()
    _scan_to(JsonStepWriter(plain, batch=5), data)
    path = tmp_path / "out.json"
    with open(path, "wb") as f:
        writer = PipelinedJsonWriter(f.fileno(), batch=5)
        _scan_to(writer, data)
    assert path.read_bytes() == plain.getvalue()
    assert writer.count == len(json.loads(b"[" + plain.getvalue() + b"]")) > 30


def test_pipelined_writer_reports_a_closed_pipe() -> None:
    import os

    from verlctl.monitor.diagnose import PipelinedJsonWriter

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        writer = PipelinedJsonWriter(write_end, batch=1)
        with pytest.raises(BrokenPipeError):
            _scan_to(writer, capture("verl-logs", "docs-quickstart-step-metrics.txt").encode() * 2000)
    finally:
        os.close(write_end)


def test_cli_big_log_into_a_closed_pipe(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys

    from verlctl.commands.diagnose import PIPELINE_MIN_BYTES

    block = "".join(capture(c, n) for c, n in ALL_FIXTURES)
    log = tmp_path / "big.log"
    log.write_text(block * (PIPELINE_MIN_BYTES // len(block) + 1), encoding="utf-8")
    for args in (["--json"], []):
        proc = subprocess.Popen([sys.executable, "-m", "verlctl", "diagnose", str(log), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None and proc.stderr is not None
        head = proc.stdout.read(40)
        proc.stdout.close()  # like `| head -c 40`
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 1
        assert head and err == "", err


def test_unicode_whitespace_at_a_cut_is_treated_like_the_parser_does() -> None:
    text = "step:1 - a:1 - b:\u00a0\nc:2 - d:3\nstep:2 - e:\u3000 - f:1\n"
    assert _same(fast(text.encode()), reference(text))


_TOKENS = ["step:", "3", "0.5", "-", " - ", ":", "a", "b/c", " ", "\u00a0", "\r", "\x1b[31m", "(TaskRunner pid=1) ",
           "np.float64(", "np.int64(2)", ")", "nan", "e", ".", " [repeated 2x across cluster]", "Training Progress: ",
           " 50%|#####     | 5/10 [00:01<00:02,  1.00s/it]", "Total training steps: 9", "NPU out of memory",
           "Traceback (most recent call last):", "\t", '"', "\u00fc", "1e-06", "x:1 - y:2"]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(st.lists(st.sampled_from(_TOKENS), max_size=12).map("".join), min_size=1, max_size=12),
    chunk=st.integers(min_value=1, max_value=300),
)
def test_fast_equals_full_parser_on_fuzzed_lines(lines: list[str], chunk: int) -> None:
    text = "\n".join(lines) + "\n"
    assert _same(fast(text.encode(), chunk), reference(text))


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.lists(st.sampled_from(_TOKENS), max_size=12).map("".join), min_size=1, max_size=10),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_parser_events_do_not_depend_on_how_the_text_is_split(lines: list[str], cuts: list[int]) -> None:
    text = "\n".join(lines) + ("\n" if len(lines) % 2 else "")  # with and without a final newline
    whole = LogParser(Classifier())
    want = [_event_key(e) for e in whole.feed(text) + whole.close()]
    parser = LogParser(Classifier())
    got, pos = [], 0
    for cut in sorted(set(c for c in cuts if c < len(text))):
        got += parser.feed(text[pos:cut])
        pos = cut
    got += parser.feed(text[pos:]) + parser.close()
    assert [_event_key(e) for e in got] == want


def _event_key(event):  # type: ignore[no-untyped-def]
    from verlctl.monitor.events import ErrorFound

    if isinstance(event, ErrorFound):
        return ("error", event.line, event.finding.category, event.finding.excerpt)
    return json.dumps(repr(event))


def test_cli_output_is_the_same_with_the_json_writer_in_a_second_process(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "train.log"
    log.write_text("".join(capture(c, n) for c, n in ALL_FIXTURES) * 3, encoding="utf-8")
    one = run_verlctl("diagnose", str(log), "--json", env={"VERLCTL_DIAGNOSE_PIPELINE": "0"})
    two = run_verlctl("diagnose", str(log), "--json", env={"VERLCTL_DIAGNOSE_PIPELINE": "1"})
    assert one.code == two.code == 1 and one.err == two.err == ""
    assert one.out == two.out and len(one.json()["steps"]) == 3 * 8
