"""Where spec values come from, and how they are merged with provenance.

Priority (highest first): typed (wizard) > flag > env > file > detected > default. Every leaf value of
the merged spec records the :class:`Origin` it came from; values computed from others are ``derived``.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from verlctl.errors import SpecError


class Source(str, Enum):
    DEFAULT = "default"
    DETECTED = "detected"
    FILE = "file"
    ENV = "env"
    FLAG = "flag"
    TYPED = "typed"
    RECOVERY = "recovery"  # added by the watcher (the OOM ladder)
    DERIVED = "derived"


PRIORITY = [Source.DEFAULT, Source.DETECTED, Source.FILE, Source.ENV, Source.FLAG, Source.TYPED, Source.RECOVERY]


@dataclass(frozen=True)
class Origin:
    source: Source
    detail: str | None = None  # e.g. the env var name, the flag, the file path

    def __str__(self) -> str:
        return f"{self.source.value} ({self.detail})" if self.detail else self.source.value


@dataclass
class Layer:
    """Values from one source: a nested dict plus, per dotted leaf path, a detail string."""

    source: Source
    values: dict[str, Any]
    details: dict[str, str]

    @classmethod
    def from_flat(cls, source: Source, flat: Mapping[str, Any], details: Mapping[str, str] | None = None) -> Layer:
        nested: dict[str, Any] = {}
        for path, value in flat.items():
            if path.count(".") >= MAX_SPEC_DEPTH:
                where = f" ({details[path][:60]}…)" if details and path in details else ""
                raise SpecError(f"{path[:60]}…{where}: nesting too deep (more than {MAX_SPEC_DEPTH} levels)")
            set_path(nested, path, value)
        return cls(source, nested, dict(details or {}))


# Leaves that are dicts whose keys are data, not spec fields (merged key by key).
DICT_FIELDS = {"env"}


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = tree
    for p in parts[:-1]:
        nxt = node.get(p)
        if not isinstance(nxt, dict):
            nxt = {}
            node[p] = nxt
        node = nxt
    node[parts[-1]] = value


def get_path(tree: Mapping[str, Any], path: str, default: Any = None) -> Any:
    node: Any = tree
    for p in path.split("."):
        if not isinstance(node, Mapping) or p not in node:
            return default
        node = node[p]
    return node


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted leaf paths of a nested dict. Lists and scalars are leaves; DICT_FIELDS keep their keys."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def merge_layers(layers: Iterable[Layer]) -> tuple[dict[str, Any], dict[str, Origin]]:
    """Deep-merge layers by priority; return the nested values and the origin of every leaf set.

    Linear in the number of leaves: the origins below each path prefix are indexed, so a value that
    replaces a subtree (or a leaf replaced by a subtree) drops the old origins without a full scan.
    """
    ordered = sorted(layers, key=lambda layer: PRIORITY.index(layer.source))
    merged: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    below: dict[str, set[str]] = {}  # path prefix -> origin paths strictly below it

    def drop(old: str) -> None:
        del origins[old]
        for prefix in _prefixes(old):
            below[prefix].discard(old)

    for layer in ordered:
        for path, value in flatten(layer.values).items():
            # A non-dict value replacing a subtree (or the reverse) drops what was below.
            for old in list(below.get(path, ())):
                drop(old)
            for prefix in _prefixes(path):
                if prefix in origins:
                    drop(prefix)
            set_path(merged, path, value)
            if path not in origins:
                for prefix in _prefixes(path):
                    below.setdefault(prefix, set()).add(path)
            origins[path] = Origin(layer.source, layer.details.get(path))
    return merged, origins


def _prefixes(path: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the proper prefixes of a dotted path."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def origin_index(origins: Mapping[str, Origin]) -> Callable[[str], Origin | None]:
    """A lookup of the origin of ``path``: its own, else an ancestor's, else the first one below it.

    Built once in linear time, so that looking up every leaf of a spec with a 300k-key ``env`` map stays
    linear (a scan of all origins per lookup was quadratic).
    """
    first_below: dict[str, Origin] = {}
    for p, o in origins.items():
        for prefix in _prefixes(p):
            first_below.setdefault(prefix, o)

    def lookup(path: str) -> Origin | None:
        if path in origins:
            return origins[path]
        for prefix in reversed(_prefixes(path)):
            if prefix in origins:
                return origins[prefix]
        return first_below.get(path)

    return lookup


# --------------------------------------------------------------------------------------------------
# YAML file


#: The largest spec file read (a real spec is a few kB; a 300k-key ``env`` map is about 5 MB).
MAX_SPEC_BYTES = 16 * 1024 * 1024
#: The deepest nesting of mappings/lists accepted in a spec file (the spec itself is 4 levels deep).
MAX_SPEC_DEPTH = 32


def read_spec_text(p: Path) -> str:
    """The text of a spec file: a regular file of at most MAX_SPEC_BYTES, else a SpecError.

    ``/dev/zero``, a FIFO or a directory is refused before anything is read (a FIFO is opened
    non-blocking, so a FIFO without a writer never hangs), and no more than the cap is ever read.
    """
    import stat

    cap = f"at most {MAX_SPEC_BYTES // (1024 * 1024)} MiB"
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SpecError(f"spec file not found: {p}") from None
    except IsADirectoryError:
        raise SpecError(f"spec file is a directory: {p}") from None
    except OSError as exc:
        raise SpecError(f"cannot read spec file {p}: {exc.strerror or exc}") from None
    chunks: list[bytes] = []
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SpecError(f"spec file is a directory: {p}")
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"spec file {p} is not a regular file: pass a YAML file with -c")
        if st.st_size > MAX_SPEC_BYTES:
            raise SpecError(f"spec file {p} is too large ({st.st_size} bytes; {cap})")
        size = 0
        while size <= MAX_SPEC_BYTES:
            try:
                chunk = os.read(fd, min(1 << 20, MAX_SPEC_BYTES + 1 - size))
            except OSError as exc:
                raise SpecError(f"cannot read spec file {p}: {exc.strerror or exc}") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > MAX_SPEC_BYTES:  # it grew while being read
            raise SpecError(f"spec file {p} is too large ({cap})")
    finally:
        os.close(fd)
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"cannot read spec file {p}: {exc}") from None


#: How many values YAML aliases (``*name``) may add to a spec file beyond the ones written in it. An alias
#: re-uses a subtree; nested aliases multiply it (a 600-byte file of ten levels of nine aliases is 9^10
#: values): everything after the load walks the expanded tree, so the expansion itself is bounded.
MAX_ALIAS_EXPANSION = 100_000


def _shape(data: Any) -> tuple[int, int, int] | None:
    """``(height, values as expanded, distinct containers)`` of a loaded YAML tree; None when it contains itself.

    Iterative and memoised by object identity: a subtree that aliases share is measured once, so the cost
    is linear in the file, never in the expansion.
    """
    memo: dict[int, tuple[int, int]] = {}  # id -> (height, expanded size), of containers only
    open_: set[int] = set()  # containers whose children are still being measured (the current path)
    stack: list[tuple[Any, bool]] = [(data, False)]
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        nid = id(node)
        kids = [c for c in (node.values() if isinstance(node, dict) else node) if isinstance(c, (dict, list))]
        if done:
            open_.discard(nid)
            height = 1 + max((memo[id(c)][0] for c in kids), default=0)
            size = 1 + len(node) + sum(memo[id(c)][1] for c in kids)
            memo[nid] = (height, size)
            continue
        if nid in memo:
            continue
        if nid in open_:  # reached again below itself: a recursive alias
            return None
        open_.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in kids if id(c) not in memo)
    if not isinstance(data, (dict, list)):
        return 0, 1, 0
    height, size = memo[id(data)]
    return height, size, len(memo)


def _too_deep(data: Any, limit: int) -> bool:
    """Whether mappings/lists nest deeper than ``limit`` (or contain themselves)."""
    shape = _shape(data)
    return shape is None or shape[0] > limit


def short_int_error(exc: ValueError) -> str:
    """One short line for Python's "Exceeds the limit (4300 digits) for integer string conversion"."""
    import sys

    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    if "integer string conversion" in str(exc) or "digits" in str(exc):
        return f"a number has more than {limit} digits: no spec field takes a value that large"
    return str(exc).splitlines()[0][:200] if str(exc) else "invalid value"


