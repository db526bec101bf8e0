"""One verdict: every command that decides (``plan``, ``check``, ``init``, ``launch`` and its ``--dry-run``,
``quickstart``) runs the same rules on the facts it could collect, and says which rules could not run and why.

There are two kinds of rules, in one registry:

* the **spec rules** of :mod:`verlctl.checks.rules` (``RULES``): they need the spec only (:data:`Need.SPEC`);
* the **fact rules** here (``FACT_RULES``): each declares the facts it needs (:class:`Need`) — the model's
  ``config.json``, the dataset files, this host, the Docker engine and its containers, the image's contents,
  live runs and ports, each node.

:func:`decide` runs every spec rule, then every fact rule whose needs the :class:`~verlctl.checks.facts.CheckFacts`
holds; a rule whose needs are missing is listed in :attr:`Verdict.not_checked` with the reason the collector
gave (``"not checked: no Docker engine"``). Commands differ only in what they collect
(``orchestrator.machine_facts.collect_facts``, or :func:`spec_facts` for ``plan``), never in which rules they run, so the
error codes of two commands with the same facts are the same (``tests/checks/test_verdict_parity.py``).

How to add a rule
-----------------
A rule on the spec alone: ``@rule(...)`` in :mod:`verlctl.checks.rules`. A rule that needs facts::

    from verlctl.checks.verdict import Need, VerdictCtx, fact_rule

    @fact_rule("my_rule", ("my_code",), needs=(Need.HOST,), cites=("verl 0.9.1 path.py:12",))
    def _my_rule(ctx: VerdictCtx) -> Iterable[Finding]:
        '''One line: what it checks (shown in ``--json``'s rule list).'''
        if ctx.facts.something_collected ...:
            yield error("my_code", "what is wrong", "the.spec.field", "how to fix it")

Put it in its own module under ``verlctl/checks/`` and add that module to :data:`RULE_MODULES` (so the
registry is complete whatever was imported before). If it needs a new fact, add an optional field to
``CheckFacts`` (``None``: not collected) and collect it in ``orchestrator.machine_facts.collect_facts``. Every code
needs a trigger/no-trigger row in ``tests/checks/test_finding_codes.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from verlctl.checks.facts import CheckFacts
from verlctl.checks.findings import Finding, has_errors, sorted_findings
from verlctl.checks.rules import Cite

if TYPE_CHECKING:
    from verlctl.checks.memory import Estimate
    from verlctl.spec.model import RunSpec
    from verlctl.spec.resolve import ResolvedSpec
    from verlctl.verl.compose import TrainingCommand


class Need(str, Enum):
    """The facts a rule can need (what a command may or may not be able to collect)."""

    SPEC = "spec"
    MODEL = "model"  # the model's config.json (its shape)
    DATASETS = "datasets"  # the dataset files (exist, parquet, columns, rows)
    HOST = "host"  # this host: device tool, device nodes, network, RAM, /dev/shm, paths
    DOCKER = "docker"  # the Docker engine, the spec's image and container
    IMAGE = "image"  # what is installed in the image (Python, Ray, the recipe files)
    LIVE = "live"  # live runs and ports on this host
    TARGET = "target"  # the in-target look-up: packages, entry, composition where training runs (orchestrator/preflight.py)
    NODES = "nodes"  # each node of a multi-node run (launch's pre-flight, inside every node's container)
    SERVICES = "services"  # the servers the run reaches (the SwanLab host), tried from this host


#: Modules that register fact rules (imported by :func:`fact_rules`): add yours here.
RULE_MODULES: list[str] = ["verlctl.checks.verdict_rules", "verlctl.checks.swanlab_reach"]


@dataclass
class VerdictCtx:
    """What a fact rule reads: the spec, the composed command (features, version) and the facts."""

    resolved: ResolvedSpec
    command: TrainingCommand
    facts: CheckFacts
    memory: Estimate | None = None  # the memory estimate (the memory rule sets it)

    @property
    def spec(self) -> RunSpec:
        return self.resolved.spec

    @property
    def version(self) -> str:
        return self.command.version

    def on(self, name: str) -> bool:
        st = self.command.features.get(name)
        return bool(st and st.on and st.applicable)


@dataclass(frozen=True)
class FactRule:
    name: str
    codes: tuple[str, ...]  # every code it can emit
    needs: frozenset[Need]
    check: Callable[[VerdictCtx], Iterable[Finding]]
    cites: tuple[Cite | str, ...] = ()  # the verl lines it mirrors (checked), other sources as text
    doc: str = ""
    families: tuple[str, ...] = ()  # code prefixes it relays (the parquet schema check's "dataset.")

    def emits(self, code: str) -> bool:
        return code in self.codes or any(code.startswith(p) for p in self.families)

    def run(self, ctx: VerdictCtx) -> list[Finding]:
        out = list(self.check(ctx))
        unknown = {f.code for f in out if not self.emits(f.code)}
        assert not unknown, f"rule {self.name} emitted undeclared codes {unknown}"
        return out


FACT_RULES: list[FactRule] = []


def fact_rule(
    name: str, codes: tuple[str, ...], *, needs: Iterable[Need], cites: tuple[Cite | str, ...] = (),
    families: tuple[str, ...] = (),
) -> Callable[[Callable[[VerdictCtx], Iterable[Finding]]], Callable[[VerdictCtx], Iterable[Finding]]]:
    """Register a fact rule (see the module doc)."""

    def register(fn: Callable[[VerdictCtx], Iterable[Finding]]) -> Callable[[VerdictCtx], Iterable[Finding]]:
        if any(r.name == name for r in FACT_RULES):
            raise ValueError(f"fact rule {name} is registered twice")
        FACT_RULES.append(FactRule(name, codes, frozenset(needs), fn, cites, (fn.__doc__ or "").strip(), families))
        return fn

    return register


def fact_rules() -> list[FactRule]:
    for mod in RULE_MODULES:
        importlib.import_module(mod)
    return FACT_RULES


@dataclass(frozen=True)
class NotChecked:
    rule: str
    need: Need
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "need": self.need.value, "reason": self.reason}


@dataclass
class Verdict:
    findings: list[Finding]
    not_checked: list[NotChecked] = field(default_factory=list)
    memory: Estimate | None = None
    ran: list[str] = field(default_factory=list)  # the rules that ran (spec rules first)

    @property
    def ok(self) -> bool:
        return not has_errors(self.findings)

    def not_checked_lines(self) -> list[str]:
        """One line per reason: ``not checked: rule_a, rule_b (no Docker engine)``."""
        by_reason: dict[str, list[str]] = {}
        for n in self.not_checked:
            by_reason.setdefault(n.reason, []).append(n.rule)
        return [f"not checked: {', '.join(rules)} ({reason})" for reason, rules in by_reason.items()]

    def to_json(self) -> list[dict[str, str]]:
        return [n.to_json() for n in self.not_checked]


def missing_need(facts: CheckFacts, needs: frozenset[Need]) -> tuple[Need, str] | None:
    """The first of ``needs`` the facts lack, with the collector's reason."""
    for need in sorted(needs, key=lambda n: list(Need).index(n)):
        reason = facts.not_collected.get(need.value)
        if reason is not None:
            return need, reason
    return None


