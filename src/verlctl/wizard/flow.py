"""Interactive launch and init: the rounds for what is not given, and the blocking confirmation checklist.

* :func:`run_wizard` — detection (unless a :class:`MachineState` is passed), the five rounds, then a final
  check of the whole spec that re-asks the round owning any refused value. Returns the resolved spec with
  the answers as the ``typed`` layer and the accepted pre-fills as ``detected`` (see ``answers.py``).
* :func:`confirm_launch` — the ``confirm(plan, actions)`` callback of the Launcher: checklist, then
  "Launch?" (default no), then the offer to save the answers as a spec file.
* :func:`init_flow` — ``verlctl init``: the rounds, the checklist, and the spec file as the only write.

The MachineState and the prompt input/output (:class:`Prompter`) are parameters, so tests drive the real
questions with prompt_toolkit pipe input against fixture-built machine states.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from verlctl.checks.findings import Severity
from verlctl.detect.machine import MachineState
from verlctl.errors import ExitCode, SpecError, VerlctlError
from verlctl.report import print_words
from verlctl.spec.resolve import ResolvedSpec
from verlctl.wizard.prompter import Prompter, WizardInterrupted

DEFAULT_BUDGET_S = 3.0
#: How many times the final check reopens the rounds of refused values before it stops asking.
MAX_REOPEN = 2


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def missing_message(missing: list[str]) -> str:
    from verlctl.spec.resolve import REQUIRED_PATHS

    how = "; ".join(f"{p} ({REQUIRED_PATHS[p]})" for p in missing)
    return f"missing required values and stdin is not a terminal, so nothing can be asked: {how}"


def detect_for_wizard(console: Any, scan_roots: list[str] | None = None, budget_s: float = DEFAULT_BUDGET_S) -> MachineState:
    """The bounded pre-check behind the pre-fills (no system/disk probe; short timeouts)."""
    from verlctl.detect.machine import DetectOptions, detect_machine
    from verlctl.detect.scan import DEFAULT_SCAN_ROOTS

    opts = DetectOptions(
        probes=["npu", "gpu", "docker", "models", "datasets", "network"],
        scan_roots=list(scan_roots) if scan_roots else list(DEFAULT_SCAN_ROOTS),
        budget_s=budget_s,
        dataset_check_timeout_s=min(5.0, budget_s + 2.0),
        npu_timeout_s=10.0,
        gpu_timeout_s=10.0,
        docker_timeout_s=5.0,
    )
    with console.status("checking this machine: NPUs/GPUs, docker, models, datasets, network …"):
        return detect_machine(opts)


def load_machine_file(path: Path) -> MachineState:
    """A saved ``verlctl detect --json`` result."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise VerlctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    from pydantic import ValidationError

    try:
        return MachineState.model_validate_json(text)
    except ValidationError as exc:
        raise VerlctlError(f"{path} is not a `verlctl detect --json` result: {exc.errors()[0]['msg']}") from None


def _answers(config: Path | None, flags: Mapping[str, Any], names: Mapping[str, str], ask_all: bool,
             machine: MachineState, environ: Mapping[str, str] | None) -> Any:
    from verlctl.wizard import machine_view as mv
    from verlctl.wizard.answers import Answers

    detected = mv.prefill(machine)
    answers = Answers(config, dict(flags), dict(names), environ, detected, ask_all=ask_all,
                      models={m.path: m for m in machine.models})
    # A detected value the spec model refuses (an odd container name, say) is dropped, not fatal.
    for _ in range(len(detected) + 1):
        try:
            answers.resolve()
            break
        except SpecError as exc:
            bad = [p for p in detected if exc.field and (p == exc.field or p.startswith(exc.field + "."))]
            if not bad:
                raise
            for p in bad:
                del detected[p]
    return answers


FactsFor = Callable[[ResolvedSpec, MachineState | None], Any]  # None: probe this host


