"""The generated guides under docs/ match the code, and the CLI's own face: --version, flag help."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from verlctl import DEFAULT_VERL_VERSION, SUPPORTED_VERL_VERSIONS, __version__, guides

from conftest import ROOT

DOCS = ROOT / "docs"


@pytest.mark.parametrize("name", sorted(guides.GUIDES))
def test_committed_guide_is_fresh(name: str) -> None:
    committed = (DOCS / name).read_text(encoding="utf-8")
    assert committed == guides.GUIDES[name](), (
        f"docs/{name} is stale: regenerate with `python -m verlctl.guides docs` and commit it"
    )


def test_check_mode_names_a_stale_guide_and_writes_nothing(tmp_path: Path) -> None:
    guides.write(tmp_path)
    assert guides.main(["--check", str(tmp_path)]) == 0
    (tmp_path / "features.md").write_text("old\n", encoding="utf-8")
    assert guides.stale(tmp_path) == ["features.md"]
    assert guides.main(["--check", str(tmp_path)]) == 1
    assert (tmp_path / "features.md").read_text(encoding="utf-8") == "old\n"


def test_features_guide_covers_every_feature_and_key() -> None:
    from verlctl.verl.features import FEATURES

    text = guides.features_md()
    for f in FEATURES:
        assert f"## {f.title} (`{f.name}`)" in text
        for emit in f.emits:
            for ov in emit.overrides:
                assert f"`{ov.prefix}{ov.key}`" in text, ov.key
    # the mask table lists bits in order 0..6, then the name-only features
    bits = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "`" in line][:7]
    assert bits == [str(i) for i in range(7)]


def test_troubleshooting_guide_follows_the_catalogue_order() -> None:
    from verlctl.monitor.catalogue import CATALOGUE

    text = guides.troubleshooting_md()
    positions = [text.index(f"\n## {c.name.replace('_', '-')}\n") for c in CATALOGUE]
    assert positions == sorted(positions), "sections must keep the root-cause order"
    for c in CATALOGUE:
        assert c.hint.replace("|", "\\|").split("\n")[0][:40] in text


def test_operations_guide_lists_every_command_and_option() -> None:
    import typer

    from verlctl.cli import app

    group = typer.main.get_command(app)
    text = guides.operations_md()
    ctx = group.make_context("verlctl", [], resilient_parsing=True)
    names = group.list_commands(ctx)  # type: ignore[attr-defined]
    assert {"plan", "launch", "stop", "diagnose"} <= set(names)
    for name in names:
        cmd = group.get_command(ctx, name)  # type: ignore[attr-defined]
        assert f"\n## verlctl {name}\n" in text
        for p in cmd.params:
            if p.param_type_name == "option" and not getattr(p, "hidden", False):
                assert f"`{', '.join([*p.opts, *p.secondary_opts])}`" in text, (name, p.opts)


def test_spec_reference_lists_every_field_with_its_default() -> None:
    """Every key of the run spec, nested sections included, has its row, and a default the model gives is in it."""
    from pydantic import BaseModel

    from verlctl.spec.model import DEFAULT_IMAGE, RunSpec

    text = guides.spec_reference_md()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}

    def walk(prefix: str, model: type[BaseModel]) -> int:
        count = 0
        for name, field in model.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                assert f"\n## {prefix}{name}\n" in text, name
                count += walk(f"{prefix}{name}.", ann)
            else:
                assert f"`{prefix}{name}`" in rows, f"{prefix}{name}"
                count += 1
        return count

    assert walk("", RunSpec) == len(rows) > 80
    assert f"`{DEFAULT_IMAGE}`" in rows["`container.image`"]
    assert "| `6766` |" in rows["`cluster.ray_port`"] and "≤ 65535" in rows["`cluster.ray_port`"]
    assert "`megatron` \\| `fsdp` \\| `fsdp2`" in rows["`strategy`"]


def test_cell_escapes_table_breakers() -> None:
    assert guides._cell("a|b\nc") == "a\\|b c"


def test_version_names_verlctl_python_and_verl() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "verlctl", "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"verlctl {__version__}"
    assert lines[1].startswith(f"Python {sys.version_info.major}.{sys.version_info.minor}.")
    assert f"verl targeted: {DEFAULT_VERL_VERSION}" in lines[2]
    for v in SUPPORTED_VERL_VERSIONS:
        assert v in lines[2]


def test_supported_versions_match_the_spec_model() -> None:
    from verlctl.spec.model import RunSpec, VerlVersion

    assert set(typing.get_args(VerlVersion)) == {*SUPPORTED_VERL_VERSIONS, "auto"}
    assert RunSpec.model_fields["verl_version"].default == DEFAULT_VERL_VERSION


def test_help_has_no_type_noise_beside_flags() -> None:
    """typer 0.29 prints `<bool>` beside every flag; pyproject pins the tested range."""
    for args in (["--help"], ["plan", "--help"], ["launch", "--help"]):
        out = subprocess.run(
            [sys.executable, "-m", "verlctl", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"COLUMNS": "120", "PATH": "/usr/bin:/bin", "TERM": "dumb"},
        )
        assert out.returncode == 0, out.stderr
        assert "<bool>" not in out.stdout, args
