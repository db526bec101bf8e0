"""The five rounds of the first seed, in its order and with its defaults.

Each round is a function of a :class:`RoundContext` (the :class:`~verlctl.wizard.answers.Answers`, the
:class:`~verlctl.detect.machine.MachineState` and the :class:`~verlctl.wizard.prompter.Prompter`).
A value given by ``-c`` file, environment or flag is shown with its source and not asked (unless
``--ask-all``); every other question is pre-filled with the current value (detected, default or derived)
and every answer is checked before it is accepted.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr
from rich.markup import escape

from verlctl.checks.findings import Severity
from verlctl.detect.datasets import DatasetInfo
from verlctl.detect.machine import MachineState
from verlctl.errors import SpecError
from verlctl.spec.model import DEFAULT_IMAGE
from verlctl.wizard import machine_view as mv
from verlctl.wizard.answers import Answers, reason_of
from verlctl.wizard.prompter import Heading, Option, Prompter

TYPE = "__type__"  # the "type a value" entry of a list

_HOST_RE = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
_PROXY_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^\s/]+(/\S*)?$")
_IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]*$")
NO_PROXY_WORDS = {"none", "无", "no", "-"}


@dataclass
class RoundContext:
    answers: Answers
    machine: MachineState
    prompter: Prompter
    console: Any
    version_image: str | None = None  # the image whose installed verl pre-filled verl_version

    def header(self, number: int, title: str) -> None:
        self.console.print(f"\n[bold]Round {number}/5 — {title}[/bold]", highlight=False)

    def show_given(self, label: str, path: str) -> None:
        from verlctl.report import display

        a = self.answers
        value, origin = escape(display(a.value(path))), escape(str(a.current.origin(path)))
        self.console.print(f"  [green]✓[/green] {label}: {value}  [dim](given: {origin})[/dim]", highlight=False)

    def note(self, text: str) -> None:
        self.console.print(f"  [dim]{escape(text)}[/dim]", highlight=False)


def _first(*checks: Callable[[str], str | None]) -> Callable[[str], str | None]:
    def run(text: str) -> str | None:
        for c in checks:
            reason = c(text)
            if reason is not None:
                return reason
        return None

    return run


def _csv(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


# ============================================================================ Round 1: basic


def _check_host(text: str) -> str | None:
    try:
        ipaddress.ip_address(text)
        return None
    except ValueError:
        pass
    return None if _HOST_RE.fullmatch(text) else f"{text!r} is not an IP address or host name"


def same_but_case(path: str) -> str | None:
    """The existing path that differs from ``path`` only in letter case (e.g. .../Qwen3-8b -> .../Qwen3-8B),
    component by component; None when there is none or ``path`` exists."""
    if not path.startswith("/") or os.path.exists(path):
        return None
    current = "/"
    for part in [p for p in path.split("/") if p]:
        candidate = os.path.join(current, part)
        if os.path.exists(candidate):
            current = candidate
            continue
        try:
            matches = [e for e in os.listdir(current) if e.lower() == part.lower()]
        except OSError:
            return None
        if len(matches) != 1:
            return None
        current = os.path.join(current, matches[0])
    return current if current != path and os.path.exists(current) else None


def _did_you_mean(check: Callable[[str], str | None]) -> Callable[[str], str | None]:
    """``check``, with "did you mean <the same path in other letter case>?" added to a "does not exist"."""

    def run(text: str) -> str | None:
        reason = check(text)
        if reason and "does not exist" in reason:
            other = same_but_case(text.strip())
            if other:
                return f"{reason}; did you mean {other}?"
        return reason

    return run


def _check_model_dir(a: Answers) -> Callable[[str], str | None]:
    """The model path checks of ``verlctl check`` (exists, a directory, config.json, weights, tokenizer)."""

    def check(text: str) -> str | None:
        from verlctl.checks.model_checks import check_model_path
        from verlctl.detect.models import inspect_model

        path = text.strip()
        if not path:
            return "a model path is required"
        if not path.startswith("/"):
            return "use an absolute path (it is mounted at the same path in the container)"
        if a.model_for(path) is not None:
            return None
        try:
            spec = a.resolve_for_checks({"paths.model": path}).spec
        except SpecError as exc:
            return reason_of(exc)
        errors = [f for f in check_model_path(spec, inspect_model(path)) if f.severity is Severity.ERROR]
        return errors[0].message if errors else None

    return check


@functools.lru_cache(maxsize=64)
def _dataset_check(field: str, path: str, stamp: tuple[float, int]) -> Any:
    from verlctl.detect.check_probes import check_dataset_file

    return check_dataset_file(field, path, timeout=10.0)


def dataset_check(field: str, path: str) -> Any:
    """``verlctl check``'s probe of one dataset file (file, parquet magic, verl schema), cached per mtime."""
    try:
        st = os.stat(path)
        stamp = (st.st_mtime, st.st_size)
    except OSError:
        stamp = (0.0, -1)
    return _dataset_check(field, path, stamp)


def parquet_info(path: str, field: str = "paths.train_files") -> DatasetInfo | None:
    schema = dataset_check(field, path).verl_schema
    return schema if isinstance(schema, DatasetInfo) else None


def _check_parquet(a: Answers, field: str) -> Callable[[str], str | None]:
    def check(text: str) -> str | None:
        from verlctl.checks.dataset_checks import check_datasets

        path = text.strip()
        if not path:
            return "a parquet file is required"
        if not path.startswith("/"):
            return "use an absolute path (it is mounted at the same path in the container)"
        errors = [f for f in check_datasets([dataset_check(field, path)]) if f.severity is Severity.ERROR]
        if errors:
            return errors[0].message
        return a.check({field: [path]})

    return check


