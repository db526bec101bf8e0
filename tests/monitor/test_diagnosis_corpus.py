"""The root cause is the error: a held-out corpus of real verl failures (tests/fixtures/diagnosis-corpus, built
from the real-verl and ux reviews' quoted lines, each with its source) plus the real captures of
tests/fixtures/errors and tests/fixtures/verl-logs.

For each log, every reader of a log agrees on the root cause: ``classify_lines`` (the catalogue), the streaming
``diagnose`` scanner (``diagnose``, ``report``, ``bundle``, ``status``'s log summary), the live parser fed in
small chunks (the watcher's alert, hence ``status``'s last error) and the ``verlctl diagnose`` command. The root is
the innermost exception (its type and message), above Ray's wrappers and a bare traceback header; its excerpt
is the error's message line; a died actor is named by its class."""

from __future__ import annotations

import pytest

from monitor_helpers import FIXTURES, capture, fixture_names, run_verlctl
from verlctl.monitor.catalogue import Classifier, Finding, classify_lines
from verlctl.monitor.diagnose import diagnose_bytes
from verlctl.monitor.events import LogParser

# (folder, file) -> (root category, the root's excerpt contains, its message contains, the categories after it)
CORPUS: dict[tuple[str, str], tuple[str, str, str, list[str]]] = {
    # RV4-4: FSDP1's ValueError, the log's last line, is carried by two RayTaskError(ValueError) lines
    ("diagnosis-corpus", "realverl-0.9.1-fsdp1-cpu-sync-module-states-valueerror.txt"): (
        "python_exception", "ValueError: The module has CPU parameters or buffers when sync_module_states=True",
        "ValueError: The module has CPU parameters", ["ray_task_failed"]),
    # RV4-2d: the message line, not the source line `raise torch.OutOfMemoryError(` two lines above it
    ("diagnosis-corpus", "realverl-0.9.1-oom-source-line-before-message.txt"): (
        "device_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "CUDA out of memory",
        []),
    # RV4-5: the actor that died is named by its class (Ray's class_name field)
    ("diagnosis-corpus", "realverl-0.9.1-kill9-vllm-http-server-actor-died.txt"): (
        "ray_actor_died", "ActorDiedError: The actor died unexpectedly", "the Ray actor vLLMHttpServer died", []),
    # U23: the exception line that ends a deep traceback, not its header
    ("diagnosis-corpus", "standin-runtimeerror-deep-traceback-not-in-catalogue.txt"): (
        "python_exception", "RuntimeError: verlctl stand-in: injected failure at step 7",
        "RuntimeError: verlctl stand-in: injected failure at step 7", []),
    # flash-attn missing in the image: transformers' ImportError inside RayTaskError(ImportError)
    ("diagnosis-corpus", "transformers-flash-attn-missing-carried-by-raytaskerror.txt"): (
        "python_exception", "ImportError: FlashAttention2 has been toggled on", "flash_attn seems to be not installed",
        ["ray_task_failed"]),
    # real captures: a specific error stays the root, the wrapper after it; a WorkerDict's death names it
    ("errors", "checkpoint-save-failed-PytorchStreamWriter-RayTaskError-verl-issue3346.txt"): (
        "checkpoint_save_failed", "RuntimeError: [enforce fail at inline_container.cc:857]", "", ["ray_task_failed"]),
    ("errors", "ray-ActorDiedError-WorkerDict-vllm-async-sleep-verl-issue4921.txt"): (
        "ray_actor_died", "ray.exceptions.ActorDiedError: The actor died unexpectedly", "WorkerDict", []),
    ("errors", "segfault-in-ray-actor-then-RayActorError-ray-pr44292.txt"): (
        "segfault", "", "", ["ray_actor_died", "ray_task_failed"]),
    ("errors", "cuda-oom-torch2.2-expandable-segments-pytorch-issue16417.txt"): (
        "device_oom", "torch.cuda.OutOfMemoryError: CUDA out of memory", "", []),
}  # fmt: skip

#: the DataLoader teardown after a clean finish is no failure (real verl 0.9.1 logs)
CLEAN = [("verl-logs", n) for n in fixture_names("verl-logs") if n.startswith("realverl-")]


def _streamed(text: str, chunk: int = 7) -> list[Finding]:
    """What the watcher sees: the live parser fed in small slices of the byte stream."""
    classifier = Classifier()
    parser = LogParser(classifier)
    for i in range(0, len(text), chunk):
        list(parser.feed(text[i : i + chunk]))
    list(parser.close())
    return classifier.findings()


def _readers(text: str) -> dict[str, list[Finding]]:
    return {
        "classify_lines": classify_lines(text.splitlines()),
        "diagnose": diagnose_bytes(text.encode()).findings,
        "watcher": _streamed(text),
    }


def test_the_corpus_is_all_there() -> None:
    assert {n for (d, n) in CORPUS if d == "diagnosis-corpus"} == set(fixture_names("diagnosis-corpus"))
    for folder, name in CORPUS:
        head = (FIXTURES / folder / name).read_text().splitlines()[0]
        assert head.startswith("# source: "), (name, head)
    assert CLEAN


