"""Compose verlctl's override lists against the real verl config of a version (test helper).

The verl wheels are installed with ``pip install --no-deps --target .cache/verl/<version> verl==<version>``
(by ``.ci/run``); verl itself is never imported (its ``__init__`` needs torch): Hydra's compose API reads
the YAML config tree directly (``reference/verl.md`` §8). Recipe configs that the 0.7.0 wheel lacks come
from ``tests/verl_overlay`` (see its README).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("VERLCTL_VERL_CACHE", ROOT / ".cache" / "verl"))
OVERLAY = ROOT / "tests" / "verl_overlay"


def verl_root(version: str) -> Path:
    return CACHE / version


FIXTURE_SOURCES = ROOT / "tests" / "fixtures" / "verl-source"


def source_lines(version: str, path: str) -> list[str] | None:
    """A verl source file's lines as in ``version``: ``verl/...`` from the wheel under .cache; ``recipe/...``
    (not in the wheel) from ``tests/fixtures/verl-source/v<version>/<path>.txt``, less its one-line header."""
    if path.startswith("recipe/"):
        p = FIXTURE_SOURCES / f"v{version}" / f"{path}.txt"  # .txt: kept out of the linters
        if not p.is_file():
            return None
        lines = p.read_text(encoding="utf-8").splitlines()
        assert lines[0].startswith("# verlctl test fixture: github.com/volcengine/verl tag v"), p
        return lines[1:]
    p = verl_root(version) / path
    return p.read_text(encoding="utf-8").splitlines() if p.is_file() else None


def available(version: str) -> bool:
    return (verl_root(version) / "verl" / "trainer" / "config" / "ppo_trainer.yaml").is_file()


def config_dir(version: str, entry_config_dir: str) -> Path:
    if entry_config_dir.startswith("recipe/"):
        return OVERLAY / f"v{version}" / entry_config_dir
    return verl_root(version) / entry_config_dir


def compose(version: str, entry_config_dir: str, config_name: str, overrides: Sequence[str]) -> dict:
    """Compose and resolve; raises Hydra's exception on a bad override."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    search = f"hydra.searchpath=[file://{verl_root(version) / 'verl' / 'trainer' / 'config'}]"
    with initialize_config_dir(config_dir=str(config_dir(version, entry_config_dir)), version_base=None):
        cfg = hydra_compose(config_name=config_name, overrides=[*overrides, search])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def compose_many(
    version: str, entry_config_dir: str, config_name: str, batches: Iterable[Sequence[str]]
) -> list[str | None]:
    """Compose several override lists under one Hydra initialisation; None = OK, else the error text."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from omegaconf import OmegaConf

    search = f"hydra.searchpath=[file://{verl_root(version) / 'verl' / 'trainer' / 'config'}]"
    out: list[str | None] = []
    with initialize_config_dir(config_dir=str(config_dir(version, entry_config_dir)), version_base=None):
        for overrides in batches:
            try:
                cfg = hydra_compose(config_name=config_name, overrides=[*overrides, search])
                OmegaConf.to_container(cfg, resolve=True)
                out.append(None)
            except Exception as exc:
                out.append(f"{type(exc).__name__}: {exc}")
    return out
