"""Small bugs the tests did not notice, found by a fresh mutation sample (seed 8086, bench/mutate.py;
docs/development/mutation.md): each test is a case a user meets whose answer the one-token change would alter. They go
through the public functions (layout_for, estimate, the CLI), never a private name."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from memory_support import base_layout
from test_memory_mutants import QWEN3_8B, shape
from verlctl.checks.memory import Layout, estimate, layout_for
from verlctl.spec.resolve import load_spec

from conftest import BASE_PATHS, ROOT

HOST = 4096.0  # plenty of host RAM: only the device decides

# ------------------------------------------------------------------------------------ checks/memory.py


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
def test_the_rollout_holds_at_most_verls_max_num_seqs_of_the_version_at_once(version: str) -> None:
    """One vLLM replica (rollout TP 8 on 8 devices) gets all 8 x 512 responses of a batch; vLLM runs at most
    rollout.max_num_seqs of them at once, whose default differs by version (verl's own rollout.yaml, read from
    the installed config tree), so the KV cache the rollout wants is that many full sequences."""
    cfg = ROOT / ".cache" / "verl" / version / "verl" / "trainer" / "config" / "rollout" / "rollout.yaml"
    if not cfg.is_file():
        pytest.skip(f"verl {version}'s config tree is not installed ({cfg})")
    verls = yaml.safe_load(cfg.read_text())["max_num_seqs"]
    spec = load_spec(None, flags={**BASE_PATHS, "verl_version": version, "train.train_batch_size": 512,
                                  "train.responses_per_prompt": 8, "train.rollout_tensor_parallel": 8},
                     environ={}).spec
    lay = layout_for(spec, {"dynamic_batch": True})
    assert lay.max_num_seqs == verls
    est = estimate(lay, shape(QWEN3_8B), 64.0, HOST)
    assert verls < 8 * 512 and est.kv_tokens_wanted == verls * lay.seq


def test_the_vpp_feature_interleaves_the_pipeline_only_for_megatron_with_several_stages() -> None:
    """`features.enable: [vpp]` with vpp_size 3 on Megatron PP 4: the layout has VPP 3, and the first stage
    keeps less of the warm-up activations than without it; with the feature off, or PP 1, VPP is 1."""
    def lay(pp: int, vpp_on: bool) -> Layout:
        spec = load_spec(None, flags={**BASE_PATHS, "strategy": "megatron", "train.pipeline_parallel": pp,
                                      "features.vpp_size": 3}, environ={}).spec
        return layout_for(spec, {"vpp": vpp_on, "dynamic_batch": True})

    assert lay(4, True).vpp == 3
    assert lay(4, False).vpp == 1
    assert lay(1, True).vpp == 1
    s = shape(QWEN3_8B)
    on = estimate(lay(4, True), s, 64.0, HOST).device["update"].parts["activations"]
    off = estimate(lay(4, False), s, 64.0, HOST).device["update"].parts["activations"]
    assert on < off


@pytest.mark.parametrize("strategy", ["megatron", "fsdp"])
def test_the_reference_forward_runs_beside_the_actors_grads_on_megatron_only(strategy: str) -> None:
    """GRPO's reference log-prob pass runs while the actor's states stay on the device: Megatron keeps its
    gradient buffers there, FSDP frees its gradients after the step; both keep the optimizer state."""
    lay = base_layout(device="npu", strategy=strategy, tp=2 if strategy == "megatron" else 1, rollout_tp=2,
                 has_ref=True, prompt=1024, response=1024)
    est = estimate(lay, shape(QWEN3_8B), 64.0, HOST)
    update, ref = est.device["update"].parts, est.device["reference"].parts
    assert update["grads"] > 0
    want = update["optimizer"] + (update["grads"] if strategy == "megatron" else 0.0)
    assert ref["actor grads/optimizer"] == pytest.approx(want)


# ------------------------------------------------------------------------------ inputs/shell_script.py

ENTRY = "python3 -m verl.trainer.main_ppo"


def script_overrides(text: str) -> list[str]:
    from verlctl.inputs.shell_script import parse_script

    return parse_script(text, "t.sh", None).command.overrides


def bash_prints(text: str, expr: str) -> str:
    """What bash itself prints for ``expr`` after the script's lines (the reference)."""
    return subprocess.run(["bash", "-c", text + f"\nprintf '%s' {expr}"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize(
    ("setup", "expr"),
    [
        ("A=(x y z)", "${A[-3]}"),  # a negative index as far back as the array goes is its first element
        ("A=(x y z)", "${A[-1]}"),
        ("N=62", "$((2**N))"),  # 64-bit arithmetic: 2^62 is still positive, 2^63 wraps to the minimum
        ("N=63", "$((2**N))"),
        # a default chain eight deep (verl's scripts nest two or three): the deepest the lexer takes
        ("", "${A:-${B:-${C:-${D:-${E:-${F:-${G:-${H:-deep}}}}}}}}"),
        # arithmetic through ten variables naming each other
        ("a0=1; " + "; ".join(f"a{i}=a{i - 1}" for i in range(1, 11)), "$((a10 + 1))"),
    ],
)
def test_expansions_at_the_edges_read_as_bash_reads_them(setup: str, expr: str) -> None:
    want = bash_prints(setup, expr)
    assert script_overrides(f"{setup}\n{ENTRY} trainer.experiment_name={expr}\n") == [
        f"trainer.experiment_name={want}"]


def test_a_script_of_exactly_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path: Path) -> None:
    """read_script's documented bound (MAX_SCRIPT_BYTES, 256 KiB): the limit itself is allowed, the next byte is
    one clear error naming the limit."""
    from verlctl.inputs.shell_script import MAX_SCRIPT_BYTES, ScriptError, read_script

    assert MAX_SCRIPT_BYTES == 256 * 1024
    head = f"#!/bin/bash\n{ENTRY} trainer.total_epochs=1\n"
    ok = tmp_path / "ok.sh"
    ok.write_text(head + "#" * (MAX_SCRIPT_BYTES - len(head) - 1) + "\n")
    assert ok.stat().st_size == MAX_SCRIPT_BYTES
    assert read_script(ok).startswith(head)
    big = tmp_path / "big.sh"
    big.write_text(head + "#" * (MAX_SCRIPT_BYTES - len(head)) + "\n")
    with pytest.raises(ScriptError, match=rf"{MAX_SCRIPT_BYTES + 1} bytes is too large .*at most {MAX_SCRIPT_BYTES}"):
        read_script(big)


def test_a_script_for_another_interpreter_is_named_with_its_whole_shebang() -> None:
    from verlctl.inputs.shell_script import ScriptError, parse_script

    with pytest.raises(ScriptError) as e:
        parse_script("#!/usr/bin/env python3\nprint(1)\n", "train.py", None)
    assert str(e.value) == "train.py: a python3 script (#!/usr/bin/env python3), not a bash launch script"


def test_line_numbers_count_the_newlines_inside_an_ansi_quote_and_span_a_skipped_function() -> None:
    """A $'...' value over three lines, then a function over four: the note names the function's own lines."""
    from verlctl.inputs.shell_script import parse_script

    text = "X=$'a\nb\nc'\nsetup() {\n  echo one\n  echo two\n}\n" + f"{ENTRY} trainer.total_epochs=1\n"
    p = parse_script(text, "t.sh", None)
    assert any(n.startswith("lines 4-7: function not evaluated") for n in p.notes), p.notes


def test_an_array_of_sixty_thousand_words_is_below_the_word_limit() -> None:
    """MAX_TOKENS (100,000) bounds the words of a script; an array's elements count one each."""
    words = " ".join(f"w{i}" for i in range(60_000))
    assert script_overrides(f"A=({words})\n{ENTRY} trainer.experiment_name=${{A[59999]}}\n") == [
        "trainer.experiment_name=w59999"]


# -------------------------------------------------------------------------------------- ops/runstate.py

NOW = 2_000_000_000.0


def run_record(attempts: int = 1, **over: object):  # type: ignore[no-untyped-def]
    from verlctl.runtime.records import RunRecord

    return RunRecord(run_id="r1", created_at=0, runtime="docker", workdir="/verl", scripts_dir="/verl/x",
                     run_log="/verl/logs/x.log", train_log="", checkpoints="", experiment="e", verl_version="0.7.0",
                     pgid=5 if attempts else None,
                     attempts=[{"number": i + 1, "pgid": 5, "started_at": 0} for i in range(attempts)], **over)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [(0, "0s ago"), (119, "119s ago"), (120, "2 min ago"), (7199, "120 min ago"), (7200, "2 h ago"),
     (172_799, "48 h ago"), (172_800, "2 days ago"), (-30, "0s ago")],  # a clock step back is "0s", not negative
)
def test_a_stopped_run_says_how_long_ago_in_the_unit_a_person_reads(seconds: int, words: str) -> None:
    from verlctl.ops.runstate import decide

    st = decide(run_record(), [{"event": "started", "attempt": 1},
                               {"event": "stopped", "time": NOW - seconds, "signalled": True}], now=NOW)
    assert (st.state, st.why) == ("stopped", f"stopped with `verlctl stop` {words}")


