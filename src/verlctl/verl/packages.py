"""Python packages that an override value needs where training runs (not verl's own dependencies).

The one place that knows "this value of this key imports that package". The in-target preflight
(:mod:`verlctl.ops.preflight`) looks each needed module up (``importlib.util.find_spec``, nothing imported) in
the image's ``python3`` before training starts, so a missing package fails the launch in seconds with the fix,
instead of at model init minutes later.

Sources:

* ``attn_implementation=flash_attention_2`` (feature ``flash_attn`` on FSDP + GPU): transformers'
  ``PreTrainedModel._check_and_enable_flash_attn_2`` raises ``ImportError: FlashAttention2 has been toggled on,
  but it cannot be used due to the following error: the package for FlashAttention2 doesn't seem to be
  installed`` when ``importlib.util.find_spec("flash_attn")`` is None; verl 0.9.1 passes the override to
  ``from_pretrained`` (``verl/workers/config/model.py`` ``override_config``). Seen with real verl 0.9.1 on an
  image without flash-attn (``reference/realverl.md``, run v1: exit 1 after 235 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from verlctl.verl.compose import OverrideLine, TrainingCommand

AR = "actor_rollout_ref"


@dataclass(frozen=True)
class PackageNeed:
    key: str  # the override key (no '+' / '~')
    value: str  # the value that needs the package
    module: str  # the top-level module looked up in the target
    pip_name: str  # what to install
    what: str  # what fails without it, and where


NEEDS: tuple[PackageNeed, ...] = (
    PackageNeed(
        f"{AR}.model.override_config.attn_implementation", "flash_attention_2", "flash_attn", "flash-attn",
        "transformers raises `ImportError: FlashAttention2 has been toggled on, but ... the package for "
        "FlashAttention2 doesn't seem to be installed` at model init",
    ),
    PackageNeed(
        "critic.model.override_config.attn_implementation", "flash_attention_2", "flash_attn", "flash-attn",
        "transformers raises `ImportError: FlashAttention2 has been toggled on` when the critic model loads",
    ),
)


@dataclass(frozen=True)
class PackageCheck:
    """One module the preflight looks up, and what to say when it is missing."""

    module: str
    message: str
    hint: str
    field: str

    def as_payload(self) -> dict[str, str]:
        return {"module": self.module, "message": self.message, "hint": self.hint, "field": self.field}


def _value(line: OverrideLine) -> str:
    if line.raw is not None:
        return line.raw.split("=", 1)[1].strip().strip("'\"") if "=" in line.raw else ""
    return str(line.value)


def _where(line: OverrideLine, need: PackageNeed) -> tuple[str, str]:
    """(spec field, the fix) for the override line that needs the package."""
    install = f"install it in the image (pip install {need.pip_name})"
    if line.section.startswith("feature:"):
        feature = line.section.split(":", 1)[1]
        if feature == "flash_attn":
            return "features", (f"turn the feature off (`--disable flash_attn`, or features.disable: [flash_attn]; "
                                f"FSDP then uses sdpa attention), or {install}")
        return "features", f"turn the feature {feature} off (`--disable {feature}`), or {install}"
    if line.section == "extra":
        return "extra_overrides", f"change `{line.text}` in extra_overrides, or {install}"
    return "features", install


def package_checks(command: TrainingCommand) -> list[PackageCheck]:
    """The modules that the command's override values need in the target (once each)."""
    out: dict[str, PackageCheck] = {}
    for line in command.overrides:
        for need in NEEDS:
            if line.key != need.key or _value(line) != need.value or need.module in out:
                continue
            field, hint = _where(line, need)
            out[need.module] = PackageCheck(
                need.module,
                f"`{line.text}` needs the Python package {need.pip_name} (module {need.module}), which python3 in "
                f"the target does not have: {need.what}",
                hint,
                field,
            )
    return list(out.values())
