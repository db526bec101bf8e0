"""Rule parity: every spec rule that mirrors a verl assert cites it (file:line per version), and the cited line
of the verl source under .cache/verl/<version> still holds that text; the registry enumerates every code."""

from __future__ import annotations

import os

import pytest

from verlctl.checks.rules import RULES, Cite, all_codes
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import BASE_PATHS

VERSIONS = ("0.7.0", "0.9.1")


def _need(version: str) -> None:
    if not verlcompose.available(version):
        if os.environ.get("CI"):
            pytest.fail(f"verl {version} missing under {verlcompose.CACHE}")
        pytest.skip(f"verl {version} not under {verlcompose.CACHE}")


def cite_holds(cite: Cite) -> str | None:
    """None when the cited line holds the text, else why not."""
    lines = verlcompose.source_lines(cite.version, cite.path)
    if lines is None:
        return f"{cite}: no such file"
    if not 1 <= cite.line <= len(lines):
        return f"{cite}: the file has {len(lines)} lines"
    if cite.text not in lines[cite.line - 1]:
        return f"{cite}: line is {lines[cite.line - 1].strip()!r}, not {cite.text!r}"
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_every_cited_verl_line_still_holds_the_rule(version: str) -> None:
    _need(version)
    cites = [c for r in RULES for c in r.cites if c.version == version]
    assert len(cites) >= 8
    bad = [why for c in cites if (why := cite_holds(c))]
    assert not bad, "\n".join(bad)


def test_a_wrong_citation_is_caught() -> None:
    _need("0.9.1")
    good = next(c for r in RULES for c in r.cites if r.name == "mini_batch_dp")
    assert cite_holds(good) is None
    assert cite_holds(Cite(good.version, good.path, good.line + 1, good.text)) is not None
    assert cite_holds(Cite(good.version, "verl/nope.py", 1, "x")) is not None


def test_rules_mirroring_verl_cite_every_version_they_apply_to() -> None:
    for rule in RULES:
        if not rule.cites:
            continue
        for version in sorted(rule.versions or VERSIONS):
            assert any(c.version == version for c in rule.cites), f"{rule.name} has no citation for verl {version}"


def test_the_registry_names_each_code_once_and_check_spec_emits_only_those() -> None:
    seen: dict[str, str] = {}
    for rule in RULES:
        assert rule.codes, rule.name
        for code in rule.codes:
            assert code not in seen, f"{code} in {seen[code]} and {rule.name}"
            seen[code] = rule.name
    assert set(seen) == all_codes()
    # Findings of a plan that come from the spec rules carry registered codes.
    flags = {**BASE_PATHS, "train.save_freq": 99, "train.steps": 4, "train.rollout_tensor_parallel": 3}
    plan = make_plan(load_spec(None, flags=flags, environ={}))
    from_rules = {f.code for f in plan.findings} & all_codes()
    assert {"checkpoints_after_last_step", "rollout_divisibility"} <= from_rules