def run_wizard(config: Path | None, flags: dict[str, Any], names: dict[str, str], ask_all: bool, console: Any,
               machine: MachineState | None = None, prompter: Prompter | None = None, *,
               environ: Mapping[str, str] | None = None, facts_for: FactsFor | None = None) -> ResolvedSpec:
    """Ask the five rounds (only what is not given, unless ``ask_all``) and return the resolved spec.

    The final check is the one verdict (``checks/verdict.py``) on ``facts_for(spec, machine)`` — the facts
    ``check`` collects, with the machine detected here (``orchestrator.machine_facts.wizard_facts``); without it, on
    what ``plan`` has. Where a fix exists (the mask that fits the detected device memory, the batch the
    dataset can fill) it is offered before the rounds are reopened."""
    from verlctl.wizard import machine_view as mv
    from verlctl.wizard.rounds import (
        FEATURES_ROUND,
        HYPER_ROUND,
        ROUND_TITLES,
        ROUNDS,
        RoundContext,
        rounds_for,
    )

    prompter = prompter or Prompter()
    try:
        if machine is None:
            machine = detect_for_wizard(console)
        answers = _answers(config, flags, names, ask_all, machine, environ)
        print_words(console, f"detected: {mv.summary_line(machine)}")
        ctx = RoundContext(answers, machine, prompter, console)
        for round_ in ROUNDS:
            round_(ctx)
        # Final check of the whole spec: reopen the rounds that own each refused value (the features round
        # too when features take part). Bounded: after MAX_REOPEN passes the remaining errors are shown by the
        # caller's checklist (nothing is written or launched with them), never asked forever.
        previous: set[tuple[str, str | None]] = set()
        for _pass in range(MAX_REOPEN + 1):
            facts = facts_for(answers.resolve_for_checks(), machine) if facts_for is not None else None
            errors = [f for f in answers.findings(facts=facts) if f.severity is Severity.ERROR]
            if errors and _offer_fixes(console, prompter, answers, errors, facts):
                facts = facts_for(answers.resolve_for_checks(), machine) if facts_for is not None else None
                errors = [f for f in answers.findings(facts=facts) if f.severity is Severity.ERROR]
            redo_set = {i for f in errors for i in rounds_for(f)}
            if previous and previous == {(f.code, f.field) for f in errors} and redo_set & {HYPER_ROUND}:
                # The same refusal again: the parallel sizes may be held by the features (vpp needs PP > 1).
                redo_set.add(FEATURES_ROUND)
            previous = {(f.code, f.field) for f in errors}
            redo = sorted(redo_set)
            if not errors or not redo:
                break
            from rich.markup import escape

            for f in errors:
                console.print(f"[bold red]error[/bold red] {f.code} [dim]{escape(f.field or '')}[/dim]: "
                              f"{escape(f.message)}" + (f" [dim](hint: {escape(f.hint)})[/dim]" if f.hint else ""),
                              highlight=False)
            if _pass == MAX_REOPEN:
                console.print(f"these answers were asked {MAX_REOPEN} more times and are still refused: change "
                              "them as the hints say", highlight=False)
                break
            console.print("these answers need another look: "
                          + ", ".join(f"round {i + 1} ({ROUND_TITLES[i]})" for i in redo), highlight=False)
            saved, answers.ask_all = answers.ask_all, True
            try:
                for i in redo:
                    ROUNDS[i](ctx)
            finally:
                answers.ask_all = saved
    except KeyboardInterrupt:
        raise _interrupted(locals().get("answers")) from None
    except WizardInterrupted as exc:
        if exc.message != "interrupted: nothing was changed":
            raise
        raise _interrupted(locals().get("answers")) from None
    result = answers.current
    result.answered = set(answers.answered)
    return result


def _offer_fixes(console: Any, prompter: Prompter, answers: Any, errors: list[Any], facts: Any) -> bool:
    """Offer each fix the verdict accepts (``wizard/fixes.py``); True when one was applied."""
    from verlctl.wizard.fixes import fixes_for

    applied = False
    for fix in fixes_for(answers, errors, facts):
        for f in errors:
            if f.code in fix.codes:
                print_words(console, f"error {f.code}: {f.message}")
        if prompter.confirm(f"Fix it: {fix.text}?", default=True):
            answers.set_many(fix.values, label=fix.label)
            applied = True
    return applied
def _interrupted(answers: Any) -> WizardInterrupted:
    """Ctrl-C: keep the answers given so far (U9) for the next `verlctl init` to continue from."""
    if answers is None or not answers.answered:
        return WizardInterrupted()
    from verlctl.wizard.save import save_interrupted

    resolved = answers.current
    resolved.answered = set(answers.answered)
    try:
        where = save_interrupted(resolved)
    except VerlctlError as exc:
        return WizardInterrupted(f"interrupted: nothing was written, and the answers could not be kept ({exc.message})")
    n = len(answers.answered)
    return WizardInterrupted(f"interrupted: nothing was written; the {n} answer{'s' if n != 1 else ''} so far are "
                             f"kept in {where}: `verlctl init` offers to continue from them")