def unique_key_loader() -> Any:
    """PyYAML's SafeLoader that refuses a mapping with the same key twice (plain PyYAML keeps the last one
    silently: a spec with two ``train:`` blocks would lose the first)."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: PyYAML's own constructor reports it
                    continue
                if first is not None:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {str(key)[:80]!r} (first at line {first}): keep one of them",
                        key_node.start_mark)
                seen[key] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


class YamlSyntaxError(SpecError):
    """Text that is not YAML (a ``--set`` value then stays the text it is)."""


def load_bounded_yaml(text: str, what: str, source: str | None = None) -> Any:
    """The one YAML reader of verlctl's input (a spec file, a ``--set`` value): duplicate keys refused, and
    the loaded tree bounded (at most MAX_SPEC_DEPTH levels, no alias that contains itself, aliases adding
    at most MAX_ALIAS_EXPANSION values): everything after the load walks the expanded tree. ``what`` names
    the input in messages (``spec file x.yaml``, ``--set train.lr``); ``source`` the place for a syntax
    error (``x.yaml``). A SpecError (YamlSyntaxError for text that is not YAML) else."""
    import yaml

    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(f"{what}: larger than {MAX_SPEC_BYTES // (1024 * 1024)} MiB")
    too_deep = f"{what}: nesting too deep (more than {MAX_SPEC_DEPTH} levels of mappings or lists)"
    try:
        data = yaml.load(text, Loader=unique_key_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlSyntaxError(f"malformed YAML in {source or what}{where}: {problem}") from None
    except RecursionError:
        raise SpecError(too_deep) from None
    except ValueError as exc:  # an integer of more than sys.get_int_max_str_digits() digits
        raise SpecError(f"{what}: {short_int_error(exc)}") from None
    shape = _shape(data)
    if shape is None:
        raise SpecError(f"{what}: nesting too deep (a YAML alias, *name, contains itself): write the values out "
                        "instead")
    if shape[0] > MAX_SPEC_DEPTH:
        raise SpecError(too_deep)
    written = 2 * len(text) + 1  # more values than the text could hold without aliases
    if shape[1] > written + MAX_ALIAS_EXPANSION:
        raise SpecError(
            f"{what}: its YAML aliases (*name) expand to more than {MAX_ALIAS_EXPANSION} values: "
            "write the values out instead of nesting aliases"
        )
    return data


def refuse_undecodable(value: str, what: str, field: str | None = None) -> str:
    """``value`` when it is text; a SpecError naming ``what`` when it carries bytes that are not UTF-8 (Python
    hands such argv and environment bytes over as lone surrogates: they would fail every writer later)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(f"{what}: the value is not UTF-8 text (it holds a byte that is not a character, e.g. a "
                        "path in a legacy encoding): give it in UTF-8, or rename the path", field=field) from None
    return value