def run_fact_rules(ctx: VerdictCtx, only: Iterable[Need] | None = None) -> Verdict:
    """Every fact rule whose needs the facts hold (restricted to rules needing one of ``only``)."""
    wanted = frozenset(only) if only is not None else None
    out = Verdict([])
    for r in fact_rules():
        if wanted is not None and not r.needs & wanted:
            continue
        lack = missing_need(ctx.facts, r.needs)
        if lack is not None:
            out.not_checked.append(NotChecked(r.name, lack[0], lack[1]))
            continue
        out.findings += r.run(ctx)
        out.ran.append(r.name)
    out.memory = ctx.memory
    return out


def decide(resolved: ResolvedSpec, facts: CheckFacts, command: TrainingCommand | None = None,
           container_version: str | None = None) -> Verdict:
    """The verdict of one spec on these facts: the composition's findings, every spec rule, and every fact
    rule whose facts are there. A missing required path is a finding (the other rules still run)."""
    from verlctl.checks.findings import error
    from verlctl.checks.rules import RULES
    from verlctl.checks.spec_checks import check_spec
    from verlctl.spec.resolve import REQUIRED_PATHS
    from verlctl.verl.compose import build_command

    if command is None:
        if container_version is None:
            container_version = image_verl(resolved, facts)
        command = build_command(resolved, container_version)
    found = [
        error("required_path", f"{path} is not set", path, f"set {path} in the spec file, or pass {REQUIRED_PATHS[path]}")
        for path in resolved.missing_required()
    ]
    found += list(command.findings)
    found += check_spec(resolved, command.features, command.version)
    ctx = VerdictCtx(resolved, command, facts)
    result = run_fact_rules(ctx)
    result.findings = sorted_findings(found + result.findings)
    result.ran = [r.name for r in RULES if r.applies(command.version)] + result.ran
    return result