def test_a_run_stopped_before_its_first_attempt_says_so() -> None:
    from verlctl.ops.runstate import decide

    st = decide(run_record(attempts=0, stopped=True), [{"event": "launch", "time": NOW - 5}], now=NOW)
    assert (st.state, st.why) == ("never started", "stopped before any attempt started")
    st = decide(run_record(attempts=0), [{"event": "launch", "time": NOW - 5}], now=NOW)
    assert st.state == "never started" and "(launched 5s ago)" in st.why


@pytest.mark.parametrize("length", [159, 160, 161, 400])
def test_a_failure_reason_is_its_first_line_cut_to_160_characters(length: int) -> None:
    from verlctl.ops.runstate import decide

    reason = "x" * length
    st = decide(run_record(), [{"event": "started", "attempt": 1}, {"event": "gave_up", "reason": reason + "\nmore"}],
                now=NOW)
    assert st.state == "failed"
    assert st.why == (reason if length <= 160 else "x" * 159 + "…")
    assert len(st.why) == min(length, 160)


@pytest.mark.parametrize(
    ("kind", "field", "text", "why"),
    [("gave_up", "reason", "gave up: no progress for 30 min", "the watcher gave up: no progress for 30 min"),
     ("gave_up", "reason", "no progress for 30 min", "no progress for 30 min"),
     ("launch_failed", "error", "gave up: pulling the image", "gave up: pulling the image")],
)
def test_only_the_watchers_own_gave_up_words_are_reworded(kind: str, field: str, text: str, why: str) -> None:
    from verlctl.ops.runstate import decide

    st = decide(run_record(), [{"event": "started", "attempt": 1}, {"event": kind, field: text}], now=NOW)
    assert (st.state, st.why) == ("failed", why)


