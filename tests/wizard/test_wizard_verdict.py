"""The wizard's final check is the one verdict (issue 21, item 3): with the facts ``check`` collects on this
host (the machine the wizard detected: a real npu-smi capture; the real files), and it offers the fix where
one exists before it reopens the rounds."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from wizard_support import ENTER, RUN, make_world

from launch_support import write_parquet


def drive_final(keys: str, machine: Any) -> tuple[Any, str, list[str]]:
    """The real wizard on a pipe input, its final check on ``orchestrator.machine_facts.wizard_facts``."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from verlctl.orchestrator.machine_facts import wizard_facts
    from verlctl.wizard.flow import run_wizard
    from verlctl.wizard.prompter import Prompter

    buf = io.StringIO()
    console = Console(file=buf, width=220, color_system=None)
    with create_pipe_input() as inp:
        inp.send_text(keys)
        inp.close()
        prompter = Prompter(input=inp, output=DummyOutput())
        resolved = run_wizard(None, {}, {}, False, console, machine=machine, prompter=prompter, environ={},
                              facts_for=wizard_facts)
    return resolved, buf.getvalue(), [str(q) for q in prompter.asked]


def test_a_dataset_smaller_than_a_batch_is_caught_and_the_batch_it_can_fill_offered(tmp_path: Path) -> None:
    """U2: the detected training file has 8 rows and the default batch is 32; accepting every pre-fill, the
    final check refuses it (as check does) and offers batch 8, which the verdict then accepts."""
    w = make_world(tmp_path)
    write_parquet(w.train, rows=8)
    resolved, text, asked = drive_final(RUN + ENTER * 20 + ENTER, w.machine)
    assert "error dataset_smaller_than_batch" in text
    assert any("Fix it: use train_batch_size 8" in q for q in asked), asked[-3:]
    assert resolved.spec.train.train_batch_size == 8


def test_enough_rows_offer_nothing(tmp_path: Path) -> None:
    w = make_world(tmp_path)
    resolved, _text, asked = drive_final(RUN + ENTER * 20, w.machine)
    assert not any("Fix it" in q for q in asked) and resolved.spec.train.train_batch_size == 32


def test_defaults_that_do_not_fit_the_detected_hbm_are_caught_and_the_mask_that_fits_offered(tmp_path: Path) -> None:
    """U1: Qwen3-8B's config.json on 8 x 910B4 (32 GiB, the real npu-smi capture the wizard detected): the
    defaults need more per device than that (check's memory_device_fit); the wizard offers the mask with the
    OOM ladder's offload, which the same estimate then fits."""
    import json

    from test_finding_codes import QWEN3_8B
    from verlctl.detect.models import inspect_model
    from verlctl.detect.scan import ScanResult

    w = make_world(tmp_path)
    (w.model / "config.json").write_text(json.dumps(QWEN3_8B))
    scan = w.machine.scan
    assert isinstance(scan, ScanResult)
    scan.models = [inspect_model(str(w.model))]
    resolved, text, asked = drive_final(RUN + ENTER * 20 + ENTER, w.machine)
    assert "error memory_device_fit" in text, text[-2000:]
    fix = next(q for q in asked if q.startswith("Fix it: use feature mask"))
    assert "adds offload" in fix
    # U25: saved as the mask (the seeds' form), labelled as the wizard's fix, not as the person's answer
    assert resolved.spec.features.mask == "1110000" and resolved.spec.features.enable == []
    assert str(resolved.origin("features.mask")) == "typed (the wizard's memory fix: adds offload)"


def qwen3_8b_world(tmp_path: Path, ram_gib: float | None) -> Any:
    import json

    from test_finding_codes import QWEN3_8B
    from verlctl.detect.machine import SystemInfo
    from verlctl.detect.models import inspect_model

    w = make_world(tmp_path)
    (w.model / "config.json").write_text(json.dumps(QWEN3_8B))
    w.machine.scan.models = [inspect_model(str(w.model))]
    if ram_gib is not None:
        w.machine.system = SystemInfo(cpu_count=16, memory_total_bytes=int(ram_gib * 2**30))
    return w


def test_the_memory_fix_checks_host_ram_and_is_saved_as_the_wizards_mask(tmp_path: Path) -> None:
    """U25: on a host with RAM for offload, the fix says it fits the host's RAM too; the saved file keeps the
    mask and names the wizard's fix in its header."""
    from verlctl.wizard.save import spec_yaml

    w = qwen3_8b_world(tmp_path, 2048)
    resolved, _text, asked = drive_final(RUN + ENTER * 20 + ENTER, w.machine)
    fix = next(q for q in asked if q.startswith("Fix it: use feature mask 1110000 (adds offload)"))
    assert fix.endswith("fits the device memory detected and this host's RAM?")
    text, _notes = spec_yaml(resolved, tmp_path / "run.yaml")
    assert "# set by the wizard's memory fix: adds offload: features.mask" in text
    assert "mask: '1110000'" in text


def test_no_offload_fix_where_host_ram_is_short(tmp_path: Path) -> None:
    """U25: a 22 GiB host (the defaults already need ~59 GiB of it; offload would need ~196 GiB): check says
    "never add offload here", so the wizard does not offer it."""
    w = qwen3_8b_world(tmp_path, 22)
    resolved, text, asked = drive_final(RUN + ENTER * 20 + ENTER + ENTER * 30, w.machine)
    assert "error memory_device_fit" in text
    assert not any("adds offload" in q for q in asked), [q for q in asked if "Fix" in q]
    assert "offload" not in resolved.spec.features.enable and (resolved.spec.features.mask or "0000000")[2] == "0"


def test_the_mask_fix_keeps_what_the_mask_cannot_say(tmp_path: Path) -> None:
    """U25: the fix saves a mask; of the spec's lists it keeps what a mask cannot say (a feature without a bit,
    a default-off feature turned off explicitly), and drops what the mask now says (a bit feature turned on)."""
    import yaml

    from verlctl.orchestrator.machine_facts import wizard_facts
    from verlctl.wizard.answers import Answers
    from verlctl.wizard.fixes import memory_fix

    w = qwen3_8b_world(tmp_path, 2048)
    spec = tmp_path / "run.yaml"
    spec.write_text(yaml.safe_dump({
        "paths": {"model": str(w.model), "train_files": [str(w.train)], "val_files": [str(w.val)]},
        "features": {"enable": ["remove_padding", "prefix_cache", "chunked_prefill"],
                     "disable": ["swap_optimizer", "vpp"]},
    }))
    answers = Answers(config=spec, environ={})
    facts = wizard_facts(answers.resolve_for_checks(), w.machine)
    errors = [f for f in answers.findings(answers.resolve_for_checks(), facts) if f.severity.value == "error"]
    fix = memory_fix(answers, errors, facts)
    assert fix is not None and fix.values["features.mask"] == "1111000", fix  # prefix_cache's bit says it
    assert fix.values["features.enable"] == ["chunked_prefill"]            # no bit: the mask cannot say it
    assert fix.values["features.disable"] == ["swap_optimizer", "vpp"]     # default off: a 0 bit leaves verl's
    assert fix.label == "the wizard's memory fix: adds offload"
