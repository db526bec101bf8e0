"""Options shared by the commands that take a run spec (plan, check, launch, init).

Only typer and the standard library are imported here: this module is loaded for ``verlctl --help``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


def out_path(text: Any) -> Path:
    """The parser of every ``-o``/``--out``: the raw text, so that an empty one is refused in one line (typer's
    ``Path('')`` would be ``.``, the current directory). The rule for what -o may replace: :mod:`verlctl.files`."""
    if isinstance(text, Path):  # a default
        return text
    if not str(text).strip():
        from verlctl.errors import VerlctlError

        raise VerlctlError("-o: the path is empty; give a file or directory name")
    return Path(text)


Force = Annotated[
    bool,
    typer.Option("--force", help="Replace what -o names when it exists (a file; for a directory: the files of the set)."),
]

ForceFile = Annotated[bool, typer.Option("--force", help="Replace the file -o names when it exists.")]

#: The one ``RUN`` argument of every command that acts on a recorded run (resolved by
#: :func:`verlctl.runtime.records.resolve_run`).
RunArg = Annotated[
    Optional[str],  # noqa: UP045
    typer.Argument(metavar="[RUN]", show_default=False,
                   help="Run id, or a part only one id starts or ends with (its time stamp, or its random "
                        "suffix such as 1a9f); default: the newest run."),
]

SpecFile = Annotated[
    Optional[Path],  # noqa: UP045 - typer needs Optional on 3.10
    typer.Option("--config", "-c", help="Run spec YAML file.", show_default=False),
]
SetValues = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Option("--set", help="Set any spec value: --set train.lr=1e-5 (repeatable).", show_default=False),
]
Mask = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(help="7-bit feature mask, leftmost = bit 0 (RmvPad DynBSZ Offload PfxCache Recompute SwapOpt VPP)."),
]
Features = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--features", help="Comma-separated features to turn on, added to the spec's features.enable "
                 "(see `verlctl features`)."),
]
NoFeatures = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option("--disable", help="Comma-separated features to turn off, added to the spec's features.disable."),
]
VerlVersion = Annotated[Optional[str], typer.Option("--verl-version", help="0.7.0, 0.9.1 or auto.")]  # noqa: UP045
AlgorithmOpt = Annotated[Optional[str], typer.Option("--algorithm", help="dapo or grpo.")]  # noqa: UP045
ModeOpt = Annotated[Optional[str], typer.Option("--mode", help="sync, one_step_off_policy; verl 0.9.1: colocate_async, separate_async, fully_async.")]  # noqa: UP045
StrategyOpt = Annotated[Optional[str], typer.Option("--strategy", help="megatron, fsdp or fsdp2.")]  # noqa: UP045
DeviceOpt = Annotated[Optional[str], typer.Option("--device", help="npu or gpu.")]  # noqa: UP045
SwanlabOpt = Annotated[
    Optional[bool],  # noqa: UP045
    typer.Option("--swanlab/--no-swanlab", help="Log to SwanLab (host and key from SWANLAB_HOST / SWANLAB_API_KEY)."),
]
JsonOut = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="The checklist as the full table of every value "
                                                             "with its source (default: what differs from the defaults).")]


#: The spec flags every spec-taking command has (name -> annotation); all default to None (not given).
SHARED_SPEC_OPTIONS: dict[str, Any] = {
    "set_values": SetValues,
    "mask": Mask,
    "features": Features,
    "disable": NoFeatures,
    "verl_version": VerlVersion,
    "algorithm": AlgorithmOpt,
    "mode": ModeOpt,
    "strategy": StrategyOpt,
    "device": DeviceOpt,
    "swanlab": SwanlabOpt,
}

SpecFlags = tuple[dict[str, Any], dict[str, str]]


def with_spec_flags(fn: Callable[..., int]) -> Callable[..., int]:
    """Give a command the shared spec flags (declared once, here). The command takes a ``flags`` parameter
    and receives ``spec_flags(...)`` of what the user set: (dotted path -> value, dotted path -> flag)."""
    sig = inspect.signature(fn, eval_str=True)
    own = [p for p in sig.parameters.values() if p.name != "flags"]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
        for name, annotation in SHARED_SPEC_OPTIONS.items()
    ]

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> int:
        given = {name: kwargs.pop(name, None) for name in SHARED_SPEC_OPTIONS}
        return fn(*args, flags=spec_flags(**given), **kwargs)

    command.__signature__ = sig.replace(parameters=[*own, *shared])  # type: ignore[attr-defined]
    return command


def spec_flags(
    set_values: list[str] | None = None,
    mask: str | None = None,
    features: str | None = None,
    disable: str | None = None,
    verl_version: str | None = None,
    algorithm: str | None = None,
    mode: str | None = None,
    strategy: str | None = None,
    device: str | None = None,
    swanlab: bool | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """Flags the user set, as dotted spec paths -> value, plus the flag that set each one."""
    from verlctl.errors import SpecError

    flags: dict[str, Any] = {}
    names: dict[str, str] = {}

    def put(path: str, value: Any, flag: str) -> None:
        flags[path] = value
        names[path] = flag

    for item in set_values or []:
        if "=" not in item or not item.split("=", 1)[0].strip():
            from verlctl.spec.resolve import shown as cut

            raise SpecError(f"--set expects KEY=VALUE, got {cut(item)}")
        key, value = item.split("=", 1)
        key = key.strip()
        refuse_secret_flag(key, value)
        parsed = _parse_scalar(value, key)
        if key.split(".", 1)[0] in ("env",) and "." in key and isinstance(parsed, (bool, int, float)):
            parsed = value.strip()  # a string map: `--set env.TASK_QUEUE_ENABLE=2` means the text "2"
        put(key, parsed, f"--set {key}")
    simple: dict[str, tuple[str | None, str]] = {
        "features.mask": (mask, "--mask"),
        "features.enable": (features, "--features"),
        "features.disable": (disable, "--disable"),
        "verl_version": (verl_version, "--verl-version"),
        "algorithm": (algorithm, "--algorithm"),
        "mode": (mode, "--mode"),
        "strategy": (strategy, "--strategy"),
        "device": (device, "--device"),
    }
    named: dict[str, tuple[Any, str]] = {p: (g, f) for p, (g, f) in simple.items() if g is not None}
    if swanlab is not None:
        named["logging.swanlab.enabled"] = (swanlab, "--swanlab" if swanlab else "--no-swanlab")
    for path, (given, flag) in named.items():
        if path in flags and flags[path] != given:
            named_flag = flag if isinstance(given, bool) else f"{flag} {given}"
            other = flags[path]
            shown = str(other).lower() if isinstance(other, bool) else other
            raise SpecError(
                f"{named_flag} conflicts with {names[path]}={shown}: give only one of them", field=path
            )
        put(path, given, flag)
    return flags, names


def refuse_secret_flag(key: str, value: str) -> None:
    """A secret given with ``--set`` is refused before it is read: a command line is readable by every user
    of the machine (``/proc/<pid>/cmdline``, ``ps``) and stays in the shell's history. One line naming the
    field and the environment variable to export instead; the value is never repeated."""
    from verlctl.errors import SpecError
    from verlctl.spec.resolve import SECRET_ENV

    how = SECRET_ENV.get(key)
    if how is not None and value.strip():
        raise SpecError(f"a key given with --set is readable by every user of this machine (ps, /proc) and stays "
                        f"in the shell's history: export {how} instead", field=key)


def _parse_scalar(text: str, key: str = "") -> Any:
    """``--set`` values are YAML scalars/lists (``4``, ``1e-5``, ``true``, ``[0,1]``); masks stay strings.
    Read by the spec file's own reader (spec/sources.py: load_bounded_yaml: aliases, depth, size bounded);
    a value that is not UTF-8 is refused here, naming its field."""
    import re

    from verlctl.spec.sources import YamlSyntaxError, load_bounded_yaml, refuse_undecodable

    what = f"--set {key}" if key else "--set"
    refuse_undecodable(key, what)
    refuse_undecodable(text, what, key or None)
    if re.fullmatch(r"[01]{7}", text) or re.search(r"[\x00-\x08\x0a-\x1f\x7f]", text):
        # A mask keeps its leading zeros; a value with a control character (a newline) stays as given,
        # so that the spec's validators reject it instead of YAML folding it into a space.
        return text
    from verlctl.errors import SpecError

    try:
        value = load_bounded_yaml(text, what) if text.strip() else text
    except YamlSyntaxError:
        return text
    except SpecError as exc:
        if "digits" in exc.message:  # an integer longer than Python converts (4300 digits): the text, as before
            return text
        raise
    # A path such as "/a: b" must not turn into a mapping.
    return text if isinstance(value, dict) or (value is None and text.strip() not in ("null", "~")) else value


def check_seconds(value: float, flag: str, allow_zero: bool = False) -> float:
    """A number of seconds from a flag: finite and positive (or zero when allowed), else one clear line."""
    import math

    from verlctl.errors import VerlctlError

    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        least = "zero or more" if allow_zero else "more than zero"
        raise VerlctlError(f"{flag} must be a number of seconds, {least}; got {value:g}")
    return value