def test_a_log_that_says_training_finished_reads_as_finished_with_the_attempt_count() -> None:
    from verlctl.ops.runstate import decide

    log = "[verlctl 10:00:00] starting\nstep:5 - actor/loss:0.1\n[verlctl 10:05:00] training finished\n"
    st = decide(run_record(attempts=2), [{"event": "started", "attempt": 2}], log_text=log, now=NOW)
    assert (st.state, st.why, st.decided_by) == ("finished", "2 attempts", "log")


def test_a_stop_event_of_an_older_record_without_signalled_counts_as_a_stop_that_signalled() -> None:
    """Records written before `stopped` events said whether anything was signalled: such a stop is the verdict,
    even when the log's last words say the script exited (the stop's SIGTERM made it exit)."""
    from verlctl.ops.runstate import decide

    log = "[verlctl 10:00:00] start_verl.sh exits with status 143\n"
    events = [{"event": "started", "attempt": 1}, {"event": "stopped", "time": NOW - 60}]
    st = decide(run_record(), events, log_text=log, now=NOW)
    assert (st.state, st.why) == ("stopped", "stopped with `verlctl stop` 60s ago")
    # and one that says it signalled nothing keeps the log's verdict (N9)
    events[-1]["signalled"] = False
    st = decide(run_record(), events, log_text=log, now=NOW)
    assert (st.state, st.why) == ("failed", "start_verl.sh exited with status 143")