def _check_target(text: str) -> str | None:
    from verlctl.wizard.save import target_problem

    t = text.strip()
    return target_problem(Path(t)) if t else "a file name is required"


def _free_name(path: Path) -> str:
    for n in range(2, 1000):
        candidate = path.with_name(f"{path.stem}-{n}{path.suffix}")
        if not candidate.exists():
            return str(candidate)
    return str(path)


def _kept(resolved: ResolvedSpec, why: str, code: int | None = None) -> VerlctlError:
    """One line: what failed, and where the answers were kept (a recovery spec file, path printed)."""
    from verlctl.wizard.save import save_recovery

    try:
        where = save_recovery(resolved)
    except VerlctlError as exc:
        return VerlctlError(f"{why}; the answers could not be kept either ({exc.message})")
    kept = f"{why}; the answers are kept in {where} (write them with: verlctl init -c {where} -o FILE)"
    return VerlctlError(kept, code=code) if code is not None else VerlctlError(kept)


def write_spec_keeping_answers(console: Any, prompter: Prompter, resolved: ResolvedSpec, target: Path,
                               force: bool = False) -> tuple[Path, list[str]]:
    """Write the spec; declining to overwrite offers another file; a write error (or an interruption while
    choosing another file) keeps the answers in a recovery file and says where, in one line."""
    from verlctl.wizard.save import SpecFileExists, save_spec

    while True:
        try:
            return target, save_spec(
                target, resolved,
                overwrite=lambda p: force or prompter.confirm(f"{p} exists: overwrite it?", default=False))
        except SpecFileExists:
            try:
                target = Path(prompter.text(f"{target} is kept as it is. Write the spec to another file",
                                            default=_free_name(target), check=_check_target).strip())
            except (KeyboardInterrupt, WizardInterrupted):
                raise _kept(resolved, "interrupted: the spec was not written", code=130) from None
            except VerlctlError as exc:  # the input ended
                raise _kept(resolved, f"the spec was not written ({exc.message})") from None
        except WizardInterrupted:  # at "overwrite it?"
            raise _kept(resolved, "interrupted: the spec was not written", code=130) from None
        except VerlctlError as exc:
            raise _kept(resolved, exc.message if "nothing was written" in exc.message
                        else f"{exc.message}: nothing was written") from None


def _offer_save(console: Any, prompter: Prompter, resolved: ResolvedSpec, default_path: str = "run.yaml") -> None:
    if not prompter.confirm("Save these answers as a spec file (repeat with `verlctl launch -c FILE --yes`)?",
                            default=False):
        return
    target = Path(prompter.text("Spec file", default=default_path, check=_check_target).strip())
    try:
        target, notes = write_spec_keeping_answers(console, prompter, resolved, target)
    except VerlctlError as exc:
        print_words(console, f"not saved: {exc.message}")
        return
    print_words(console, f"wrote {target}")
    for n in notes:
        print_words(console, f"  {n}", 0, 4)


def confirm_launch(console: Any, resolved: ResolvedSpec, prompter: Prompter | None = None,
                   offer_save: bool = True, verbose: bool = False) -> Callable[[Any, list[str]], bool]:
    """The Launcher's blocking confirmation: the checklist, the actions, then "Launch?" (default no)."""
    the_prompter = prompter or Prompter()

    def confirm(plan: Any, actions: list[str]) -> bool:
        from verlctl.wizard.checklist import show_checklist

        try:
            show_checklist(console, resolved, plan.command, plan.findings, actions, verbose=verbose)
            go = the_prompter.confirm("Launch with these settings?", default=False)
            if offer_save:
                _offer_save(console, the_prompter, resolved)
        except KeyboardInterrupt:
            raise WizardInterrupted() from None
        return go

    return confirm


