"""Which python module and Hydra config a run uses, per verl version x algorithm x mode x strategy.

Sources: ``reference/verl.md`` §2.1 and §4.

* 0.7.0 (the seed image): DAPO is ``recipe.dapo.main_dapo`` from the verl source checkout (``recipe/`` is
  not in the wheel); one-step-off is ``recipe.one_step_off_policy.main_ppo``. Both configs are resolved
  relative to the verl work dir (their ``hydra.searchpath`` is ``file://verl/trainer/config``), so the
  command runs from there.
* 0.9.1: ``recipe/`` moved to the separate verl-recipe repository, whose pinned DAPO entry does not even
  import against the 0.9.1 wheel; verl 0.9.1's core trainer implements DAPO's dynamic sampling itself
  (``algorithm.filter_groups``), so DAPO runs on ``verl.trainer.main_ppo``. Megatron is selected with the
  ``model_engine=megatron`` group (``ppo_megatron_trainer`` is a deprecated alias). One-step-off lives in
  ``verl.experimental.one_step_off_policy``.
"""

from __future__ import annotations

from dataclasses import dataclass

SUPPORTED_VERSIONS: tuple[str, ...] = ("0.7.0", "0.9.1")
DEFAULT_VERSION = "0.7.0"


@dataclass(frozen=True)
class Entry:
    module: str
    config_name: str
    config_dir: str  # relative to the verl work dir (or the installed package root for verl/*)
    group_overrides: tuple[str, ...] = ()  # defaults-list selections, placed first
    note: str = ""

    @property
    def needs_source_checkout(self) -> bool:
        return self.module.startswith("recipe.")


def entry_for(version: str, algorithm: str, mode: str, strategy: str) -> Entry:
    megatron = strategy == "megatron"
    if version == "0.7.0":
        if mode == "one_step_off_policy":
            name = "one_step_off_ppo_megatron_trainer" if megatron else "one_step_off_ppo_trainer"
            return Entry(
                "recipe.one_step_off_policy.main_ppo",
                name,
                "recipe/one_step_off_policy/config",
                note="one-step-off recipe of the verl 0.7.0 source tree",
            )
        if algorithm == "dapo":
            name = "dapo_megatron_trainer" if megatron else "dapo_trainer"
            return Entry("recipe.dapo.main_dapo", name, "recipe/dapo/config", note="DAPO recipe of verl 0.7.0")
        name = "ppo_megatron_trainer" if megatron else "ppo_trainer"
        return Entry("verl.trainer.main_ppo", name, "verl/trainer/config")
    if version == "0.9.1":
        if mode == "one_step_off_policy":
            name = "one_step_off_ppo_megatron_trainer" if megatron else "one_step_off_ppo_trainer"
            return Entry(
                "verl.experimental.one_step_off_policy.main_ppo",
                name,
                "verl/experimental/one_step_off_policy/config",
            )
        groups = ("model_engine=megatron",) if megatron else ()
        note = (
            "verl 0.9.1 core trainer: DAPO dynamic sampling via algorithm.filter_groups (no recipe checkout needed)"
            if algorithm == "dapo"
            else ""
        )
        return Entry("verl.trainer.main_ppo", "ppo_trainer", "verl/trainer/config", groups, note)
    raise ValueError(f"unsupported verl version {version!r}")