@pytest.mark.parametrize(("folder", "name"), list(CORPUS))
def test_every_reader_names_the_error_as_the_root_cause(folder: str, name: str) -> None:
    category, excerpt, message, after = CORPUS[(folder, name)]
    text = capture(folder, name)
    for reader, findings in _readers(text).items():
        assert findings, (reader, name)
        root = findings[0]
        assert root.category == category, (reader, [f.to_dict() for f in findings])
        assert excerpt in root.excerpt, (reader, root)
        assert message in root.message, (reader, root)
        assert not root.excerpt.endswith("Traceback (most recent call last):"), (reader, root)
        assert "raise " not in root.excerpt, (reader, root)
        # the excerpt is on the finding's line
        assert root.excerpt.lstrip("…")[:40] in text.splitlines()[root.line - 1], (reader, root)
        assert [f.category for f in findings[1:]] == after, (reader, [f.to_dict() for f in findings])


@pytest.mark.parametrize(("folder", "name"), CLEAN)
def test_the_teardown_of_a_finished_run_is_no_error(folder: str, name: str) -> None:
    for reader, findings in _readers(capture(folder, name)).items():
        assert findings == [], (reader, findings)


def test_verlctl_diagnose_prints_the_exception_as_the_root_cause(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "fsdp1.log"
    log.write_text(capture("diagnosis-corpus", "realverl-0.9.1-fsdp1-cpu-sync-module-states-valueerror.txt"))
    res = run_verlctl("diagnose", str(log))
    out = " ".join(res.out.split())
    assert "root cause: python_exception" in out and "ValueError: The module has CPU parameters" in out, out
    assert "also found" in out and "ray_task_failed" in out.partition("also found")[2], out


def test_a_wrapper_alone_is_still_the_root_cause() -> None:
    # a RayTaskError whose inner exception is not in the log: the wrapper is all there is
    lines = ["Traceback (most recent call last):", "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()"]
    assert [f.category for f in classify_lines(lines)] == ["ray_task_failed"]


def test_an_unrelated_exception_does_not_outrank_a_wrapper() -> None:
    # a ValueError that a wrapper does not carry (another process, another type) stays below the Ray wrapper
    lines = ["(WorkerDict pid=2) KeyError: 'prompt'",
             *["(TaskRunner pid=1) INFO: working"] * 20,
             "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run()"]
    assert [f.category for f in classify_lines(lines)] == ["ray_task_failed"]


def test_chained_tracebacks_keep_the_first_exception() -> None:
    # "During handling of the above exception, another exception occurred": the first is the cause
    lines = ["(TaskRunner pid=1) Traceback (most recent call last):",
             "(TaskRunner pid=1)   File \"x.py\", line 1, in f",
             "(TaskRunner pid=1) KeyError: 'prompt'",
             "(TaskRunner pid=1) ",
             "(TaskRunner pid=1) During handling of the above exception, another exception occurred:",
             "(TaskRunner pid=1) Traceback (most recent call last):",
             "(TaskRunner pid=1)   File \"x.py\", line 3, in g",
             "(TaskRunner pid=1) RuntimeError: could not load the batch"]
    (root,) = classify_lines(lines)
    assert (root.line, root.excerpt) == (3, lines[2]), root


def test_the_exception_a_wrapper_names_ranks_above_it_from_another_process() -> None:
    # the driver's RayTaskError(ValueError); the ValueError ends the TaskRunner's own traceback
    lines = ["(TaskRunner pid=1) Traceback (most recent call last):",
             "(TaskRunner pid=1)   File \"x.py\", line 1, in f",
             "(TaskRunner pid=1) ValueError: the reward function returned None",
             *["(TaskRunner pid=1) INFO: shutting down"] * 20,
             "ray.exceptions.RayTaskError(ValueError): ray::TaskRunner.run() (pid=1, ip=10.0.0.2)"]
    root, wrapper = classify_lines(lines)
    assert (root.category, root.line, root.excerpt) == ("python_exception", 3, lines[2]), root
    assert wrapper.category == "ray_task_failed", wrapper


def test_an_actor_that_died_in_its_creation_task_is_named_by_the_exception_it_carries() -> None:
    # Ray's ActorDiedError carries the error raised in the actor's __init__ (no type in its own line)
    lines = ["Traceback (most recent call last):",
             "  File \"main_ppo.py\", line 96, in run_ppo",
             "ray.exceptions.ActorDiedError: The actor died because of an error raised in its creation task, "
             "ray::WorkerDict.__init__() (pid=1093, ip=172.17.0.2)",
             "  File \"fsdp_workers.py\", line 120, in __init__",
             "KeyError: 'actor_rollout_ref'"]
    root, wrapper = classify_lines(lines)
    assert (root.category, root.excerpt) == ("python_exception", lines[-1]), root
    assert wrapper.category == "ray_actor_died", wrapper


def test_an_exception_with_its_message_ranks_above_a_traceback_header_whose_exception_is_cut_off() -> None:
    lines = ["(WorkerDict pid=2) Traceback (most recent call last):",  # its exception line never came
             *["(TaskRunner pid=1) INFO: working"] * 20,
             "(TaskRunner pid=1) KeyError: 'prompt'"]
    root, header = classify_lines(lines)
    assert (root.line, root.excerpt) == (22, lines[-1]), root
    assert header.excerpt.endswith("Traceback (most recent call last):"), header