def image_verl(resolved: ResolvedSpec, facts: CheckFacts) -> str | None:
    """``verl_version: auto``: the supported verl version installed in the image, as ``check`` read it (None
    where it was not read, or is no version verlctl supports: the plan then warns and launch refuses)."""
    from verlctl.verl.entrypoints import SUPPORTED_VERSIONS

    if resolved.spec.verl_version != "auto" or facts.image_versions is None:
        return None
    installed = facts.image_versions.stack.get("verl")
    base = ".".join(installed.split(".")[:3]) if installed else None
    return base if base in SUPPORTED_VERSIONS else None


# ------------------------------------------------------------------------------------------------ facts


#: What ``plan`` does not collect (it reads the spec and, when it is here, the model's config.json).
PLAN_REASONS: dict[Need, str] = {
    Need.DATASETS: "plan reads no dataset files; verlctl check does",
    Need.HOST: "plan does not probe this host; verlctl check does",
    Need.DOCKER: "plan does not ask the Docker engine; verlctl check does",
    Need.IMAGE: "plan does not look inside the image; verlctl check does, in the running container",
    Need.TARGET: "plan does not look inside the image; verlctl check, launch --dry-run and launch do",
    Need.LIVE: "plan does not look at live runs and ports; verlctl check does",
    Need.NODES: "the per-node pre-flight runs in verlctl launch, inside every node's container",
    Need.SERVICES: "plan does not try the SwanLab host; verlctl check and launch do",
}


def model_fact(spec: RunSpec) -> tuple[Any, str | None]:
    """The model's shape from its config.json on this machine, or why there is none."""
    import os

    from verlctl.detect.models import inspect_model

    path = spec.paths.model
    if not path:
        return None, "paths.model is not set"
    if not os.path.isfile(os.path.join(path, "config.json")):
        return None, f"no readable config.json under {path} on this machine"
    info = inspect_model(path)
    if info.num_layers is None and info.num_attention_heads is None:
        return None, f"{path}/config.json gives no model shape"
    return info, None


def spec_facts(resolved: ResolvedSpec, model: Any = None, reasons: dict[Need, str] | None = None,
               look: bool = True) -> CheckFacts:
    """The facts ``plan`` has: the spec and, when readable here, the model's config.json (``model``: one the
    caller already has, e.g. the wizard's detected model; ``look`` false: do not read it when None)."""
    from verlctl.detect.machine import MachineState

    not_collected = {n.value: why for n, why in (reasons or PLAN_REASONS).items()
                     if n is not Need.NODES or len(resolved.spec.cluster.nodes) > 1}  # one node: nothing to ask
    if model is None:
        model, why = model_fact(resolved.spec) if look else (None, "the model's config.json is not readable here")
        if why is not None:
            not_collected[Need.MODEL.value] = why
    return CheckFacts(machine=MachineState(), model=model, not_collected=not_collected)


def restrict(facts: CheckFacts, needs: Iterable[Need], reason: str) -> CheckFacts:
    """The same facts with every need outside ``needs`` marked not collected (for tests and ``plan``)."""
    keep = {n.value for n in needs}
    missing = dict(facts.not_collected)
    for n in Need:
        if n.value not in keep and n is not Need.SPEC:
            missing.setdefault(n.value, reason)
    return facts.model_copy(update={"not_collected": missing})