def _check_abs_dir(text: str) -> str | None:
    path = text.strip()
    if not path.startswith("/"):
        return "use an absolute path"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{path} exists and is not a directory"
    return None


ALGORITHMS = (
    ("dapo", "DAPO  (verl's DAPO recipe: clip-higher, dynamic sampling, token-level loss)"),
    ("grpo", "GRPO  (group-relative advantages, no critic)"),
)
STRATEGIES = (
    ("megatron", "megatron  (Megatron-LM: tensor + pipeline parallel; large models)"),
    ("fsdp", "fsdp  (PyTorch FSDP: sharded data parallel, tensor parallel only in the rollout)"),
    ("fsdp2", "fsdp2  (PyTorch FSDP2, per-parameter sharding)"),
)


def _read_image_version(ctx: RoundContext, image: str | None) -> str | None:
    """The verl installed in ``image`` when it is a local image (read once per image); it pre-fills
    verl_version (source ``detected``) unless the version was given or typed."""
    a = ctx.answers
    if not image or a.value("container.runtime") == "host" or image not in mv.image_tags(ctx.machine):
        return None
    ctx.version_image = image
    with ctx.console.status(f"reading the verl version installed in {image} …"):
        installed = mv.image_verl_version(image)
    if installed is None:
        ctx.note(f"the verl version in {image} could not be read (no verl distribution, or no answer in time)")
        return None
    version = mv.supported_version(installed)
    if version is None:
        ctx.note(f"{image} has verl {installed}, a version verlctl does not target ("
                 + ", ".join(_supported()) + ")")
    elif not a.given("verl_version"):
        a.add_detected("verl_version", version)
    return installed


def _supported() -> tuple[str, ...]:
    from verlctl import SUPPORTED_VERL_VERSIONS

    return SUPPORTED_VERL_VERSIONS


def _ask_version(ctx: RoundContext, installed: str | None, image: str | None) -> None:
    from verlctl.verl.modes import version_problem

    a, p = ctx.answers, ctx.prompter
    if not a.ask("verl_version"):
        ctx.show_given("verl version", "verl_version")
        return
    here = mv.supported_version(installed)
    mode = str(a.value("mode"))
    opts: list[Option | Heading] = [
        Option(v + (f"  (installed in {image})" if v == here else ""), v, disabled=version_problem(mode, v))
        for v in _supported()
    ]
    opts.append(Option("auto  (the version installed in the container at launch)", "auto"))
    cur = str(a.value("verl_version"))
    default = cur if cur == "auto" or version_problem(mode, cur) is None else "auto"
    a.set("verl_version", p.select("verl version", opts, default=default))


def _ask_run(ctx: RoundContext) -> None:
    """What runs (verl version, algorithm, strategy, mode): the structural questions first, pre-filled from the
    image when its verl can be read."""
    from verlctl.verl.modes import MODES, version_problem

    a, p = ctx.answers, ctx.prompter
    image = a.value("container.image")
    installed = _read_image_version(ctx, image) if a.ask("verl_version") else None
    _ask_version(ctx, installed, image)
    for path, label, choices in (("algorithm", "Algorithm", ALGORITHMS), ("strategy", "Training backend (strategy)",
                                                                          STRATEGIES)):
        if a.ask(path):
            a.set(path, p.select(label, [Option(t, v) for v, t in choices], default=str(a.value(path))))
        else:
            ctx.show_given(label.lower(), path)
    if a.ask("mode"):
        version = str(a.value("verl_version"))
        planned = version if version != "auto" else None
        mopts: list[Option | Heading] = [
            Option(f"{m.name}  ({m.summary}" + ("; trainer and rollout on separate devices" if m.disaggregated
                                                 else "") + ")", m.name,
                   disabled=version_problem(m.name, planned) if planned else None)
            for m in MODES.values()
        ]
        cur = str(a.value("mode"))
        a.set("mode", p.select("Mode", mopts, default=cur if not planned or not version_problem(cur, planned)
                               else "sync"))
    else:
        ctx.show_given("mode", "mode")


def _image_version_again(ctx: RoundContext) -> None:
    """After the image is chosen: when it is another local image than the one read in round 1 and its verl is
    not the planned version, say so and ask the version again (pre-filled with the image's)."""
    a = ctx.answers
    image = a.value("container.image")
    if image == ctx.version_image:
        return
    before = a.value("verl_version")
    installed = _read_image_version(ctx, image)
    here = mv.supported_version(installed)
    if here is None or before in ("auto", here):
        return
    ctx.note(f"{image} has verl {installed}; the run was planned for verl {before}")
    if a.ask("verl_version"):
        a.forget("verl_version")  # the image's version is the pre-fill now
        _ask_version(ctx, installed, image)