@pytest.mark.parametrize(("category", "words"), [("device_oom", None), ("disk_quota_gone", "disk quota gone"),
                                                 ("", "a failure")])
def test_a_restart_for_a_failure_without_words_names_its_category_or_a_failure(category: str,
                                                                             words: str | None) -> None:
    from verlctl.ops.runstate import CATEGORY_WORDS, recoveries

    events = [{"event": "started", "attempt": 1}, {"event": "recovery", "category": category},
              {"event": "started", "attempt": 2}]
    want = CATEGORY_WORDS["device_oom"] if words is None else words
    assert recoveries(events) == [f"attempt 2 restarted after {want}"]


def test_the_charts_mark_a_restart_at_the_checkpoint_it_resumed_from_else_at_the_failures_step() -> None:
    from verlctl.ops.runstate import CATEGORY_WORDS, restart_markers

    oom = CATEGORY_WORDS["device_oom"]
    events = [{"event": "started", "attempt": 1}, {"event": "alert", "category": "device_oom", "step": 7},
              {"event": "recovery", "category": "device_oom", "add_feature": "offload",
               "resumed_from": "/data/ckpt/run1/global_step_5/"},
              {"event": "started", "attempt": 2}, {"event": "alert", "category": "device_oom", "step": 9},
              {"event": "recovery", "category": "device_oom"},
              {"event": "started", "attempt": 3}, {"event": "recovery", "category": "device_oom"}]  # no step known
    assert restart_markers(events) == [(5, f"attempt 2: offload added after {oom}"),
                                       (9, f"attempt 3: restarted after {oom}"),
                                       (0, f"attempt 4: restarted after {oom}")]


# ------------------------------------------------------------------------------- checks/verdict_rules.py


def test_a_capped_generation_names_where_its_limit_comes_from(tmp_path: Path) -> None:
    """verl 0.9.1, max_model_len unset: the cap is the model's max_position_embeddings (said so); set
    explicitly: the cap is that value, and the message does not blame the model."""
    from test_finding_codes import CTX, verdict_rule, with_model

    flags = {"train.max_prompt_length": 1024, "train.max_response_length": 4096}
    unset = verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **flags)(tmp_path / "a")
    [f] = [f for f in unset if f.code == "generation_capped"]
    assert "above the rollout's max_model_len 4096 (shaped's max_position_embeddings, which verl uses when it is " \
           "unset): vLLM clamps every response to 4096 - prompt tokens (at most 3072" in f.message, f.message
    explicit = verdict_rule("max_model_len", with_model, CTX, verl_version="0.9.1", **flags, extra_overrides=[
        "actor_rollout_ref.rollout.max_model_len=3000"])(tmp_path / "b")
    [f] = [f for f in explicit if f.code == "generation_capped"]
    assert "above the rollout's max_model_len 3000: vLLM clamps every response to 3000 - prompt tokens " \
           "(at most 1976" in f.message, f.message
    assert "max_position_embeddings" not in f.message