def init_flow(config: Path | None, flags: dict[str, Any], names: dict[str, str], *, out: Path, ask_all: bool,
              yes: bool, force: bool, detect: bool, machine_file: Path | None, scan_roots: list[str] | None,
              budget_s: float, console: Any = None, prompter: Prompter | None = None,
              interactive: bool | None = None, environ: Mapping[str, str] | None = None,
              facts_for: FactsFor | None = None, verbose: bool = False) -> int:
    """``verlctl init``: ask, show the checklist, write the spec (the only thing it writes). The checklist's
    findings are the one verdict on ``facts_for(spec, machine)`` (see :func:`run_wizard`)."""
    from verlctl.plan import make_plan
    from verlctl.spec.resolve import load_spec
    from verlctl.wizard.checklist import init_actions, show_checklist
    from verlctl.wizard.save import save_spec

    if console is None:
        from rich.console import Console

        console = Console()
    if budget_s <= 0:
        raise VerlctlError(f"--budget must be a positive number of seconds, not {budget_s:g}")
    from verlctl.files import name_problem, shown_name

    problem = name_problem(out)
    if problem:  # before any question or stat (a name longer than the system takes)
        raise VerlctlError(f"-o {shown_name(out)}: {problem}")
    resolved = load_spec(config, flags=flags, flag_names=names, environ=environ)
    if interactive is None:
        interactive = stdin_is_terminal()
    if yes or not interactive:
        missing = resolved.missing_required()
        if missing:
            raise SpecError(missing_message(missing) if not interactive else
                            missing_message(missing).replace("stdin is not a terminal", "--yes asks nothing"))
        if not yes:
            raise VerlctlError("confirmation needed but stdin is not a terminal: pass --yes to write the spec "
                               "without asking")
        if not force and (Path(out).exists() or Path(out).is_symlink()):  # before any work (the -o rule)
            raise VerlctlError(f"{out} exists: nothing was written (choose another file with -o, or pass --force)")
        facts = facts_for(resolved, None) if facts_for is not None else None
        plan = make_plan(resolved, facts=facts)
        if not plan.ok:
            from verlctl.report import print_findings, print_not_checked

            print_findings(console, plan.findings)
            print_not_checked(console, plan.verdict.not_checked_lines() if plan.verdict else [])
            raise VerlctlError("the spec has errors (listed above): nothing was written")
        notes = save_spec(out, resolved, overwrite=lambda _p: force)
        print_words(console, f"wrote {out}")
        for n in notes:
            print_words(console, f"  {n}", 0, 4)
        return 0

    prompter = prompter or Prompter()
    from verlctl.wizard.save import interrupted_path

    kept = interrupted_path()
    continued = False
    if config is None and kept.is_file():
        try:
            if prompter.confirm(f"An earlier `verlctl init` was interrupted; its answers are kept in {kept}. "
                                "Continue from them?", default=True):
                config, continued = kept, True
                resolved = load_spec(config, flags=flags, flag_names=names, environ=environ)
            else:
                kept.unlink(missing_ok=True)
                print_words(console, f"removed {kept}")
        except KeyboardInterrupt:
            raise WizardInterrupted() from None
    try:
        machine: MachineState | None
        if machine_file is not None:
            machine = load_machine_file(machine_file)
        elif detect:
            machine = detect_for_wizard(console, scan_roots, budget_s)
        else:
            machine = MachineState()
        resolved = run_wizard(config, flags, names, ask_all, console, machine=machine, prompter=prompter,
                              environ=environ, facts_for=facts_for)
        facts = facts_for(resolved, machine) if facts_for is not None else None
        from verlctl.wizard.answers import Answers

        answers = Answers(config, flags, names, environ, models={m.path: m for m in machine.models})
        plan = make_plan(resolved, facts=facts if facts is not None else answers.spec_facts(resolved))
        findings = plan.findings
        console.print("\n[bold]Checklist[/bold]")
        show_checklist(console, resolved, plan.command, findings, init_actions(resolved, out), verbose=verbose)
        if plan.verdict is not None:
            from verlctl.report import print_not_checked

            print_not_checked(console, plan.verdict.not_checked_lines())
        if any(f.severity is Severity.ERROR for f in findings):
            raise VerlctlError("the spec has errors (listed above): nothing was written")
        if not prompter.confirm(f"Write the spec to {out}?", default=False):
            console.print("nothing was written", highlight=False)
            return ExitCode.DECLINED
        out, notes = write_spec_keeping_answers(console, prompter, resolved, out, force)
    except KeyboardInterrupt:
        raise WizardInterrupted() from None
    if continued:
        kept.unlink(missing_ok=True)  # written: the kept answers are in the spec now
    print_words(console, f"wrote {out}; repeat the run with: verlctl launch -c {out} --yes")
    for n in notes:
        print_words(console, f"  {n}", 0, 4)
    return 0