def round_basic(ctx: RoundContext) -> None:
    a, p = ctx.answers, ctx.prompter
    ctx.header(1, "Basic: what runs, nodes, devices, model, data, checkpoints")
    _ask_run(ctx)

    # Single or multi-node.
    if a.ask("cluster.nodes"):
        nodes: list[str] = list(a.value("cluster.nodes") or [])
        how = p.select(
            "Single node or multi-node?",
            [Option("single node (this machine)", "single"),
             Option("multi-node (a Ray cluster over several machines)", "multi")],
            default="multi" if nodes else "single",
        )
        if how == "single":
            a.set("cluster.nodes", [])
        else:
            def check_nodes(text: str) -> str | None:
                items = _csv(text)
                if len(items) < 2:
                    return "list at least two node addresses, separated by commas"
                for item in items:
                    reason = _check_host(item)
                    if reason:
                        return reason
                return a.check({"cluster.nodes": items})

            here = None
            from verlctl.detect.network import NetworkInfo

            if isinstance(ctx.machine.network, NetworkInfo):
                here = ctx.machine.network.primary_ipv4
            items = _csv(p.text("Node addresses (comma-separated)", default=",".join(nodes or ([here] if here else [])),
                                check=check_nodes))
            current_head = a.value("cluster.master_addr")
            head = p.select("Head node (runs the Ray head)", [Option(n, n) for n in items],
                            default=current_head if current_head in items else items[0])
            ordered = [head] + [n for n in items if n != head]
            a.set_many({"cluster.nodes": ordered, "cluster.master_addr": head})
            ctx.note("`verlctl launch` starts single-node runs; for several nodes save the spec and run "
                     "`verlctl plan -c FILE -o DIR`, then start_verl.sh on every node")
    else:
        ctx.show_given("nodes", "cluster.nodes")

    # Devices.
    if a.ask("cluster.devices"):
        rows = mv.device_rows(ctx.machine)
        current: list[int] = list(a.value("cluster.devices"))
        if rows:
            # A busy or unhealthy device (maybe a colleague's job) is never pre-selected: choosing it is explicit.
            opts: list[Option | Heading] = [
                Option(r.label + (f"  [{r.problem}]" if r.problem else ""), str(r.id),
                       checked=r.id in current and r.free)
                for r in rows
            ]
            if not any(r.free for r in rows):
                ctx.note(f"no {rows[0].kind} is free (each is busy or unhealthy, marked below): none is "
                         "pre-selected; select the ones to share only if you know whose work runs there")
            elif any(not r.free and r.id in current for r in rows):
                ctx.note("busy or unhealthy devices are not pre-selected (marked below)")
            chosen = p.checkbox(
                f"{rows[0].kind}s to train on", opts,
                check=lambda sel: None if sel else "choose at least one device",
            )
            ids = [int(v) for v in chosen]
            a.set("cluster.devices", ids if sorted(ids) != sorted(current) else current)
            from verlctl.checks.devices import ALLOW_BUSY, busy_devices, busy_pids, check_devices
            from verlctl.runtime.holders import describe_holders

            spec_now = a.current.spec
            shared = sorted(busy_devices(spec_now, ctx.machine))
            if shared and not spec_now.cluster.allow_busy_devices:
                # Selecting a busy device (never pre-selected) is the explicit opt-in check and launch ask for.
                a.set_many({ALLOW_BUSY: True}, label="your choice of busy devices")
                ctx.note(f"{ALLOW_BUSY}: true saved (you chose busy device(s) {', '.join(map(str, shared))}): "
                         "the run shares them; the memory fit counts only their free memory")
                spec_now = a.current.spec
            for f in check_devices(spec_now, ctx.machine, describe_holders(busy_pids(spec_now, ctx.machine))):
                ctx.note(f"{f.severity.value}: {f.message}")
        else:
            ctx.note("no NPU/GPU was detected on this machine: type the device ids")
            text = p.text("Device ids (comma-separated)", default=",".join(map(str, current)),
                          check=lambda s: a.check({"cluster.devices": s}))
            a.set("cluster.devices", [int(x) for x in _csv(text)])
    else:
        ctx.show_given("devices", "cluster.devices")

    _ask_split(ctx)

    # Model.
    if a.ask("paths.model"):
        current_model = a.value("paths.model")
        found = mv.models(ctx.machine)
        path: str | None = None
        if found:
            mopts: list[Option | Heading] = [
                Option(mv.model_title(m), f"m{i}",
                       disabled=None if m.is_model else "incomplete: " + ("; ".join(m.missing) or "?"))
                for i, m in enumerate(found)
            ]
            mopts.append(Option("Type a path…", TYPE))
            default = next((f"m{i}" for i, m in enumerate(found) if m.path == current_model and m.is_model),
                           TYPE if current_model else None)
            pick = p.select("Model (a Hugging Face model directory)", mopts, default=default)
            if pick != TYPE:
                path = found[int(pick[1:])].path
        if path is None:
            path = p.text("Model path", default=current_model or "", check=_did_you_mean(_check_model_dir(a))).strip()
        a.set("paths.model", path)
        info = a.model_for(path)
        if info is not None:
            ctx.note(f"model: {mv.model_title(info)}")
    else:
        ctx.show_given("model", "paths.model")

    _ask_dataset(ctx, "paths.train_files", "Training data (parquet)")
    _ask_dataset(ctx, "paths.val_files", "Validation data (parquet)")

    # Checkpoints.
    if a.ask("paths.checkpoints"):
        cur = a.value("paths.checkpoints") or ""
        if len(a.value("cluster.nodes") or []) > 1:
            ctx.note("multi-node: put the checkpoints on storage every node mounts at the same path (e.g. NFS), "
                     "or resuming after a restart will not work (`verlctl check` and `launch` refuse local storage)")
        else:
            ctx.note("a host directory, mounted into the container at the same path: removing the container "
                     "keeps the checkpoints")
        text = p.text("Checkpoint directory", default=cur,
                      check=_first(_check_abs_dir, lambda s: a.check({"paths.checkpoints": s.strip()}))).strip()
        a.set("paths.checkpoints", text)
    else:
        ctx.show_given("checkpoints", "paths.checkpoints")