def load_yaml_layer(path: str | Path, text: str | None = None) -> Layer:
    """The spec file ``path`` as a layer (``text``: its content, already read by the caller, e.g. a run
    record's own spec read through the record's owner check); aliases, size and depth bounded."""
    p = Path(path)
    if text is None:
        text = read_spec_text(p)
    data = load_bounded_yaml(text, f"spec file {p}", str(p))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"spec file {p} must hold a mapping of settings, not {type(data).__name__}")
    detail = str(p)
    return Layer(Source.FILE, data, {k: detail for k in flatten(data)})


# --------------------------------------------------------------------------------------------------
# Environment

#: The seeds' own variable names (verl-npu-launch, verl-async-dapo) and the spec path each one sets.
SEED_ENV: dict[str, str] = {
    "MODEL_PATH": "paths.model",
    "TRAIN_FILE": "paths.train_files",
    "VAL_FILE": "paths.val_files",
    "TEST_FILE": "paths.val_files",
    "CKPTS_DIR": "paths.checkpoints",
    "TRAIN_STEPS": "train.steps",
    "FRAMEWORK": "strategy",
    "TRAINER_GPUS": "train.trainer_devices",
    "ROLLOUT_GPUS": "train.rollout_devices",
    "MAX_RESPONSE_LENGTH": "train.max_response_length",
    "USER_FEATURES": "features.enable",
    "MAX_OOM_RETRIES": "recovery.max_oom_retries",
    "CONTAINER": "container.name",
    "SWANLAB_HOST": "logging.swanlab.host",
    "SWANLAB_API_KEY": "logging.swanlab.api_key",
    "SWANLAB_MODE": "logging.swanlab.mode",
    "SWANLAB_WORKSPACE": "logging.swanlab.workspace",
    "SWANLAB_LOG_DIR": "logging.swanlab.log_dir",
    "SWANLAB_PROJECT": "logging.project",
    "PROJECT_NAME": "logging.project",
    "http_proxy": "container.proxy.http",
    "HTTP_PROXY": "container.proxy.http",
    "https_proxy": "container.proxy.https",
    "HTTPS_PROXY": "container.proxy.https",
    "no_proxy": "container.proxy.no_proxy",
    "NO_PROXY": "container.proxy.no_proxy",
}