@pytest.mark.parametrize(("devices", "words"), [
    ([4095], "device node /dev/davinci4095 does not exist on this host (cluster.devices = [4095])"),
    ([4094, 4095], "device nodes /dev/davinci4094, /dev/davinci4095 do not exist on this host "
                   "(cluster.devices = [4094, 4095])"),
])
def test_missing_device_nodes_are_named_in_one_grammatical_line(tmp_path: Path, devices: list[int],
                                                                  words: str) -> None:
    from test_finding_codes import nodes_probe, verdict_rule

    got = verdict_rule("device_nodes", nodes_probe, **{"cluster.devices": devices, "device": "npu",
                                                       "container.runtime": "docker"})(tmp_path)
    [f] = [f for f in got if f.code == "device_nodes_missing"]
    assert f.message.startswith(words), f.message


def test_a_host_whose_devices_are_not_known_is_not_called_a_gpu_host(tmp_path: Path) -> None:
    """Neither npu-smi nor nvidia-smi answered (MachineState without device info): the device kind is not
    judged; a GPU host with no NPU is (U19)."""
    from test_finding_codes import H100, machine_of, verdict_rule
    from verlctl.checks.facts import CheckFacts
    from verlctl.detect.machine import MachineState

    unknown = verdict_rule("device_kind", lambda t, r: CheckFacts(machine=MachineState()), device="npu")(tmp_path / "a")
    assert [f.code for f in unknown] == []
    gpu_host = verdict_rule("device_kind", machine_of(H100), device="npu")(tmp_path / "b")
    assert [f.code for f in gpu_host] == ["device_not_here"]
    assert "this host has 8 NVIDIA GPU(s) and no Ascend NPU" in gpu_host[0].message


@pytest.mark.parametrize("pull", [False, True])
def test_launch_pull_turns_only_the_missing_image_into_a_note(tmp_path: Path, pull: bool) -> None:
    """`launch --pull` (DockerFacts.pull): the absent image is a note that launch pulls it, not an error; a
    reused container that is not this user's stays an error either way."""
    from test_finding_codes import verdict_rule
    from verlctl.checks.facts import CheckFacts
    from verlctl.detect.check_probes import DockerFacts
    from verlctl.detect.machine import MachineState

    def facts(t: Path, r) -> CheckFacts:  # type: ignore[no-untyped-def]
        return CheckFacts(machine=MachineState(), docker=DockerFacts(
            image=r.spec.container.image, container=r.spec.container.name, engine_version="27.5.1",
            image_present=False, exists=False, pull=pull))

    got = verdict_rule("docker", facts, **{"container.image": "example/verl:1", "container.runtime": "docker"})(tmp_path)
    image = [(f.code, f.severity.value) for f in got if f.field == "container.image"]
    if pull:
        assert image == [("image_pull", "info")], got
        [f] = [f for f in got if f.code == "image_pull"]
        assert f.message == "image example/verl:1 is not present locally: launch pulls it (--pull)"
    else:
        assert image == [("image_missing", "error")], got


# ------------------------------------------------------------------------------------- render/render.py


def test_every_rendered_file_is_a_text_file_that_ends_in_one_newline() -> None:
    """`cat start_verl.sh run_training.sh`, `>>` appends and diff tools read whole lines: each rendered file ends
    in exactly one newline (the templates' own last line), none in a blank line."""
    from scripts_harness import render_from

    rendered = render_from(dict(BASE_PATHS))
    for name, text in rendered.files.items():
        assert text.endswith("\n") and not text.endswith("\n\n"), (name, text[-80:])


@pytest.mark.parametrize(("nodes", "host"), [({}, "127.0.0.1"),
                                             ({"cluster.nodes": ["10.0.0.1", "10.0.0.2"],
                                               "cluster.socket_ifname": "eth0"}, "0.0.0.0")])
def test_the_ray_dashboard_listens_on_loopback_unless_other_nodes_need_it(nodes: dict[str, object],
                                                                           host: str) -> None:
    """One node: the dashboard (it can submit jobs: code execution) is bound to 127.0.0.1, never to the
    network; several nodes: the head's dashboard is reachable from the workers."""
    from verlctl.render.render import START_SCRIPT

    from scripts_harness import render_from

    script = render_from({**BASE_PATHS, **nodes}).files[START_SCRIPT]
    assert f"--dashboard-host={host} " in script
    assert script.count("--dashboard-host=") == 1


