"""Python packages that an override value needs where training runs (not verl's own dependencies).

The one place that knows "this value of this key imports that package". The in-target preflight
(:mod:`verlctl.orchestrator.preflight`) looks each needed module up (``importlib.util.find_spec``, nothing imported) in
the image's ``python3`` before training starts, so a missing package fails the launch in seconds with the fix,
instead of at model init minutes later.

Sources:

* ``attn_implementation=flash_attention_2`` (feature ``flash_attn`` on FSDP + GPU): transformers'
  ``PreTrainedModel._check_and_enable_flash_attn_2`` raises ``ImportError: FlashAttention2 has been toggled on,
  but it cannot be used due to the following error: the package for FlashAttention2 doesn't seem to be
  installed`` when ``importlib.util.find_spec("flash_attn")`` is None; verl 0.9.1 passes the override to
  ``from_pretrained`` (``verl/workers/config/model.py`` ``override_config``). Seen with real verl 0.9.1 on an
  image without flash-attn (``reference/realverl.md``, run v1: exit 1 after 235 s).
* ``model.use_remove_padding=True`` on verl 0.7.0 with FSDP, off an NPU: the FSDP actor and critic unpad with
  ``verl.utils.attention_utils`` (``verl/workers/actor/dp_actor.py:31``, ``verl/workers/critic/dp_critic.py:28``),
  which imports ``flash_attn.bert_padding`` unless ``is_npu_available`` (``verl/utils/attention_utils.py:27-30``);
  verl 0.9.1 has a torch fallback. Seen with real verl 0.7.0 on an image without flash-attn: the first
  ``compute_log_prob`` dies with ``ModuleNotFoundError: No module named 'flash_attn'``.
"""

from __future__ import annotations

from collections.abc import Callable
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
    applies: Callable[[TrainingCommand], bool] | None = None  # None: wherever the key has the value


def _setting(command: TrainingCommand, key: str) -> str | None:
    """The value the command gives ``key`` (its last override), or None."""
    found = None
    for line in command.overrides:
        if line.key == key:
            found = _value(line)
    return found


def _fsdp_070_off_npu(command: TrainingCommand) -> bool:
    """verl 0.7.0's FSDP actor or critic on a device that is not an NPU (attention_utils.py:27-30)."""
    strategy = _setting(command, f"{AR}.actor.strategy") or (
        "megatron" if "megatron" in command.entry.config_name else "fsdp")
    return command.version == "0.7.0" and _setting(command, "trainer.device") != "npu" and strategy.startswith("fsdp")


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
    PackageNeed(
        f"{AR}.model.use_remove_padding", "True", "flash_attn", "flash-attn",
        "verl 0.7.0's FSDP actor unpads with flash_attn.bert_padding off an NPU (verl/utils/attention_utils.py:"
        "27-30) and dies at the first compute_log_prob with `No module named 'flash_attn'`",
        _fsdp_070_off_npu,
    ),
    PackageNeed(
        "critic.model.use_remove_padding", "True", "flash_attn", "flash-attn",
        "verl 0.7.0's FSDP critic unpads with flash_attn.bert_padding off an NPU (verl/utils/attention_utils.py:"
        "27-30) and dies at its first forward with `No module named 'flash_attn'`",
        _fsdp_070_off_npu,
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


#: What turning a feature off does instead, for the features whose override lines need a package.
_INSTEAD = {"flash_attn": "FSDP then uses sdpa attention", "remove_padding": "verl then trains on padded batches"}


def _fix(lines: list[OverrideLine]) -> tuple[str, str | None]:
    """(spec field, the fix short of installing the package) for the override lines that need one package."""
    features = list(dict.fromkeys(ln.section.split(":", 1)[1] for ln in lines if ln.section.startswith("feature:")))
    extras = [ln.text for ln in lines if ln.section == "extra"]
    fixes = []
    if features:
        flags = " ".join(f"--disable {f}" for f in features)
        instead = "; ".join(_INSTEAD[f] for f in features if f in _INSTEAD)
        fixes.append(f"turn the feature{'s' if len(features) > 1 else ''} off (`{flags}`, or features.disable: "
                     f"[{', '.join(features)}]{': ' + instead if instead else ''})")
    fixes += [f"change `{text}` in extra_overrides" for text in extras]
    field = "features" if features or not extras else "extra_overrides"
    return field, " and ".join(fixes) or None


def package_checks(command: TrainingCommand) -> list[PackageCheck]:
    """The modules that the command's override values need in the target (once each, naming every line that
    needs it: the fix is all of them, or the package)."""
    found: dict[str, list[tuple[OverrideLine, PackageNeed]]] = {}
    for line in command.overrides:
        for need in NEEDS:
            if line.key != need.key or _value(line) != need.value:
                continue
            if need.applies is not None and not need.applies(command):
                continue
            found.setdefault(need.module, []).append((line, need))
    out = []
    for module, pairs in found.items():
        pip_name = pairs[0][1].pip_name
        field, fix = _fix([line for line, _ in pairs])
        install = f"install it in the image (pip install {pip_name})"
        out.append(PackageCheck(
            module,
            " and ".join(f"`{line.text}`" for line, _ in pairs)
            + f" need{'s' if len(pairs) == 1 else ''} the Python package {pip_name} (module {module}), which "
            f"python3 in the target does not have: " + "; ".join(dict.fromkeys(n.what for _, n in pairs)),
            f"{fix}, or {install}" if fix else install,
            field,
        ))
    return out