#: Variables whose presence enables a feature (seed 2: ``ENABLE_OFFLOAD=True``).
SEED_FEATURE_ENV: dict[str, str] = {"ENABLE_OFFLOAD": "offload"}

#: VERLCTL_* variables that configure verlctl itself, not the spec.
RESERVED_ENV_PREFIXES = ("VERLCTL_STATE_DIR", "VERLCTL_STANDIN_", "VERLCTL_NO_", "VERLCTL_DEBUG")

_TRUE = {"1", "true", "yes", "on"}


def load_env_layer(environ: Mapping[str, str] | None = None, top_fields: Iterable[str] = ()) -> Layer:
    """Spec values from ``VERLCTL_<PATH>`` (``__`` separates levels) and the seeds' variable names.

    A ``VERLCTL_`` name whose first level is not a spec field is an error (with a did-you-mean) when it
    looks like a misspelt field, and ignored otherwise (other tools may use the prefix).
    """
    env = os.environ if environ is None else environ
    flat: dict[str, Any] = {}
    details: dict[str, str] = {}
    # Seed names first (lower precedence inside the env layer), VERLCTL_ names override them.
    for name, path in SEED_ENV.items():
        value = env.get(name)
        if value is None or value == "":
            continue
        refuse_undecodable(value, f"environment variable {name} ({path})", path)
        if path.startswith("container.proxy.") and value.strip().lower() in {"none", "无"}:
            continue
        if name == "FRAMEWORK" and value.strip().lower() == "fsdp":
            value = "fsdp2"  # the second seed: FRAMEWORK=fsdp means "the FSDP2 framework"
        flat[path] = value
        details[path] = name
    enable = list(_split(flat.get("features.enable", "")))
    for name, feature in SEED_FEATURE_ENV.items():
        if env.get(name, "").strip().lower() in _TRUE and feature not in enable:
            enable.append(feature)
            details["features.enable"] = name
    if enable:
        flat["features.enable"] = enable
    fields = set(top_fields)
    for name, value in env.items():
        if not name.startswith("VERLCTL_") or name.startswith(RESERVED_ENV_PREFIXES):
            continue
        rest = name[len("VERLCTL_") :]
        path = _env_path(rest.split("__"))
        top = path.split(".")[0]
        if fields and top not in fields:
            close = difflib.get_close_matches(top, sorted(fields), n=1, cutoff=0.75)
            if close:
                raise SpecError(
                    f"unknown spec field {top!r} in environment variable {name}; did you mean VERLCTL_{close[0].upper()}?"
                )
            continue
        flat[path] = refuse_undecodable(value, f"environment variable {name} ({path})", path)
        details[path] = name
    return Layer.from_flat(Source.ENV, flat, details)


def _env_path(parts: list[str]) -> str:
    """``["ENV", "TASK_QUEUE_ENABLE"]`` -> ``env.TASK_QUEUE_ENABLE``: spec field names are lower-cased,
    keys below a dict field (``env``: variable names) keep their case."""
    out: list[str] = []
    for part in parts:
        out.append(part if out and out[0] in DICT_FIELDS else part.lower())
    return ".".join(out)


def _split(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return [p.strip() for p in str(value).split(",") if p.strip()]
