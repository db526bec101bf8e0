"""spec/resolve.py: the real survivors of the turn-6 mutation sample (seed 8282), through load_spec and the
spec's public checks."""

from __future__ import annotations

from typing import Any

import pytest

from verlctl.errors import SpecError
from verlctl.spec.resolve import ResolvedSpec, load_spec


def resolve(**flags: Any) -> ResolvedSpec:
    return load_spec(None, flags=flags, environ={})


def test_two_missing_required_paths_name_the_second_one_too() -> None:
    """With two of the three required paths unset the error names both (the first as the field, the other
    as "also missing"), as with three."""
    with pytest.raises(SpecError) as exc:
        resolve(**{"paths.model": "/m"}).require_complete()
    assert exc.value.field == "paths.train_files"
    assert str(exc.value).endswith("or pass --set paths.train_files=FILE or TRAIN_FILE (also missing: "
                                   "paths.val_files)"), str(exc.value)


BASE = {"paths.model": "/m", "paths.train_files": "/t.parquet", "paths.val_files": "/v.parquet"}


@pytest.mark.parametrize(
    ("mode", "tbs", "mbs", "want_pss", "want_mbs", "why"),
    [
        ("separate_async", 24, 8, 3, 8, "= train.train_batch_size / train.mini_batch_size"),
        ("fully_async", 24, 8, 3, 8, "= train.train_batch_size / train.mini_batch_size"),
        ("separate_async", 24, None, 4, 6,
         "verl's default 4 (ppo_trainer.yaml trainer.v1.separate_async.parameter_sync_step)"),
        ("separate_async", 6, None, 1, 6, "1: verl's default 4 does not divide train.train_batch_size"),
    ],
)
def test_parameter_sync_step_is_derived_so_that_verls_assert_holds(mode: str, tbs: int, mbs: int | None,
                                                                   want_pss: int, want_mbs: int, why: str) -> None:
    """verl asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size (separate_async): a given
    mini-batch size decides the sync step; without one verl's default 4 (or 1) decides the mini-batch."""
    flags: dict[str, Any] = {**BASE, "mode": mode, "verl_version": "0.9.1", "train.train_batch_size": tbs}
    if mbs is not None:
        flags["train.mini_batch_size"] = mbs
    r = resolve(**flags)
    t = r.spec.train
    assert (t.parameter_sync_step, t.mini_batch_size) == (want_pss, want_mbs)
    assert t.parameter_sync_step * t.mini_batch_size == tbs
    assert str(r.origin("train.parameter_sync_step")) == f"derived ({why})"


@pytest.mark.parametrize(("devices", "trainer", "rollout"), [([0], 1, 1), ([0, 1, 2], 1, 2), ([0, 1, 2, 3], 2, 2)])
def test_one_step_off_splits_the_devices_with_at_least_one_on_each_side(devices: list[int], trainer: int,
                                                                       rollout: int) -> None:
    r = resolve(**BASE, mode="one_step_off_policy", **{"cluster.devices": devices})
    assert (r.spec.train.trainer_devices, r.spec.train.rollout_devices) == (trainer, rollout)


def test_a_long_rejected_value_is_echoed_cut_to_80_characters() -> None:
    """The error line echoes at most 80 characters of the rejected value (its repr), then the full length."""
    with pytest.raises(SpecError) as exc:
        resolve(**{"logging.project": "p q" * 100})
    cut = ("'" + "p q" * 100)[:80]
    assert str(exc.value) == (
        "logging.project: a name of 300 characters is too long (it becomes a directory name): at most 128 "
        f"(got {cut}… (300 characters)) (from flag)"
    )
    with pytest.raises(SpecError) as whole:
        resolve(**{"train.steps": "a" * 78})  # its repr is 80 characters: shown whole
    assert str(whole.value).endswith(f"(got {'a' * 78!r}) (from flag)"), str(whole.value)
    with pytest.raises(SpecError) as cut81:
        resolve(**{"train.steps": "a" * 79})
    assert str(cut81.value).endswith(f"(got '{'a' * 79}… (79 characters)) (from flag)"), str(cut81.value)


def test_a_validator_message_quoting_a_huge_value_is_cut_to_240_characters() -> None:
    with pytest.raises(SpecError) as exc:
        resolve(**{"cluster.ray_start_args": ["y" * 1000]})
    msg = "invalid ray start argument '" + "y" * 1000
    assert str(exc.value) == f"cluster.ray_start_args: {msg[:240]}… (from flag)"
    with pytest.raises(SpecError) as mid:  # a message of 304 characters is cut too
        resolve(**{"cluster.ray_start_args": ["y" * 250]})
    assert str(mid.value) == f"cluster.ray_start_args: {msg[:240]}… (from flag)"
    with pytest.raises(SpecError) as fits:  # one of 240 is not
        resolve(**{"cluster.ray_start_args": ["y" * 186]})
    assert str(fits.value) == f"cluster.ray_start_args: invalid ray start argument '{'y' * 186}': expected --name[=value] (from flag)"
