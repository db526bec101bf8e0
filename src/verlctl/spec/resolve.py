"""Load a spec from its sources, validate it, fill derived values, and record every value's origin."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr, ValidationError

from verlctl.errors import SpecError
from verlctl.spec.model import DISAGGREGATED_MODES, RunSpec
from verlctl.spec.sources import (
    Layer,
    Origin,
    Source,
    flatten,
    get_path,
    load_env_layer,
    load_yaml_layer,
    merge_layers,
    origin_index,
    set_path,
)

REQUIRED_PATHS = {
    "paths.model": "--set paths.model=DIR or MODEL_PATH",
    "paths.train_files": "--set paths.train_files=FILE or TRAIN_FILE",
    "paths.val_files": "--set paths.val_files=FILE or VAL_FILE",
}


@dataclass
class ResolvedSpec:
    """A validated spec with derived values filled in, and the origin of every leaf value."""

    spec: RunSpec
    origins: dict[str, Origin] = field(default_factory=dict)
    #: Paths a person answered (the wizard): a saved spec keeps them even when they equal a default.
    answered: set[str] = field(default_factory=set)
    #: Where each name of a merged feature list came from (``features.enable.offload`` -> the file), when
    #: ``--features``/``--disable`` added to the spec's lists (:func:`merge_feature_flags`).
    item_origins: dict[str, Origin] = field(default_factory=dict)

    def origin(self, path: str) -> Origin:
        if path in self.item_origins:
            return self.item_origins[path]
        if path in self.origins:
            return self.origins[path]
        # A leaf inside a list/dict field: use the nearest recorded parent.
        parts = path.split(".")
        while parts:
            parts.pop()
            p = ".".join(parts)
            if p in self.origins:
                return self.origins[p]
        return Origin(Source.DEFAULT)

    def explicit(self, path: str) -> bool:
        """True when the user gave the value (file, env, flag or typed)."""
        return self.origin(path).source in (Source.FILE, Source.ENV, Source.FLAG, Source.TYPED)

    def leaves(self) -> dict[str, Any]:
        """Every leaf value of the spec (secrets stay SecretStr)."""
        return flatten(_dump(self.spec))

    def missing_required(self) -> list[str]:
        return [p for p in REQUIRED_PATHS if get_path(_dump(self.spec), p) in (None, [], "")]

    def require_complete(self) -> None:
        missing = self.missing_required()
        if missing:
            path = missing[0]
            others = f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""
            raise SpecError(
                f"missing required path: set {path} in the spec file, or pass {REQUIRED_PATHS[path]}{others}",
                field=path,
            )


def _dump(model: BaseModel) -> dict[str, Any]:
    # python mode keeps SecretStr objects (never their value)
    return model.model_dump(mode="python")


def load_spec(
    file: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    detected: Mapping[str, Any] | None = None,
    typed: Mapping[str, Any] | None = None,
    flag_names: Mapping[str, str] | None = None,
    use_env: bool = True,
    recovery: Mapping[str, Any] | None = None,
    typed_names: Mapping[str, str] | None = None,
    file_text: str | None = None,
) -> ResolvedSpec:
    """Build the spec from every source. ``flags``/``detected``/``typed`` map dotted paths to values;
    ``file_text``: the content of ``file`` when the caller read it already."""
    layers: list[Layer] = []
    if detected:
        layers.append(Layer.from_flat(Source.DETECTED, detected))
    if file is not None:
        layer = load_yaml_layer(file, file_text)
        refuse_secrets_in_file(layer)
        layers.append(layer)
    if use_env:
        layers.append(load_env_layer(environ, RunSpec.model_fields.keys()))
    items: dict[str, Origin] = {}
    if flags:
        flag_layer = Layer.from_flat(Source.FLAG, flags, dict(flag_names or {}))
        items = merge_feature_flags(layers, flag_layer)
        layers.append(flag_layer)
    if typed:
        layers.append(Layer.from_flat(Source.TYPED, typed, dict(typed_names or {})))
    if recovery:
        layers.append(Layer.from_flat(Source.RECOVERY, recovery, {k: "OOM recovery" for k in recovery}))
    merged, origins = merge_layers(layers)
    spec = validate_tree(merged, origins)
    resolved = ResolvedSpec(spec, _full_origins(spec, origins), item_origins=items)
    derive(resolved)
    return resolved


FEATURE_LISTS = ("enable", "disable")


def merge_feature_flags(lower: list[Layer], flag: Layer) -> dict[str, Origin]:
    """``--features``/``--disable`` add names to the spec's ``features.enable``/``features.disable`` instead of
    replacing the lists: a feature the spec file (or the wizard's fix saved in it) turned on stays on. A name
    given by a flag leaves the other list (the flag wins). Rewrites ``flag``'s lists to the merged ones and
    returns where each name came from (``features.enable.NAME`` -> its origin), for the plan's reasons."""
    given = {kind: _names(get_path(flag.values, f"features.{kind}")) for kind in FEATURE_LISTS
             if get_path(flag.values, f"features.{kind}") is not None}
    if not given:
        return {}
    merged, origins = merge_layers(lower)
    lookup = origin_index(origins)
    lists: dict[str, list[str]] = {}
    items: dict[str, Origin] = {}
    for kind in FEATURE_LISTS:
        lists[kind] = _names(get_path(merged, f"features.{kind}"))
        below = lookup(f"features.{kind}") or Origin(Source.DEFAULT)
        items.update({f"features.{kind}.{n}": below for n in lists[kind]})
    for kind, names in given.items():
        other = FEATURE_LISTS[1 - FEATURE_LISTS.index(kind)]
        detail = flag.details.get(f"features.{kind}")
        also = {n.lower() for n in given.get(other, [])}  # both flags name it: the plan refuses that
        for name in names:
            kept = [n for n in lists[other] if n.lower() != name.lower() or n.lower() in also]
            if kept != lists[other]:  # the flag takes the name out of the spec's other list
                lists[other] = kept
                items = {p: o for p, o in items.items() if p.lower() != f"features.{other}.{name}".lower()}
                set_path(flag.values, f"features.{other}", kept)
                if detail:
                    flag.details.setdefault(f"features.{other}", detail)
            if name.lower() not in (n.lower() for n in lists[kind]):
                lists[kind].append(name)
            items[f"features.{kind}.{name}"] = Origin(Source.FLAG, detail)
        set_path(flag.values, f"features.{kind}", lists[kind])
    return items


def _names(value: Any) -> list[str]:
    """A feature list as given: a list, or comma-separated text (``--features offload,recompute``)."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [p.strip() for p in str(value).split(",") if p.strip()]


def validate_tree(tree: Mapping[str, Any], origins: Mapping[str, Origin] | None = None) -> RunSpec:
    try:
        return RunSpec.model_validate(tree)
    except ValidationError as exc:
        raise spec_error_from(exc, origins or {}) from None


def spec_error_from(exc: ValidationError, origins: Mapping[str, Origin]) -> SpecError:
    err = exc.errors()[0]
    loc = [str(p) for p in err["loc"]]
    # Drop pydantic's union/type-tag locators such as "list[str]" or "constrained-int".
    loc = [p for p in loc if not re.search(r"[\[\]()-]", p) or p.isdigit()]
    path = ".".join(p for p in loc if not p.isdigit())
    origin = _origin_for(path, origins)
    where = f" (from {origin})" if origin else ""
    if err["type"] == "extra_forbidden":
        parent, key = ".".join(loc[:-1]), loc[-1]
        known = _fields_at(parent)
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(known)}" if known else ""
        return SpecError(f"unknown key {key!r}{where}{hint}", field=path)
    msg = str(err["msg"])
    msg = re.sub(r"^Value error, ", "", msg)
    value = err.get("input")
    if _secret_bearing(path):
        # A key given at the wrong path (``--set logging.swanlab=KEY``) must not be echoed: drop the input,
        # also where a validator's own message quotes it.
        for text in {str(v) for v in _strings(value) if len(str(v)) >= 4}:
            msg = msg.replace(repr(text), "<value hidden>").replace(text, "<value hidden>")
        return SpecError(f"{msg} (value not shown: this part of the spec holds a secret){where}", field=path or None)
    if len(msg) > MAX_SHOWN * 3:  # a validator's message quoting a huge input
        msg = msg[: MAX_SHOWN * 3] + "…"
    if err["type"] in ("literal_error", "enum"):
        msg = f"invalid value {shown(value)}: {msg.lower()}"
    elif (
        value is not None
        and not isinstance(value, (dict, list, SecretStr))
        and "api_key" not in path
        and path not in URL_PATHS  # may carry a password in its user-info
        and repr(value) not in msg
    ):
        msg = f"{msg} (got {shown(value)})"
    return SpecError(f"{msg}{where}", field=path or None)


#: Spec paths that hold a URL, whose user-info may carry a password: an error there never shows the input.
URL_PATHS = ("container.proxy.http", "container.proxy.https", "logging.swanlab.host")

#: The most characters of an input value that an error message echoes.
MAX_SHOWN = 80


def shown(value: Any) -> str:
    """``repr(value)``, cut to MAX_SHOWN characters; built from a bounded part of the value only (a list of
    a million items, a 5000-digit number is never formatted whole)."""
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 8, 8
    r.maxstring = r.maxother = r.maxlong = MAX_SHOWN + 8
    if isinstance(value, str):
        text, size = repr(value[: MAX_SHOWN + 2]), f"{len(value)} characters"
        if len(value) <= MAX_SHOWN + 2 and len(text) <= MAX_SHOWN:
            return text
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 4 * MAX_SHOWN:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    else:
        try:
            text = r.repr(value)
        except Exception:  # noqa: BLE001 - a value whose repr fails: its type is enough
            text = f"<{type(value).__name__}>"
        many = isinstance(value, (list, tuple, dict, set)) and len(value) > r.maxlist
        size = f"{len(value)} items" if isinstance(value, (list, tuple, dict, set)) else f"{len(text)} characters"
        if len(text) <= MAX_SHOWN:
            return f"{text} ({size})" if many else text
    return f"{text[:MAX_SHOWN]}… ({size})"


#: Spec paths that hold a secret. An error at such a path or above it (a secret-bearing path, where a key
#: given at the wrong level lands: ``--set logging.swanlab=KEY``) never shows its input.
SECRET_PATHS = ("logging.swanlab.api_key",)
#: How to pass each secret instead of writing it into a spec file.
SECRET_ENV = {"logging.swanlab.api_key": "SWANLAB_API_KEY (or VERLCTL_LOGGING__SWANLAB__API_KEY)"}


def _secret_bearing(path: str) -> bool:
    return any(not path or path == secret or secret.startswith(path + ".") or path.startswith(secret + ".")
               for secret in SECRET_PATHS)


def _strings(value: Any) -> list[str]:
    if isinstance(value, SecretStr):
        return [value.get_secret_value()]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in _strings(v)]
    return [] if value is None or isinstance(value, bool) else [str(value)]


def refuse_secrets_in_file(layer: Layer) -> None:
    """A secret written into the spec file is refused (the file is shared, versioned, copied): one line,
    naming the field and how to pass the secret instead, never the value."""
    for path, how in SECRET_ENV.items():
        value = get_path(layer.values, path)
        if value is not None and _strings(value) != [""]:
            raise SpecError(
                f"a secret in the spec file {layer.details.get(path, '')} is refused (the file is not a safe "
                f"place for it): delete that line and pass the key in the environment, e.g. export {how}",
                field=path,
            )


def _origin_for(path: str, origins: Mapping[str, Origin]) -> Origin | None:
    if path in origins:
        return origins[path]
    for p, o in origins.items():
        if p.startswith(path + ".") or path.startswith(p + "."):
            return o
    return None


def _fields_at(parent: str) -> list[str]:
    model: type[BaseModel] = RunSpec
    for part in [p for p in parent.split(".") if p]:
        info = model.model_fields.get(part)
        ann = getattr(info, "annotation", None) if info else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            model = ann
        else:
            return []
    return sorted(model.model_fields)


def _full_origins(spec: RunSpec, origins: Mapping[str, Origin]) -> dict[str, Origin]:
    out: dict[str, Origin] = {}
    lookup = origin_index(origins)  # one linear index, not a scan of every origin per leaf
    for path in flatten(_dump(spec)):
        out[path] = lookup(path) or Origin(Source.DEFAULT)
    return out


# --------------------------------------------------------------------------------------------------
# Derived values


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.-")
    return s or "model"


def derive(resolved: ResolvedSpec) -> None:
    """Fill values left unset from the others, marking them ``derived``."""
    spec = resolved.spec

    def put(path: str, value: Any, why: str) -> None:
        obj: Any = spec
        parts = path.split(".")
        for p in parts[:-1]:
            obj = getattr(obj, p)
        setattr(obj, parts[-1], value)
        resolved.origins[path] = Origin(Source.DERIVED, why)

    t = spec.train
    if spec.mode in ("separate_async", "fully_async"):
        # verl asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size (separate_async) and
        # consumes parameter_sync_step mini-batches per step (fully_async): derive the missing one.
        if t.parameter_sync_step is None:
            if t.mini_batch_size is None:
                pss = 4 if t.train_batch_size % 4 == 0 else 1
                put("train.parameter_sync_step", pss,
                    "verl's default 4 (ppo_trainer.yaml trainer.v1.separate_async.parameter_sync_step)"
                    if pss == 4 else "1: verl's default 4 does not divide train.train_batch_size")
            elif t.train_batch_size % t.mini_batch_size == 0:
                put("train.parameter_sync_step", t.train_batch_size // t.mini_batch_size,
                    "= train.train_batch_size / train.mini_batch_size")
        sync_step = t.parameter_sync_step
        if t.mini_batch_size is None and sync_step and t.train_batch_size % sync_step == 0:
            put("train.mini_batch_size", t.train_batch_size // sync_step,
                "= train.train_batch_size / parameter_sync_step")
    if t.mini_batch_size is None:
        put("train.mini_batch_size", t.train_batch_size, "= train.train_batch_size")
    if t.rollout_tensor_parallel is None:
        put("train.rollout_tensor_parallel", t.tensor_parallel, "= train.tensor_parallel")
    if spec.mode in DISAGGREGATED_MODES:
        n = len(spec.cluster.devices)
        if t.rollout_nodes is not None:  # whole-node split: each side uses all devices of its nodes
            if t.trainer_devices is None:
                put("train.trainer_devices", n, "all of cluster.devices (rollout_nodes: whole-node split)")
            if t.rollout_devices is None:
                put("train.rollout_devices", n, "all of cluster.devices (rollout_nodes: whole-node split)")
        elif t.trainer_devices is None and t.rollout_devices is None:
            put("train.trainer_devices", max(1, n // 2), "half of cluster.devices")
            put("train.rollout_devices", max(1, n - n // 2), "the other half of cluster.devices")
        elif t.trainer_devices is None and t.rollout_devices is not None:
            put("train.trainer_devices", max(1, n - t.rollout_devices), "cluster.devices - rollout_devices")
        elif t.rollout_devices is None and t.trainer_devices is not None:
            put("train.rollout_devices", max(1, n - t.trainer_devices), "cluster.devices - trainer_devices")
    if spec.logging.experiment is None:
        model = Path(spec.paths.model).name if spec.paths.model else "model"
        put(
            "logging.experiment",
            f"{spec.algorithm}_{_slug(model)}_{spec.strategy}",
            "<algorithm>_<model dir name>_<strategy>",
        )
    if spec.paths.checkpoints is None or spec.paths.logs is None:
        # Host directories (mounted at the same path), never the container's own file system: removing the
        # container must not remove the checkpoints OOM recovery resumes from. verl's own default layout
        # (trainer.default_local_dir: checkpoints/${project_name}/${experiment_name}, relative to the
        # directory it runs in), made absolute on the host.
        base = run_base_dir()
        tail = f"{spec.logging.project}/{spec.logging.experiment}"
        # Two users launching one experiment from one directory must not share checkpoints: a default that
        # another user's run already made gets this user's name (review A5).
        suffix, why = _foreign_default(f"{base}/checkpoints/{tail}", f"{base}/logs/{tail}")
        if spec.paths.checkpoints is None:
            put("paths.checkpoints", f"{base}/checkpoints/{tail}{suffix}",
                f"<current directory {base}>/checkpoints/<project>/<experiment>{why}")
        if spec.paths.logs is None:
            put("paths.logs", f"{base}/logs/{tail}{suffix}",
                f"<current directory {base}>/logs/<project>/<experiment>{why}")
    if spec.cluster.master_addr is None and spec.cluster.nodes:
        put("cluster.master_addr", spec.cluster.nodes[0], "the first node")
    sw = spec.logging.swanlab
    if sw.enabled is None:
        put("logging.swanlab.enabled", sw.host is not None, "on when a SwanLab host is set")
    if sw.log_dir is None:
        put("logging.swanlab.log_dir", f"{(spec.paths.logs or '').rstrip('/')}/swanlog", "<paths.logs>/swanlog")


def _foreign_default(*paths: str) -> tuple[str, str]:
    """("-<user>", why) when one of the default directories exists and belongs to another user, else ("", "")."""
    me = os.geteuid()
    for path in paths:
        try:
            owner = os.stat(path).st_uid
        except OSError:
            continue
        if owner != me:
            try:
                import pwd

                user = pwd.getpwuid(me).pw_name
            except (KeyError, ImportError):
                user = f"uid{me}"
            return f"-{user}", f"-<user> ({path} belongs to uid {owner})"
    return "", ""


def run_base_dir() -> str:
    """The directory the default checkpoint and log directories live under: the current directory."""
    try:
        cwd = os.getcwd()
    except OSError as exc:
        raise SpecError(
            f"the current directory is not usable ({exc.strerror or exc}), so the default checkpoint and log "
            "directories cannot be placed under it",
            field="paths.checkpoints",
            hint="cd to a directory on the host, or set paths.checkpoints and paths.logs",
        ) from None
    return cwd.rstrip("/") or ""


def mask_secret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return "**********" if value.get_secret_value() else ""
    return value
