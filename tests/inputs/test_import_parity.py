"""Official-script parity of ``verlctl import`` (the measure of bench/bench_import_parity.py), per script.

Every in-scope fixture (verl's own NPU launch scripts of v0.7.0 and v0.9.0) is imported; the script's
override list and verlctl's command for the imported spec are composed against the same real verl config
tree, and compared on every key the script sets. The result must be the one recorded in
``tests/fixtures/official-scripts/parity.yaml``: equivalent, differing on exactly the recorded keys (each
with its reviewed reason), or failing to import with the recorded reason. A regression in the parser, the
mapping, verlctl's command or the reconciliation changes a result and fails here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

import verlcompose
from conftest import ROOT

_spec = importlib.util.spec_from_file_location("bench_import_parity", ROOT / "bench" / "bench_import_parity.py")
assert _spec is not None and _spec.loader is not None
parity = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("bench_import_parity", parity)  # dataclasses look their module up there
_spec.loader.exec_module(parity)

EXPECTED = parity.load_expectations()
SCOPE = EXPECTED["in_scope"]


def _need(version: str) -> None:
    if not verlcompose.available(version):
        if os.environ.get("CI"):
            pytest.fail(f"verl {version} config tree missing under {verlcompose.CACHE} (.ci/run installs it)")
        pytest.skip(f"verl {version} not installed under {verlcompose.CACHE}")


def test_every_fixture_has_a_recorded_result() -> None:
    on_disk = set(parity.fixtures())
    assert on_disk == set(SCOPE), (sorted(on_disk - set(SCOPE)), sorted(set(SCOPE) - on_disk))
    for rel in on_disk:
        first = (parity.FIXTURES / rel).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: github.com/") and " path " in first, rel
    assert not set(SCOPE) & set(EXPECTED["out_of_scope"])
    for rel, why in (EXPECTED.get("helpers") or {}).items():  # kept only as what an in-scope script runs
        first = (parity.FIXTURES / rel).read_text(encoding="utf-8").splitlines()[0]
        assert first.startswith("# source: github.com/") and " path " in first, rel
        assert why and rel not in SCOPE and rel not in EXPECTED["out_of_scope"]
    for rel, why in EXPECTED["out_of_scope"].items():
        assert why and rel.split("/", 1)[0] in parity.TREE


@pytest.mark.parametrize("rel", sorted(SCOPE))
def test_official_script_parity(rel: str) -> None:
    _need(parity.TREE[rel.split("/", 1)[0]])
    expected = SCOPE[rel] or {}
    out = parity.run_one(rel)
    if "cannot_import" in expected:
        text, why = expected["cannot_import"]
        assert out.status == "cannot_import", (out.status, out.differing)
        assert text in out.reason, out.reason
        assert why
        return
    assert out.status != "cannot_import", out.reason
    assert out.compared >= 20, f"only {out.compared} keys compared"
    # Every key verlctl adds composes to what verl uses for the script anyway, or is a setting verlctl makes on
    # purpose and shows in the plan (verl/presets.py DECLARED, with its code); issue 23, goal 0.
    assert not out.unmarked, out.unmarked
    recorded = expected.get("differs") or {}
    assert set(out.differing) == set(recorded), {k: out.differing.get(k) for k in set(out.differing) ^ set(recorded)}
    for why in recorded.values():  # a reviewed reason cites the verl (or Hydra) file it rests on
        assert len(why) > 40 and any(ext in why for ext in (".py:", ".yaml:", ".g4:")), why


def test_what_verlctl_adds_on_purpose_is_shown_in_the_plan_with_its_code(tmp_path: Path) -> None:
    """The declared adds the parity measure does not count as unmarked are the ones `plan` prints."""
    _need("0.7.0")
    from verlctl.importer import import_script, spec_text

    from conftest import clean_env, run_cli

    rel = "0.7.0/examples/grpo_trainer/run_qwen2_5_7b_grpo_npu.sh"
    result = import_script(parity.FIXTURES / rel, "0.7.0", dict(parity.ENVIRON))
    codes = {code for code, _text, _why in result.declared}
    assert codes == {"npu_no_torch_compile", "checkpoints_on_host"}, result.declared
    assert any(n.startswith("verlctl sets actor_rollout_ref.actor.use_torch_compile=False because torch.compile")
               and n.endswith("[npu_no_torch_compile]") for n in result.notes), result.notes
    spec = tmp_path / "run.yaml"
    spec.write_text(spec_text(result, rel), encoding="utf-8")
    res = run_cli("plan", "-c", str(spec), "--set", "paths.model=/m/Qwen2.5-7B-Instruct", env=clean_env(COLUMNS="200"),
                  timeout=120)
    shown = res.out
    assert "verlctl sets on purpose (verl's default differs): actor_rollout_ref.actor.use_torch_compile=False " \
           "[npu_no_torch_compile]" in " ".join(shown.split()), shown
    assert "[checkpoints_on_host]" in shown