def test_the_first_advice_for_an_update_over_budget_is_plain_recompute_when_that_fits() -> None:
    """Qwen3-8B, Megatron TP 2, 1k + 6k tokens on 56 GiB NPUs: only the update phase is over; recomputing the
    first layers of each stage (the plain `recompute` feature) is the first step of the ladder, and it fits."""
    from test_memory_mutants import MEGATRON_8B, advice, fits

    s = shape(QWEN3_8B)
    lay = base_layout(device="npu", strategy="megatron", tp=2, rollout_tp=2, prompt=1024, response=6144,
                 memory_utilization=0.3)
    assert replace(MEGATRON_8B, response=6144, memory_utilization=0.3) == lay
    assert advice(lay, s, 56.0, 2048.0) == (["update"], ["enable the `recompute` feature (activation recomputation)"])
    assert fits(replace(lay, recompute=True), s, 56.0, 2048.0)


def test_a_kv_cache_too_small_can_be_told_rollout_tp_4() -> None:
    """One-step-off, 8 rollout devices of 48 GiB at utilization 0.3 (14.4 GiB): Qwen2.5-Coder-14B's weights
    leave no KV cache at rollout TP 1 or 2; TP 4 is the smallest that does."""
    from test_memory_fit import CONFIGS
    from test_memory_mutants import advice, fits

    lay = base_layout(device="npu", strategy="megatron", tp=4, colocated=False, devices_per_node=16,
                 train_devices_per_node=8, rollout_devices_per_node=8, rollout_tp=1, memory_utilization=0.3,
                 prompt=1024, response=3072, recompute=True, recompute_uniform=True)
    s = shape(CONFIGS["Qwen2.5-Coder-14B-Instruct"])
    assert advice(lay, s, 48.0, 4096.0) == (["kv"], ["raise train.rollout_tensor_parallel from 1 to 4"])
    assert not fits(replace(lay, rollout_tp=2), s, 48.0, 4096.0)
    assert fits(replace(lay, rollout_tp=4), s, 48.0, 4096.0)


@pytest.mark.parametrize(("watcher", "phase", "state"), [(False, "training", "unknown"), (True, "training", "running"),
                                                         (True, "starting", "running"), (True, "finished", "unknown")])
def test_a_live_watcher_vouches_for_a_starting_or_training_run_only(watcher: bool, phase: str, state: str) -> None:
    from verlctl.ops.runstate import decide

    live = {"phase": phase, "attempt": 1, "step": 3, "total": 10}
    kw = {"watcher": True} if watcher else {}  # the default: no watcher known to be alive
    st = decide(run_record(), [{"event": "started", "attempt": 1}], live, **kw, now=NOW)
    assert st.state == state, st
    if state == "running":
        assert st.why.endswith("(from its watcher)") and st.decided_by == "events"


def test_a_restart_before_any_recorded_start_is_attempt_2() -> None:
    """An events file that begins mid-run (the start event lost): the first restart starts attempt 2."""
    from verlctl.ops.runstate import CATEGORY_WORDS, recoveries

    assert recoveries([{"event": "recovery", "category": "device_oom"}]) == [
        f"attempt 2 restarted after {CATEGORY_WORDS['device_oom']}"]


def test_reading_the_host_log_leaves_no_descriptor_open(tmp_path: Path) -> None:
    """`status` and the watcher read the host log again and again: every read closes what it opened."""
    import os

    from verlctl.ops.runstate import read_host_log

    log = tmp_path / "run.log"
    log.write_text("[verlctl 10:00:00] training finished\n")
    rec = run_record().model_copy(update={"runtime": "host", "run_log": str(log)})
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        assert read_host_log(rec) == "[verlctl 10:00:00] training finished\n"
    assert len(os.listdir("/proc/self/fd")) == before