def disaggregated(mode: str) -> bool:
    """Whether ``mode`` runs training and rollout on separate devices (a trainer/rollout split to choose).
    verl knowledge's own ``is_disaggregated`` predicate when it has one (newer async modes), else the
    one-step-off-policy mode (the only such mode this verl knowledge names)."""
    import importlib

    for name in ("verlctl.verl.modes", "verlctl.verl.base", "verlctl.verl.table"):
        try:
            predicate = getattr(importlib.import_module(name), "is_disaggregated", None)
        except ImportError:
            continue
        if callable(predicate):
            return bool(predicate(mode))
    from verlctl.verl.base import OSO

    return mode in OSO


def _ask_split(ctx: RoundContext) -> None:
    """U7: the trainer/rollout split of a disaggregated mode, per node (pre-filled half/half)."""
    a, p = ctx.answers, ctx.prompter
    if not disaggregated(str(a.value("mode"))) or a.value("train.rollout_nodes"):
        return
    if not a.ask("train.trainer_devices", "train.rollout_devices"):
        ctx.show_given("training devices per node", "train.trainer_devices")
        ctx.show_given("rollout devices per node", "train.rollout_devices")
        return
    n = len(a.value("cluster.devices") or [])
    if n < 2:
        ctx.note(f"{a.value('mode')} needs at least two devices per node (training and rollout apart)")
        return

    def check(text: str) -> str | None:
        t = text.strip()
        if not re.fullmatch(r"[0-9]+", t) or not 0 < int(t) < n:
            return f"type a whole number from 1 to {n - 1}: the other devices of the {n} run the rollout"
        return a.check({"train.trainer_devices": int(t), "train.rollout_devices": n - int(t)})

    cur = a.value("train.trainer_devices") or max(1, n // 2)
    text = p.text(f"Training devices per node (of {n}; the others run the rollout)", default=str(cur), check=check)
    trainer = int(text.strip())
    a.set_many({"train.trainer_devices": trainer, "train.rollout_devices": n - trainer})
    ctx.note(f"split per node: {trainer} training + {n - trainer} rollout device(s)")


def _ask_dataset(ctx: RoundContext, key: str, message: str) -> None:
    a, p = ctx.answers, ctx.prompter
    if not a.ask(key):
        ctx.show_given(message.split(" (")[0].lower(), key)
        return
    current = a.value(key) or []
    cur = current[0] if current else ""
    files = mv.datasets(ctx.machine)
    path: str | None = None
    if files:
        opts: list[Option | Heading] = []
        for i, (fp, info) in enumerate(files):
            opts.append(Option(f"{fp}  ({mv.dataset_summary(info)})", f"d{i}",
                               description=mv.dataset_description(info), disabled=mv.dataset_problem(info)))
        opts.append(Option("Type a path…", TYPE))
        usable = [i for i, (fp, info) in enumerate(files) if mv.dataset_problem(info) is None]
        default = next((f"d{i}" for i in usable if files[i][0] == cur), TYPE if cur or not usable else f"d{usable[0]}")
        pick = p.select(message, opts, default=default)
        if pick != TYPE:
            path = files[int(pick[1:])][0]
    if path is None:
        path = p.text(f"{message}: file path", default=cur, check=_did_you_mean(_check_parquet(a, key))).strip()
        ctx.note(f"{path}: {mv.dataset_summary(parquet_info(path, key))}")
    a.set(key, [path] if [path] != current else current)


# ============================================================================ Round 2: container


def _check_proxy(text: str) -> str | None:
    t = text.strip()
    if t.lower() in NO_PROXY_WORDS or not t:
        return None
    return None if _PROXY_RE.fullmatch(t) else f"{t!r} is not a proxy URL (e.g. http://proxy:8080), or 'none'"


def _proxy_value(text: str) -> str | None:
    t = text.strip()
    return None if not t or t.lower() in NO_PROXY_WORDS else t


def round_container(ctx: RoundContext) -> None:
    a, p = ctx.answers, ctx.prompter
    ctx.header(2, "Container and image")
    docker = mv.docker(ctx.machine)
    if a.value("container.runtime") == "host":
        ctx.show_given("runtime", "container.runtime")
    else:
        if docker is None and ctx.machine.docker is not None:
            ctx.note(f"docker: {getattr(ctx.machine.docker, 'reason', 'unavailable')}")
        existing = mv.containers(ctx.machine)
        names = {c.name: c for c in existing}
        reuse = False
        if a.ask("container.name"):
            current = a.value("container.name")
            # The default is a new container created for this run; reusing one (maybe a colleague's) is an
            # explicit choice that shows who created it and what it mounts.
            opts: list[Option | Heading] = [Option("Create a new container for this run", "new")]
            opts += [Option(mv.container_title(c), f"c:{c.name}", disabled=_unusable(a, c)) for c in existing]
            pick = p.select("Container: reuse one or create a new one", opts, default="new")
            if pick.startswith("c:"):
                chosen = names[pick[2:]]
                values: dict[str, Any] = {"container.name": chosen.name}
                if chosen.image and not a.given("container.image"):
                    values["container.image"] = chosen.image
                a.set_many(values)
                reuse = True
                ctx.note(f"reusing container {chosen.name}: {mv.container_owner(chosen)}; "
                         f"{mv.container_mounts_text(chosen)}")
            else:
                default_name = current if current not in names else "verlctl"
                n = 2
                while default_name in names:
                    default_name = f"verlctl-{n}"
                    n += 1

                def check_name(text: str) -> str | None:
                    t = text.strip()
                    if t in names:
                        return f"a container named {t} exists: choose it in the list to reuse it, or another name"
                    return a.check({"container.name": t})

                a.set("container.name", p.text("Name of the new container", default=default_name,
                                               check=check_name).strip())
        else:
            ctx.show_given("container", "container.name")
            reuse = a.value("container.name") in names
            if reuse:
                chosen = names[a.value("container.name")]
                ctx.note(f"container {chosen.name} exists: {mv.container_owner(chosen)}; "
                         f"{mv.container_mounts_text(chosen)}")
        if reuse:
            missing = _unusable(a, names[a.value("container.name")])
            if missing:
                ctx.note(f"launch will refuse this container: it {missing}; mounts cannot be added to an existing "
                         "container, so use a new one")
        elif a.ask("container.image", "container.pull"):
            _ask_image(ctx)
        else:
            ctx.show_given("image", "container.image")
        _image_version_again(ctx)

    # Proxy (seed 2: asked for a new container or network trouble; 'none' allowed).
    if a.ask("container.proxy.http"):
        cur = a.value("container.proxy.http") or "none"
        text = p.text("http_proxy inside the container ('none' for no proxy)", default=cur,
                      check=_first(_check_proxy, lambda s: a.check({"container.proxy.http": _proxy_value(s)})))
        a.set("container.proxy.http", _proxy_value(text))
    else:
        ctx.show_given("http_proxy", "container.proxy.http")
    if a.ask("container.proxy.https"):
        cur = a.value("container.proxy.https") or a.value("container.proxy.http") or "none"
        text = p.text("https_proxy inside the container ('none' for no proxy)", default=cur,
                      check=_first(_check_proxy, lambda s: a.check({"container.proxy.https": _proxy_value(s)})))
        a.set("container.proxy.https", _proxy_value(text))
    else:
        ctx.show_given("https_proxy", "container.proxy.https")
    if a.value("container.proxy.http") or a.value("container.proxy.https"):
        if a.ask("container.proxy.no_proxy"):
            cur = a.value("container.proxy.no_proxy") or default_no_proxy(a)
            text = p.text("no_proxy inside the container (hosts reached directly, comma-separated)", default=cur,
                          check=lambda s: a.check({"container.proxy.no_proxy": s.strip() or None}))
            a.set("container.proxy.no_proxy", ",".join(_csv(text)) or None)
        else:
            ctx.show_given("no_proxy", "container.proxy.no_proxy")


def default_no_proxy(a: Answers) -> str:
    """localhost, 127.0.0.1 and the run's nodes: reached directly, never through the proxy."""
    hosts = ["localhost", "127.0.0.1", *(a.value("cluster.nodes") or [])]
    return ",".join(dict.fromkeys(hosts))


def no_proxy_covers(no_proxy: str | None, host: str) -> bool:
    """Whether ``host`` bypasses the proxy with this no_proxy list (the rules of ``detect/reach.py``, which
    ``check`` and ``launch`` use when they try the SwanLab host)."""
    from verlctl.detect.reach import no_proxy_covers as covers

    return covers(no_proxy, host)


def _cover_swanlab_host(ctx: RoundContext) -> None:
    """With a proxy, the SwanLab host must be in no_proxy (U5): a LAN SwanLab through a corporate proxy fails."""
    from urllib.parse import urlsplit

    a = ctx.answers
    if not (a.value("container.proxy.http") or a.value("container.proxy.https")):
        return
    host = urlsplit(str(a.value("logging.swanlab.host") or "")).hostname
    no_proxy = a.value("container.proxy.no_proxy")
    if not host or no_proxy_covers(no_proxy, host):
        return
    a.set("container.proxy.no_proxy", ",".join([*_csv(no_proxy or default_no_proxy(a)), host]))
    ctx.note(f"added the SwanLab host {host} to no_proxy (container.proxy.no_proxy), so that it is not reached "
             "through the proxy")


def _unusable(a: Answers, c: Any) -> str | None:
    """Why an existing container cannot run this spec: a path it does not mount (mounts cannot be added)."""
    from pathlib import PurePosixPath

    from verlctl.runtime.containers import spec_mount_needs

    spec = a.resolve_for_checks().spec
    mounted = [PurePosixPath(m.split(":")[1]) for m in c.mounts if ":" in m]
    workdir = PurePosixPath(spec.container.workdir)
    for path, why, _ in spec_mount_needs(spec):
        pp = PurePosixPath(path)
        if pp == workdir or workdir in pp.parents or path.startswith("/verlctl-wizard/"):
            continue
        if not any(pp == t or t in pp.parents for t in mounted):
            return f"does not mount {why} ({path})"
    return None


def _ask_image(ctx: RoundContext) -> None:
    a, p = ctx.answers, ctx.prompter
    local = mv.image_tags(ctx.machine)
    current = a.value("container.image")
    # The default image (the seeds' verl image) comes first; the other local images follow, then a typed one.
    # It is Ascend's (910B): never the default on a GPU host, which must name its own.
    gpu = a.value("device") == "gpu"
    opts: list[Option | Heading] = []
    if not gpu:
        opts.append(Option(f"{DEFAULT_IMAGE}  (local; the default)", f"i:{DEFAULT_IMAGE}") if DEFAULT_IMAGE in local
                    else Option(f"Pull the default: {DEFAULT_IMAGE}", "pull"))
    opts += [Option(f"{tag}  (local)", f"i:{tag}") for tag in local if gpu or tag != DEFAULT_IMAGE]
    opts.append(Option("Type an image reference…", TYPE))
    if gpu and current == DEFAULT_IMAGE:
        ctx.note("a GPU host: the default image is Ascend's; give an image with verl for your GPUs "
                 "(e.g. one of verl's own verlai/verl images)")
        current = ""
    if current in local:
        default = f"i:{current}"
    elif current == DEFAULT_IMAGE:
        default = "pull" if DEFAULT_IMAGE not in local else f"i:{current}"
    else:
        default = TYPE
    pick = p.select("Image for the new container", opts, default=default)
    if pick == "pull":
        a.set_many({"container.image": DEFAULT_IMAGE, "container.pull": True})
        ctx.note(f"the image is pulled after you confirm: {DEFAULT_IMAGE}")
    elif pick.startswith("i:"):
        a.set("container.image", pick[2:])
    else:
        def check_image(text: str) -> str | None:
            t = text.strip()
            if not t:
                return "an image reference is required"
            if not _IMAGE_RE.fullmatch(t):
                return f"{t!r} is not an image reference (e.g. quay.io/ascend/verl:TAG)"
            return a.check({"container.image": t})

        image = p.text("Image reference", default=current if current not in local else "", check=check_image).strip()
        values: dict[str, Any] = {"container.image": image}
        if image not in local:
            values["container.pull"] = p.confirm(f"{image} is not a local image: pull it after you confirm?",
                                                 default=True)
        a.set_many(values)


# ============================================================================ Round 3: SwanLab


def _has_key(a: Answers) -> bool:
    key = a.value("logging.swanlab.api_key")
    return isinstance(key, SecretStr) and bool(key.get_secret_value())


def round_swanlab(ctx: RoundContext) -> None:
    a, p = ctx.answers, ctx.prompter
    ctx.header(3, "SwanLab")
    host_given = a.given("logging.swanlab.host")
    if a.ask("logging.swanlab.enabled") and (a.ask_all or not host_given):
        on = p.confirm("Log to SwanLab?", default=bool(a.value("logging.swanlab.enabled")))
        a.set("logging.swanlab.enabled", on)
    else:
        ctx.show_given("SwanLab", "logging.swanlab.enabled" if a.given("logging.swanlab.enabled")
                       else "logging.swanlab.host")
    if not a.value("logging.swanlab.enabled"):
        return

    if a.ask("logging.swanlab.host"):
        def check_host(text: str) -> str | None:
            if not text.strip():
                return "the SwanLab host is required (e.g. http://192.168.1.100:8000)"
            return a.check({"logging.swanlab.host": text.strip()})

        a.set("logging.swanlab.host", p.text("SwanLab host (e.g. http://192.168.1.100:8000)",
                                             default=a.value("logging.swanlab.host") or "", check=check_host).strip())
    else:
        ctx.show_given("host", "logging.swanlab.host")
    _cover_swanlab_host(ctx)

    if a.ask("logging.swanlab.mode"):
        mode = p.select("SwanLab mode", [Option("cloud (log to the SwanLab server)", "cloud"),
                                         Option("local (swanlab's local dashboard)", "local"),
                                         Option("offline (write logs only)", "offline")],
                        default=a.value("logging.swanlab.mode"))
        a.set("logging.swanlab.mode", mode)
    else:
        ctx.show_given("mode", "logging.swanlab.mode")

    if a.value("logging.swanlab.mode") == "cloud":
        have = _has_key(a)
        if a.ask("logging.swanlab.api_key") or not have:
            def check_key(text: str) -> str | None:
                if not text:
                    return None if have else "the API key is required for cloud mode"
                if any(c.isspace() for c in text):
                    return "the API key must not contain spaces"
                return None

            hint = ("Enter keeps the key already set" if have
                    else "required for cloud mode; masked; kept out of the spec file")
            key = p.secret("SwanLab API key", check=check_key, instruction=f"({hint})")
            if key:
                a.set("logging.swanlab.api_key", key)
        else:
            ctx.show_given("API key", "logging.swanlab.api_key")

    optional = {"logging.swanlab.workspace"}  # empty: SwanLab's default, the user's own workspace
    questions: tuple[tuple[str, str, str | None], ...] = (
        ("logging.swanlab.workspace", "SwanLab workspace", "(empty: your own workspace)"),
        ("logging.swanlab.log_dir", "SwanLab log directory", None),
        ("logging.project", "Project name", None),
    )
    for path, label, instruction in questions:
        if a.ask(path):
            def check(text: str, path: str = path) -> str | None:
                if not text.strip():
                    return None if path in optional else "a value is required"
                return a.check({path: text.strip()})

            answer = p.text(label, default=str(a.value(path) or ""), check=check, instruction=instruction).strip()
            a.set(path, answer or None)
        else:
            ctx.show_given(label.lower(), path)


# ============================================================================ Round 4: features

FEATURE_FIELDS = ("features", "features.mask", "features.enable", "features.disable", "features.vpp_size", "device",
                  "strategy", "train.pipeline_parallel")


def _feature_states(a: Answers, values: dict[str, Any] | None = None) -> dict[str, Any]:
    from verlctl.verl.compose import build_command

    resolved = a.resolve_for_checks(values)
    return build_command(resolved).features


def _feature_description(name: str) -> str:
    from verlctl.verl.features import BY_NAME, CONFLICTS

    f = BY_NAME[name]
    parts = [f.description]
    parts += [f"Needs: {req.message}." for req in f.requires]
    parts += [f"Together with {c.features[1] if c.features[0] == name else c.features[0]}: {c.notice}."
              for c in CONFLICTS if name in c.features]
    return textwrap.fill(" ".join(parts), width=100, subsequent_indent="  ")


def _explain_features(ctx: RoundContext) -> None:
    from verlctl.checks.findings import Severity

    a = ctx.answers
    states = _feature_states(a)
    on = [n for n, s in states.items() if s.on and s.applicable]
    off = [n for n, s in states.items() if not s.on and s.applicable]
    ctx.console.print(f"  features on: {', '.join(on) or 'none'}; off: {', '.join(off) or 'none'}", highlight=False)
    for f in a.findings():
        if f.field in ("features",) and f.severity is not Severity.ERROR:
            ctx.console.print(f"  [yellow]note:[/yellow] {escape(f.message)}", highlight=False)


def round_features(ctx: RoundContext) -> None:
    from verlctl.verl.features import BY_BIT, FEATURES, MASK_BITS, Category, mask_for

    a, p = ctx.answers, ctx.prompter
    ctx.header(4, "Acceleration features")
    if not a.ask("features.mask", "features.enable", "features.disable"):
        for path in ("features.mask", "features.enable", "features.disable"):
            if a.given(path):
                ctx.show_given(path.split(".")[1], path)
        _explain_features(ctx)
        return
    states = _feature_states(a)
    named = bool(a.value("features.enable") or a.value("features.disable"))
    how = p.select("Choose the features by", [
        Option("a 7-bit mask (RmvPad DynBSZ Offload PfxCache Recompute SwapOpt VPP)", "mask"),
        Option("name, from a checklist grouped as performance / memory / optional", "names"),
    ], default="names" if named and a.value("features.mask") is None else "mask")

    if how == "mask":
        ctx.console.print("  bit  feature              category     description", highlight=False)
        for i in range(MASK_BITS):
            f = BY_BIT[i]
            ctx.console.print(f"  {i:>3}  {f.name:<20} {f.category.value:<12} {f.description}", highlight=False)
        prefill = a.value("features.mask") or mask_for({n: s.on for n, s in states.items()})

        def check_mask(text: str) -> str | None:
            t = text.strip()
            if len(t) != MASK_BITS or any(c not in "01" for c in t):
                return f"{t!r} is not a mask: type exactly {MASK_BITS} characters 0/1, leftmost = bit 0"
            return a.check({"features.mask": t}, FEATURE_FIELDS)

        mask = p.text("Feature mask", default=prefill, check=check_mask,
                      instruction="(7 × 0/1, leftmost = bit 0)").strip()
        named_only = {f.name for f in FEATURES if f.bit is None}
        listed = set(a.value("features.enable") or []) | set(a.value("features.disable") or [])
        if not (mask == prefill and a.value("features.mask") is None) or not (listed & named_only):
            # the answer is saved as typed (U6), also when it only restates the pre-filled features
            a.set_many({"features.mask": mask, "features.enable": [
                n for n in (a.value("features.enable") or []) if n in named_only], "features.disable": [
                n for n in (a.value("features.disable") or []) if n in named_only]})
        else:  # the pre-fill restates features a mask cannot hold (name-only ones): keep them, answered
            a.set_many({p: a.value(p) for p in ("features.mask", "features.enable", "features.disable")})
    else:
        opts: list[Option | Heading] = []
        titles = {Category.PERFORMANCE: "performance (on by default)",
                  Category.MEMORY: "memory (off by default; added on out-of-memory)",
                  Category.OPTIONAL: "optional (off by default)"}
        for cat in (Category.PERFORMANCE, Category.MEMORY, Category.OPTIONAL):
            opts.append(Heading(titles[cat]))
            for f in FEATURES:
                if f.category is not cat:
                    continue
                st = states[f.name]
                opts.append(Option(f"{f.name} — {f.title}", f.name, checked=st.on and st.applicable,
                                   description=_feature_description(f.name),
                                   disabled=None if st.applicable else f"n/a: {f.not_applicable}"))

        def values_for(selected: list[str]) -> dict[str, Any]:
            enable = [f.name for f in FEATURES if f.name in selected and not f.default_on]
            disable = [f.name for f in FEATURES
                       if f.default_on and f.name not in selected and states[f.name].applicable]
            return {"features.mask": None, "features.enable": enable, "features.disable": disable}

        chosen = p.checkbox("Acceleration features", opts,
                            check=lambda sel: a.check(values_for(sel), FEATURE_FIELDS),
                            instruction="(arrows move, space toggles; the line below explains the pointed one)")
        a.set_many(values_for(chosen))
    _explain_features(ctx)


# ============================================================================ Round 5: hyperparameters

BATCH_FIELDS = ("train.train_batch_size", "train.mini_batch_size", "train.micro_batch_size_per_device")


@dataclass(frozen=True)
class Hyper:
    path: str
    label: str
    kind: type
    fields: tuple[str, ...]


HYPERS: tuple[Hyper, ...] = (
    Hyper("train.steps", "Training steps", int, ("train.steps",)),
    Hyper("train.train_batch_size", "Batch size (prompts per step)", int, BATCH_FIELDS),
    Hyper("train.lr", "Learning rate", float, ("train.lr",)),
    Hyper("train.tensor_parallel", "Tensor parallel size (TP)", int,
          ("train.tensor_parallel", "train.rollout_tensor_parallel")),
    Hyper("train.pipeline_parallel", "Pipeline parallel size (PP)", int,
          ("train.tensor_parallel", "train.pipeline_parallel", "features.vpp_size", *BATCH_FIELDS)),
    Hyper("train.responses_per_prompt", "Responses per prompt (n)", int,
          ("train.responses_per_prompt", *BATCH_FIELDS)),
)


def _total_devices(a: Answers) -> int:
    spec = a.current.spec
    per_node = len(spec.cluster.devices)
    if disaggregated(spec.mode) and spec.train.trainer_devices:
        per_node = spec.train.trainer_devices
    return spec.cluster.node_count * per_node


def _parse(kind: type, text: str) -> tuple[Any, str | None]:
    t = text.strip()
    if kind is int:
        if not re.fullmatch(r"[0-9]+", t):
            return None, "type a whole number"
        return int(t), None
    try:
        return float(t), None
    except ValueError:
        return None, "type a number, e.g. 1e-6"


def round_hyperparameters(ctx: RoundContext) -> None:
    a, p = ctx.answers, ctx.prompter
    ctx.header(5, "Training hyperparameters")
    for i, h in enumerate(HYPERS):
        if h.path == "train.pipeline_parallel" and a.value("strategy") != "megatron":
            ctx.note(f"no pipeline parallel size to choose: {a.value('strategy')} has no pipeline parallelism "
                     "(PP is Megatron's)")
            continue
        if not a.ask(h.path):
            ctx.show_given(h.label, h.path)
            continue
        later = {x.path for x in HYPERS[i + 1 :] if a.ask(x.path)
                 and (x.path != "train.pipeline_parallel" or a.value("strategy") == "megatron")}
        # TP is asked before PP: check TP alone (PP 1) and leave the TP*PP product to the PP question.
        relax: dict[str, Any] = {"train.pipeline_parallel": 1} if "train.pipeline_parallel" in later else {}
        fields = h.fields

        no_fit: dict[str, str] = {}

        def check(text: str, h: Hyper = h, relax: dict[str, Any] = relax, fields: tuple[str, ...] = fields,
                  no_fit: dict[str, str] = no_fit) -> str | None:
            value, err = _parse(h.kind, text)
            if err:
                return err
            parallel = h.path in ("train.tensor_parallel", "train.pipeline_parallel")
            reason = a.check({h.path: value}, fields, relax, tolerate_prefilled=not parallel)
            if reason is None:
                return None
            if parallel:
                valid = _valid_choices(a, h, fields, relax)
                if not valid:
                    # No value of this question fixes it (another answer is at fault): accept, say so, and let
                    # the whole-spec check after the rounds reopen the rounds that can fix it.
                    no_fit[h.path] = reason
                    return None
                short = h.label.split("(")[-1].rstrip(")")
                return f"{short} {value} refused (valid {short} here: {', '.join(map(str, valid))}): {reason}"
            return reason

        cur = a.value(h.path)
        if h.path in ("train.tensor_parallel", "train.pipeline_parallel") and isinstance(cur, int) and a.check(
                {h.path: cur}, fields, relax, tolerate_prefilled=False) is not None:
            # the pre-fill does not fit the other answers (e.g. PP 2 on the 4 training devices of a split):
            # pre-fill the largest size that does, and say why
            valid = _valid_choices(a, h, fields, relax)
            if valid:
                short = h.label.split("(")[-1].rstrip(")")
                better = max([v for v in valid if v <= cur] or valid[:1])
                ctx.note(f"pre-filled {short} {better}: {short} {cur} does not fit the other answers "
                         f"(valid {short} here: {', '.join(map(str, valid))})")
                cur = better
        text = p.text(h.label, default=_fmt(cur), check=check)
        value, _ = _parse(h.kind, text)
        a.set(h.path, value)
        if h.path in no_fit and a.check({h.path: value}, fields, relax, tolerate_prefilled=False) is not None:
            ctx.note(f"no {h.label} fits the other answers ({no_fit[h.path]}): accepted for now; the check "
                     "after the rounds reopens the rounds that can fix it")


def _valid_choices(a: Answers, h: Hyper, fields: tuple[str, ...], relax: dict[str, Any]) -> list[int]:
    total = _total_devices(a)
    if h.path == "train.pipeline_parallel":
        total = max(1, total // max(1, int(a.value("train.tensor_parallel"))))
    return [d for d in range(1, total + 1)
            if total % d == 0 and a.check({h.path: d}, fields, relax, tolerate_prefilled=False) is None]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "" if value is None else str(value)


ROUNDS: tuple[Callable[[RoundContext], None], ...] = (
    round_basic, round_container, round_swanlab, round_features, round_hyperparameters,
)

#: Which round sets a field (to re-ask the round whose answer a final check refuses).
ROUND_OF_PREFIX: tuple[tuple[str, int], ...] = (
    ("cluster.", 0), ("paths.", 0), ("container.", 1), ("logging.", 2), ("features", 3), ("device", 3),
    ("strategy", 0), ("algorithm", 0), ("mode", 0), ("verl_version", 0), ("train.", 4),
)


ROUND_TITLES = ("basic", "container", "SwanLab", "features", "hyperparameters")
FEATURES_ROUND, HYPER_ROUND = 3, 4


def rounds_for(finding: Any) -> set[int]:
    """The rounds to reopen for a refused value: the round owning its field and, when features take part (a
    feature's prerequisite such as vpp's PP > 1, the vpp split of layers), the features round and the round of
    the parallel sizes they constrain: the fix may be in either."""
    out = {i for i in (round_for(finding.field),) if i is not None}
    if "feature" in finding.code or "vpp" in finding.code or (finding.field or "").startswith("features"):
        out |= {FEATURES_ROUND, HYPER_ROUND}
    return out


def round_for(field: str | None) -> int | None:
    if not field:
        return None
    for prefix, index in ROUND_OF_PREFIX:
        if field == prefix.rstrip(".") or field.startswith(prefix):
            return index
    return None
