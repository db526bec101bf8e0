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
    # The config's own hydra.searchpath is ``file://verl/trainer/config``, relative to the working directory
    # (0.9.1 one-step-off): the script points it at the installed verl's config tree instead (F4).
    core_searchpath: bool = False
    # Modules the entry imports that are not verl's own dependencies (0.9.1 main_ppo: ``import transfer_queue``).
    imports: tuple[str, ...] = ()

    @property
    def needs_source_checkout(self) -> bool:
        return self.module.startswith("recipe.")

    @property
    def source_file(self) -> str | None:
        """The module's file, relative to the work dir, when it comes from a verl source checkout."""
        return self.module.replace(".", "/") + ".py" if self.needs_source_checkout else None


#: Where to get ``recipe/`` when a 0.7.0 recipe entry point is missing from the work dir.
RECIPE_HINT = (
    "the 0.7.0 recipes are not in the verl wheel: container.workdir must be a verl v0.7.0 source checkout "
    "(git clone --branch v0.7.0 https://github.com/volcengine/verl; on a newer checkout recipe/ is a submodule: "
    "git submodule update --init recipe)"
)

#: What to do when an entry point's extra import fails in the target.
IMPORT_HINTS: dict[str, str] = {
    "transfer_queue": "verl 0.9.1's main_ppo imports it (trainer/main_ppo.py: import transfer_queue as tq); "
    "install it in the image: pip install 'TransferQueue>=0.1.10' (verl's verl-core extra)",
}

#: Python (run by ``python3 -c`` from the work dir, as ``python3 -m`` would import) printing the config tree of
#: the verl package that the entry point imports, without importing verl (its ``__init__`` loads torch).
CORE_CONFIG_LOCATOR = (
    "import importlib.util as u, os, sys; sys.path.insert(0, os.getcwd()); s = u.find_spec('verl'); "
    "print(os.path.join(list(s.submodule_search_locations)[0], 'trainer', 'config') "
    "if s and s.submodule_search_locations else '')"
)


def entry_for(version: str, algorithm: str, mode: str, strategy: str) -> Entry:
    from verlctl.verl.modes import version_problem

    problem = version_problem(mode, version)
    if problem:
        raise ValueError(problem)
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
                core_searchpath=True,
            )
        groups = ("model_engine=megatron",) if megatron else ()
        if mode == "fully_async":
            # fully_async_main.py: @hydra.main(config_path="config", config_name="fully_async_ppo_trainer"); its
            # yaml extends ppo_trainer through pkg://verl.trainer.config, so the core model_engine group applies.
            return Entry(
                "verl.experimental.fully_async_policy.fully_async_main",
                "fully_async_ppo_trainer",
                "verl/experimental/fully_async_policy/config",
                groups,
                "verl 0.9.1 fully async policy: rollouter and trainer joined by a message queue",
            )
        if mode in ("colocate_async", "separate_async"):
            # The V1 trainer of main_ppo, selected by trainer.v1.trainer_mode (main_ppo.py:141 get_trainer_cls);
            # separate_async imports transfer_queue at module level (trainer_separate_async.py:23).
            return Entry(
                "verl.trainer.main_ppo",
                "ppo_trainer",
                "verl/trainer/config",
                groups,
                f"verl 0.9.1 V1 trainer, trainer.v1.trainer_mode={mode}",
                imports=("transfer_queue",),
            )
        note = (
            "verl 0.9.1 core trainer: DAPO dynamic sampling via algorithm.filter_groups (no recipe checkout needed)"
            if algorithm == "dapo"
            else ""
        )
        # TaskRunnerV1.run does `import transfer_queue as tq` (0.9.1 trainer/main_ppo.py:137).
        return Entry("verl.trainer.main_ppo", "ppo_trainer", "verl/trainer/config", groups, note, imports=("transfer_queue",))
    raise ValueError(f"unsupported verl version {version!r}")
