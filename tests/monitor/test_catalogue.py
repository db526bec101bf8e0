"""The error catalogue on the real failures of tests/fixtures/errors, its examples, its grep form, and the
classifier's root-cause order and deduplication."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from monitor_helpers import capture, fixture_names
from verlctl.monitor.catalogue import (
    CATALOGUE,
    CATEGORY_NAMES,
    Classifier,
    Matcher,
    classify_lines,
    ere_patterns,
    literal_alternation,
    signature_ere,
    to_ere,
)

# file -> the categories found, root cause first (decided by reading each file).
EXPECTED = {
    "c10d-tcpstore-socket-timeout-ascend-verl-issue849.txt": ["collective_timeout"],
    # the disk/quota filled up while torch.save wrote the shard; RayTaskError(RuntimeError) is only the wrapper
    "checkpoint-save-failed-PytorchStreamWriter-RayTaskError-verl-issue3346.txt": [
        "checkpoint_save_failed", "ray_task_failed"],
    "cuda-oom-torch2.1-capacty-typo-mygirlgpt-issue11.txt": ["device_oom"],
    "cuda-oom-torch2.2-expandable-segments-pytorch-issue16417.txt": ["device_oom"],
    # only the head of the traceback survived (the AssertionError is cut off): nothing more specific is known
    "dataproto-equal-chunk-assertion-traceback-head-easyr1-issue44.txt": ["python_exception"],
    "divisible-attention-heads-tp-valueerror-fsdrive-issue21.txt": ["config_value_error"],
    # EI0006 (a peer rank did not answer) is the cause; 'HcclAllreduce, error code is 6' is how it surfaced
    "hccl-EI0006-allreduce-error-code-6-vllm-ascend-issue486.txt": ["hccl_timeout", "hccl_error"],
    "hccl-EI0006-old-format-cann8.0rc2-llamafactory-issue5071.txt": ["hccl_timeout"],
    "hydra-could-not-override-key-not-in-struct-verl-issue4262.txt": ["config_key_error"],
    "no-module-named-torch_npu._C-ascend-pytorch-issue24.txt": ["missing_module"],
    # EE1002 stream-synchronize timeout + runtime code 507046: an NPU runtime error (one incident)
    "npu-EE1002-stream-sync-timeout-507046-ascend-pytorch-issue48.txt": ["device_error"],
    "npu-oom-runtimeerror-vllm-ascend-issue1987.txt": ["device_oom"],
    "port-in-use-c10d-29500-with-port-vlm-r1-issue289.txt": ["port_in_use"],
    # the head of a rank-prefixed traceback; its exception (std::bad_alloc per the PR) is not in the excerpt
    "rank0-prefixed-traceback-vllm-npu-pr8054.txt": ["python_exception"],
    # the generic "(1) killed by the OOM killer ... (3) SIGSEGV" text of Ray is not an OOM nor a segfault
    "ray-ActorDiedError-WorkerDict-vllm-async-sleep-verl-issue4921.txt": ["ray_actor_died"],
    # RayTaskError(ActorDiedError) is an actor death; the real assertion is beyond the excerpt
    "ray-RayTaskError-ActorDiedError-driver-traceback-ttrl-issue43.txt": ["ray_actor_died"],
    # the WorkerDict died because it could not create a thread (EAGAIN): the limit is the root cause
    "ray-actor-died-SYSTEM_ERROR-thread-resource-unavailable-verl-issue472.txt": ["resource_limit", "ray_actor_died"],
    # TrainingFailedError wraps the actor death; torch_npu's ERR99999 header is host-side (Device:-1), not a fault
    "ray-train-failed-with-torch_npu-ERR99999-wrapper-ray-issue49998.txt": ["ray_actor_died", "ray_task_failed"],
    # the raylet's Check failed is "Failed to connect to GCS within 60 seconds": the GCS loss came first
    "raylet-crash-gcs-60s-check-failed-ray-issue26966.txt": ["ray_gcs_unreachable", "raylet_died"],
    # SIGSEGV inside the actor, then the driver's RayActorError and Ray's unhandled-error wrapper
    "segfault-in-ray-actor-then-RayActorError-ray-pr44292.txt": ["segfault", "ray_actor_died", "ray_task_failed"],
}  # fmt: skip

HEALTHY = {
    "docs-quickstart-step-metrics.txt": [],
    "step-metrics-gh200-sglang-issue1208.txt": [],
    "step-metrics-main_task-old-format-issue316.txt": [],
    "step-metrics-taskrunner-3dp-sglang-issue106.txt": [],
    "step-metrics-with-validation-multi-dataset-prime-issue21.txt": [],
    "verl-npu-platform-not-available-cpu-only-actor-warning-issue6741.txt": ["npu_unavailable"],
    "vllm-ascend-0.7.3-startup-plugin-lines-issue644.txt": [],
    # real verl 0.9.1 on CPU: the DataLoader-killed traceback after the last step is the teardown of a finished run
    "realverl-0.9.1-cpu-grpo-dataloader-killed-after-last-checkpoint.txt": [],
    # the same, seen live with 12 lines of frames under "Exception ignored in atexit callback" (CI of stop 33)
    "realverl-0.9.1-cpu-grpo-atexit-dataloader-killed-after-last-step.txt": [],
    # verl 0.9.1 warns at import for each optional engine it cannot load; a healthy run (tests/realverl_runs/test_realverl.py)
    "verl-0.9.1-cpu-startup-optional-engines-not-available-verlctl-realverl.txt": [],
}

# Lines that look alarming but are not failures (real text unless marked).
NOT_FAILURES = [
    # a Ray warning at 95% disk use: the run goes on
    "(raylet) [2025-10-20 01:48:15,818 E 998594 998629] (raylet) file_system_monitor.cc:116: "
    "/tmp/ray/session_2025-10-20_01-47-33_454343_990302 is over 95% full, available space: 77.5226 GB; capacity: "
    "1874.72 GB. Object creation will fail if spilling is required.",
    # a tool's traceback inside an agent-loop response (verl tutorial notebook output)
    '(ToolResponse(text=\'Traceback (most recent call last):\\n  File "/tmp/temp_code3e2f638_.py", line 2, in '
    "<module>\\n    print(sympy.sqrt(3))\\nNameError: name \\'sympy\\' is not defined\\n', image=None, video=None), 0.0, {})",
    "[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator 'aten::isin.Tensor_Tensor_out' is not currently "
    "supported on the NPU backend and will fall back to run on the CPU.",
    "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.",
    "(WorkerDict pid=904548) [W331 20:50:12.694407484 TCPStore.cpp:358] [c10d] TCP client failed to connect/validate "
    "to host 10.123.132.218:38321 - retrying (try=0, timeout=1800000ms, delay=56413ms): T",
    "INFO 04-30 09:33:41 __init__.py:198] Platform plugin ascend is activated",
    "(TaskRunner pid=1) step:3 - val-aux/Error_rate/mean@1:0.5 - timing_s/step:10.0",  # constructed: keys are metrics
    "Failed to connect to GCS: 403 Forbidden",  # constructed: Google Cloud Storage, not Ray's GCS
]


@pytest.mark.parametrize("name", fixture_names("errors"))
def test_error_fixture_categories_root_cause_first(name: str) -> None:
    assert name in EXPECTED, f"new fixture {name}: add its expected categories"
    findings = classify_lines(capture("errors", name).splitlines())
    assert [f.category for f in findings] == EXPECTED[name]


@pytest.mark.parametrize("name", fixture_names("verl-logs"))
def test_training_logs_have_no_false_failures(name: str) -> None:
    findings = classify_lines(capture("verl-logs", name).splitlines())
    assert [f.category for f in findings] == HEALTHY[name]


@pytest.mark.parametrize("line", NOT_FAILURES)
def test_lines_that_are_not_failures(line: str) -> None:
    assert Classifier().feed_line(1, line) is None


def test_ray_generic_causes_are_not_an_oom_or_a_segfault() -> None:
    # Ray's explanation after an actor death lists possible causes; none of them happened here
    line = (
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) the "
        "process was killed by the OOM killer due to high memory usage, (2) ray stop --force was called, or (3) the "
        "worker crashed unexpectedly due to SIGSEGV or another unexpected error."
    )
    assert [f.category for f in classify_lines([line])] == ["ray_actor_died"]


def test_finding_fields_on_a_real_oom() -> None:
    (f,) = classify_lines(capture("errors", "npu-oom-runtimeerror-vllm-ascend-issue1987.txt").splitlines())
    assert (f.category, f.line, f.count, f.message) == ("device_oom", 1, 1, "NPU out of memory")
    assert f.excerpt.startswith("RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB")
    for needle in ("`offload`", "`recompute`", "train.micro_batch_size_per_device", "train.max_response_length",
                   "gpu_memory_utilization", "TP"):  # fmt: skip
        assert needle in f.hint
    assert f.to_dict() == {"category": "device_oom", "line": 1, "excerpt": f.excerpt, "message": f.message,
                           "hint": f.hint, "count": 1}  # fmt: skip


def test_config_key_hint_quotes_the_key() -> None:
    (f,) = classify_lines(
        capture("errors", "hydra-could-not-override-key-not-in-struct-verl-issue4262.txt").splitlines()
    )
    assert f.line == 1 and "'actor_rollout_ref.rollout.n'" in f.message
    assert "`actor_rollout_ref.rollout.n`" in f.hint and "`+actor_rollout_ref.rollout.n=...`" in f.hint
    assert "spelling" in f.hint


def test_port_hint_names_the_port_and_how_to_change_it() -> None:
    (f,) = classify_lines(
        capture("errors", "port-in-use-c10d-29500-with-port-vlm-r1-issue289.txt").splitlines()
    )
    assert f.message == "port 29500 is already in use"
    assert ":29500" in f.hint and "MASTER_PORT" in f.hint and "cluster.ray_port" in f.hint


def test_missing_module_names_it() -> None:
    (f,) = classify_lines(
        capture("errors", "no-module-named-torch_npu._C-ascend-pytorch-issue24.txt").splitlines()
    )
    assert (f.line, f.count) == (8, 2)  # two tracebacks, one finding
    assert "'torch_npu._C'" in f.message and "another directory" in f.hint


def test_oom_inside_a_ray_task_error_is_an_oom() -> None:
    log = [
        "Traceback (most recent call last):",
        '  File "/verl/verl/trainer/main_ppo.py", line 65, in run_ppo',
        "    ray.get(runner.run.remote(config))",
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() (pid=3, ip=10.0.0.2)",
        '  File "/verl/verl/workers/actor/dp_actor.py", line 412, in update_policy',
        "torch.OutOfMemoryError: NPU out of memory. Tried to allocate 2.50 GiB (NPU 3; 60.97 GiB total capacity)",
        "(raylet) A worker died or was killed while executing a task by an unexpected system error.",
    ]  # constructed from the shapes of the fixtures above
    assert [f.category for f in classify_lines(log)] == ["device_oom", "ray_actor_died", "ray_task_failed"]


def test_fallback_only_when_nothing_specific() -> None:
    assert [
        f.category for f in classify_lines(["Traceback (most recent call last):", "KeyError: 'prompt'"])
    ] == ["python_exception"]
    both = classify_lines(
        ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'swanlab'"]
    )
    assert [f.category for f in both] == ["missing_module"]


# ---- deduplication --------------------------------------------------------------------------------------

OOM = "(WorkerDict pid={pid}) torch.OutOfMemoryError: NPU out of memory. Tried to allocate {gib} GiB"


def test_repeats_are_counted_on_the_first_line() -> None:
    c = Classifier()
    first = c.feed_line(10, OOM.format(pid=1, gib="2.00"))
    assert first is not None
    for i in range(7):  # the other ranks: other pids, other sizes
        assert c.feed_line(11 + i, OOM.format(pid=2 + i, gib=f"{i}.50")) is None
    assert c.feed_line(500, OOM.format(pid=9, gib="1.00") + " [repeated 4x across cluster]") is None
    (f,) = c.findings()
    assert f is first and (f.line, f.count) == (10, 8 + 5)


def test_lines_of_one_incident_fold_and_separate_incidents_do_not() -> None:
    c = Classifier()
    assert c.feed_line(1, "Could not override 'trainer.foo'.") is not None
    assert c.feed_line(3, "Key 'foo' is not in struct") is None  # the same Hydra message
    assert c.feed_line(200, "Key 'bar' is not in struct") is not None  # another error, much later
    assert [(f.line, f.count) for f in c.findings()] == [(1, 1), (200, 1)]


def test_watcher_gets_each_new_finding_once() -> None:
    c = Classifier()
    lines = capture("errors", "segfault-in-ray-actor-then-RayActorError-ray-pr44292.txt").splitlines()
    new = [f.category for i, line in enumerate(lines, 1) if (f := c.feed_line(i, line)) is not None]
    assert new == ["segfault", "ray_task_failed", "ray_actor_died"]  # log order, each once


# ---- the catalogue as data ---------------------------------------------------------------------------


def test_vocabulary() -> None:
    from verlctl.failures import CATEGORIES

    assert len(set(CATEGORY_NAMES)) == len(CATEGORY_NAMES)
    # every failure category that can be read from a log is in the catalogue ('stalled' is the watcher's)
    assert set(CATEGORIES) - {"stalled"} <= set(CATEGORY_NAMES)
    assert [c.name for c in CATALOGUE if c.fallback] == ["python_exception"]
    assert all(c.hint and c.message and c.signatures for c in CATALOGUE)


SIGNATURES = [(c.name, i, s) for c in CATALOGUE for i, s in enumerate(c.signatures)]


@pytest.mark.parametrize(("category", "index", "sig"), SIGNATURES, ids=[f"{c}-{i}" for c, i, _ in SIGNATURES])
def test_signature_examples(category: str, index: int, sig) -> None:  # type: ignore[no-untyped-def]
    assert sig.examples, "each signature carries at least one real example"
    matcher = Matcher()
    for example in sig.examples:
        assert any(a in example for a in sig.anchors), "the pre-filter would skip this example"
        assert sig.regex.search(example), example
        m = matcher.match(example)
        assert m is not None and m.category.name == category, example
        # a full scan in rank order (no pre-filter, no anchors) picks the same category
        assert next(c.name for c in CATALOGUE for s in c.signatures if s.regex.search(example)) == category, example


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
@pytest.mark.parametrize(("category", "index", "sig"), SIGNATURES, ids=[f"{c}-{i}" for c, i, _ in SIGNATURES])
def test_grep_form_matches_the_examples(category: str, index: int, sig) -> None:  # type: ignore[no-untyped-def]
    ere = signature_ere(sig)
    for example in sig.examples:
        proc = subprocess.run(["grep", "-E", "-c", "-e", ere], input=example + "\n", capture_output=True, text=True,
                              env={"LC_ALL": "C"})  # fmt: skip
        assert proc.stdout.strip() == "1", (ere, example, proc.stderr)


@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_grep_form_rejects_what_the_catalogue_rejects() -> None:
    patterns = [
        p for p in ere_patterns() if not p.startswith("(^|")
    ]  # the fallback matches any exception line
    text = "\n".join(NOT_FAILURES) + "\n"
    args = ["grep", "-E", "-c"] + [a for p in patterns for a in ("-e", p)]
    proc = subprocess.run(args, input=text, capture_output=True, text=True, env={"LC_ALL": "C"})
    assert proc.stdout.strip() == "0"


def test_to_ere() -> None:
    assert to_ere(r"(?:a|b)\d+(?P<x>[\w.]+)\s") == "(a|b)[0-9]+([[:alnum:]_.]+)[[:space:]]"
    assert to_ere(r"ip\[[^]]*\] x\.y") == r"ip\[[^]]*\] x\.y"
    assert to_ere(r"[\]\-a]") == "[]a-]"
    for unsupported in (r"a(?=b)", r"a(?!b)", r"a*?", r"\bword", r"(a)\1"):
        with pytest.raises(ValueError):
            to_ere(unsupported)


def test_literal_alternation_is_a_trie() -> None:
    import re

    pattern = literal_alternation(["Error", "EI0006", "EE1002", "Traceback"])
    assert pattern == "(?:E(?:E1002|I0006|rror)|Traceback)"
    rx = re.compile(pattern)
    assert rx.search("x EI0006 y") and rx.search("RuntimeError") and not rx.search("error")
