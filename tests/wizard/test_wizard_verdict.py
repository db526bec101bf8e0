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
    """The real wizard on a pipe input, its final check on ``ops.machine_facts.wizard_facts``."""
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from verlctl.ops.machine_facts import wizard_facts
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
    assert "offload" in resolved.spec.features.enable
