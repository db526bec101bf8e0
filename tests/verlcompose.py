"""Compose verlctl's override lists against the real verl config of a version (test helper).

The verl wheels are installed with ``pip install --no-deps --target .cache/verl/<version> verl==<version>``
(by ``.ci/run``); verl itself is never imported (its ``__init__`` needs torch): Hydra's compose API reads
the YAML config tree directly (``reference/verl.md`` §8). Recipe configs that the 0.7.0 wheel lacks come
from ``tests/verl_overlay`` (see its README).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


# --------------------------------------------------------------------------------------------------
# Composition, once per distinct override list
#
# A Hydra compose spends nearly all its time building the defaults tree and merging the YAML files of the
# config groups (about 0.4 s quiet for ppo_trainer, 8 min per 128-mask case of the fidelity matrix under load).
# That part depends only on the *config-group* overrides (``actor_rollout_ref/rollout=...``, none in most
# lists), not on the ``key=value`` ones. So, as Hydra's own ``_load_configuration_impl`` does in two steps:
#   1. the config of the group overrides is composed by Hydra once per distinct set (memoised);
#   2. each list's key overrides are applied to a copy of it by Hydra's own
#      ``ConfigLoaderImpl._apply_overrides_to_config`` (the function compose calls for them), then resolved.
# Errors are Hydra's own in both steps. Which overrides are group ones is decided by Hydra's ``Overrides``
# class, as in compose. Any surprise (a hydra.* key override, a package override, Hydra internals that moved)
# falls back to the plain full compose; ``VERLCOMPOSE_FULL=1`` forces it everywhere, and
# ``test_compose_fidelity.py::test_the_shared_composition_equals_a_full_compose`` checks both agree.
# Results are memoised per (version, entry, config name, override list) for the whole test process; the
# composition tests of one verl version share an ``xdist_group``, so one worker process composes them all.
# --------------------------------------------------------------------------------------------------

_RESULTS: dict[tuple[str, str, str, tuple[str, ...]], tuple[dict | None, str | None]] = {}
_BASES: dict[tuple[str, str, str, tuple[str, ...]], Any] = {}
#: How each list was composed: "shared" (steps 1+2) or "full" (plain compose); for the tests and benchmarks.
STATS: dict[str, int] = {"shared": 0, "full": 0, "memo": 0, "bases": 0}


def _search(version: str) -> str:
    return f"hydra.searchpath=[file://{verl_root(version) / 'verl' / 'trainer' / 'config'}]"


@contextmanager
def _initialised(version: str, entry_config_dir: str) -> Iterator[None]:
    """Hydra initialised for the entry's config dir, with OmegaConf's interpolation parser memoised (a pure
    function of the string: resolving ``${...}`` re-parses the same ~120 strings for every list otherwise)."""
    import functools

    import omegaconf.base
    from hydra import initialize_config_dir

    plain = omegaconf.base.parse
    omegaconf.base.parse = functools.lru_cache(maxsize=4096)(plain)  # type: ignore[assignment]
    try:
        with initialize_config_dir(config_dir=str(config_dir(version, entry_config_dir)), version_base=None):
            yield
    finally:
        omegaconf.base.parse = plain  # type: ignore[assignment]


_REPOS: dict[tuple[str, str, str], Any] = {}


def _full(version: str, config_name: str, overrides: Sequence[str]) -> dict:
    from hydra import compose as hydra_compose
    from omegaconf import OmegaConf

    cfg = hydra_compose(config_name=config_name, overrides=[*overrides, _search(version)])
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _shared(version: str, entry_config_dir: str, config_name: str, overrides: Sequence[str]) -> dict | None:
    """Steps 1 and 2 above; None when this list must take the full compose."""
    import copy

    from hydra import compose as hydra_compose
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.defaults_list import Overrides
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    search = _search(version)
    rkey = (version, entry_config_dir, config_name)
    if rkey not in _REPOS:  # the config sources: the same for every list of this entry (only the search path)
        loader = GlobalHydra.instance().config_loader()
        _REPOS[rkey] = loader._parse_overrides_and_create_caching_repo(config_name, [search])[1]
    repo = _REPOS[rkey]
    parsed = OverridesParser.create().parse_overrides(overrides=[*overrides, search])
    key_ids = {id(o) for o in Overrides(repo, parsed).config_overrides}
    keys = [o for o in parsed if id(o) in key_ids and o.input_line != search]
    if any(o.is_sweep_override() for o in parsed) or any(
            o.package is not None or (o.key_or_group or "").startswith("hydra") for o in keys):
        return None
    groups = tuple(o.input_line for o in parsed if id(o) not in key_ids and o.input_line != search)
    bkey = (version, entry_config_dir, config_name, groups)
    if bkey not in _BASES:
        _BASES[bkey] = hydra_compose(config_name=config_name, overrides=[*groups, search])
        STATS["bases"] += 1
    cfg = copy.deepcopy(_BASES[bkey])
    ConfigLoaderImpl._apply_overrides_to_config(keys, cfg)
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def _one(version: str, entry_config_dir: str, config_name: str, overrides: Sequence[str]) -> tuple[dict | None, str | None]:
    """(config, None) or (None, "Type: error"); inside an initialised Hydra for that entry."""
    key = (version, entry_config_dir, config_name, tuple(overrides))
    if key in _RESULTS:
        STATS["memo"] += 1
        return _RESULTS[key]
    try:
        cfg = None if os.environ.get("VERLCOMPOSE_FULL") else _shared(version, entry_config_dir, config_name, overrides)
        if cfg is None:
            cfg = _full(version, config_name, overrides)
            STATS["full"] += 1
        else:
            STATS["shared"] += 1
        out: tuple[dict | None, str | None] = (cfg, None)
    except Exception as exc:  # Hydra's and OmegaConf's errors are the result here
        out = (None, f"{type(exc).__name__}: {exc}")
    _RESULTS[key] = out
    return out


def compose(version: str, entry_config_dir: str, config_name: str, overrides: Sequence[str]) -> dict:
    """Compose and resolve; raises Hydra's exception on a bad override (the full compose, for its message)."""
    key = (version, entry_config_dir, config_name, tuple(overrides))
    if key in _RESULTS and _RESULTS[key][0] is not None:
        STATS["memo"] += 1
        return copy_of(_RESULTS[key][0])
    with _initialised(version, entry_config_dir):
        cfg, err = _one(version, entry_config_dir, config_name, overrides)
        if cfg is None:
            _full(version, config_name, overrides)  # raises Hydra's exception
            raise AssertionError(f"the shared composition failed where the full one did not: {err}")
    return copy_of(cfg)


def copy_of(cfg: dict) -> dict:
    import copy

    return copy.deepcopy(cfg)


def compose_many(
    version: str, entry_config_dir: str, config_name: str, batches: Iterable[Sequence[str]]
) -> list[str | None]:
    """Compose several override lists under one Hydra initialisation; None = OK, else the error text."""
    with _initialised(version, entry_config_dir):
        return [_one(version, entry_config_dir, config_name, overrides)[1] for overrides in batches]
