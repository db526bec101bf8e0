"""One verdict (issue 21): `plan`, `check`, `launch --dry-run`, `quickstart --dry-run` and the wizard's final
verdict (`init --yes`) give the same error codes whenever they have the same facts.

Each command runs for real, in this process, through ``verlctl.cli.main``. Only the collection of the host's
facts is replaced: by a corpus of fact sets that stand in for the NPU / GPU hosts this machine is not (real
npu-smi / nvidia-smi captures parsed by verlctl's parsers, real model directories and parquet files probed by
verlctl's probes, a real listening socket on the Ray port, a real checkpoint directory). The stand-in records
what each command asked for (``skip``: the facts it does not collect) and hands back exactly that much.

* With only the spec and the model's config.json (what ``plan`` collects), all five commands give one set.
* With every fact, ``check``, ``launch --dry-run`` and ``quickstart --dry-run`` give one set, and ``init`` the
  set ``check`` gives on the facts ``init`` collects.

A command that skips a rule, filters a finding or decides with other rules fails it; the corpus triggers
every rule of the findings the issue lists (asserted below, so the test cannot pass vacuously).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from verlctl.checks.facts import CheckFacts
from verlctl.checks.verdict import Need
from verlctl.detect.check_probes import check_dataset_file
from verlctl.detect.gpu import parse_nvidia_smi
from verlctl.detect.machine import MachineState
from verlctl.detect.models import inspect_model
from verlctl.detect.npu import parse_npu_smi_info
from verlctl.orchestrator.machine_facts import INIT_SKIPS, ray_ports_busy, resume_step
from verlctl.spec.resolve import load_spec

from conftest import FIXTURES, clean_env, fixture_text
from launch_support import write_model, write_parquet

NPU_910B4 = "info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"  # 8 x 32 GiB
GPU_H100 = "default-565-8gpu-h100-complete-noproc-thamada-nvidia-smi.txt"
QWEN3_8B = {"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096,
            "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 40960}

#: The codes the corpus must trigger (the issue's findings: G4 G8 U1 U2 U19 U20 N10, and a host rule).
MUST_TRIGGER = {"model_layers_pp", "model_recompute_layers", "max_model_len_over_context", "memory_device_fit",
                "dataset_smaller_than_batch", "device_not_here", "resume_past_steps", "ray_ports_in_use",
                "device_missing"}


@dataclass
class Case:
    name: str
    flags: dict[str, Any]  # spec values (scalars: quickstart takes them from VERLCTL_* variables)
    model: dict[str, Any] = field(default_factory=dict)  # config.json values
    machine: str = "npu"  # npu | gpu | none
    rows: int = 64
    resume: int | None = None  # a checkpoint global_step_N in paths.checkpoints
    hold_ray_port: bool = False
    expect: frozenset[str] = frozenset()  # error codes `check` must give (so that the case tests something)


CASES = [
    Case("clean", {}),
    Case("g4_pp_over_layers", {"train.tensor_parallel": 1, "train.pipeline_parallel": 8}, QWEN3_8B,
         expect=frozenset({"model_layers_pp"})),
    Case("g4_uniform_recompute", {"train.tensor_parallel": 1, "train.pipeline_parallel": 2, "features.mask": "1100100",
                                  "features.recompute_method": "uniform", "features.recompute_num_layers": 7},
         QWEN3_8B, expect=frozenset({"model_recompute_layers"})),
    Case("g8_max_model_len", {"verl_version": "0.9.1", "features.disable": "chunked_prefill",
                              "train.max_response_length": 40960}, QWEN3_8B,
         expect=frozenset({"max_model_len_over_context"})),
    Case("u1_memory", {"train.max_response_length": 32768}, QWEN3_8B, expect=frozenset({"memory_device_fit"})),
    Case("u2_rows", {"train.train_batch_size": 32}, rows=8, expect=frozenset({"dataset_smaller_than_batch"})),
    Case("u19_gpu_host", {}, machine="gpu", expect=frozenset({"device_not_here"})),
    Case("u19_gpu_default_image", {"device": "gpu", "container.runtime": "docker"}, machine="gpu",
         expect=frozenset()),  # image_for_npu is a warning: no error from any command
    Case("u20_ray_port", {}, hold_ray_port=True, expect=frozenset({"ray_ports_in_use"})),
    Case("n10_resume", {"train.steps": 10}, resume=60, expect=frozenset({"resume_past_steps"})),
    Case("devices", {"cluster.devices": "0,1,2,3,4,5,6,9"}, expect=frozenset({"device_missing"})),
]


@dataclass
class World:
    flags: dict[str, Any]
    facts: CheckFacts
    case: Case


def _model_dir(root: Path, config: dict[str, Any]) -> Path:
    d = root / "models" / "m"
    write_model(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(config)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def _machine(kind: str) -> MachineState:
    if kind == "npu":
        return MachineState(npu=parse_npu_smi_info(fixture_text(FIXTURES / "npu-smi" / NPU_910B4)))
    if kind == "gpu":
        return MachineState(gpu=parse_nvidia_smi(fixture_text(FIXTURES / "nvidia-smi" / GPU_H100)))
    return MachineState()


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    case: Case = request.param
    model = _model_dir(tmp_path, case.model)
    (tmp_path / "data").mkdir()
    write_parquet(tmp_path / "data" / "train.parquet", rows=case.rows)
    write_parquet(tmp_path / "data" / "val.parquet")
    flags: dict[str, Any] = {
        "paths.model": str(model), "paths.train_files": str(tmp_path / "data" / "train.parquet"),
        "paths.val_files": str(tmp_path / "data" / "val.parquet"), "paths.checkpoints": str(tmp_path / "ckpt"),
        "paths.logs": str(tmp_path / "logs"), "container.runtime": "host", "logging.swanlab.enabled": False,
        **case.flags,
    }
    if case.resume is not None:
        (tmp_path / "ckpt" / f"global_step_{case.resume}").mkdir(parents=True)
        (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text(f"{case.resume}\n")
    holder = None
    if case.hold_ray_port:
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        holder.bind(("0.0.0.0", 0))
        holder.listen(1)
        flags["cluster.ray_port"] = holder.getsockname()[1]
    spec = load_spec(None, flags=_typed(flags), environ={}).spec
    datasets = [check_dataset_file("paths.train_files", flags["paths.train_files"], 20.0),
                check_dataset_file("paths.val_files", flags["paths.val_files"], 20.0)]
    facts = CheckFacts(machine=_machine(case.machine), model=inspect_model(str(model)), datasets=datasets,
                       resume_step=resume_step(spec), ray_ports_busy=ray_ports_busy(spec), hccl_ports_busy={},
                       device_nodes_missing=[])
    try:
        yield World(flags, facts, case)
    finally:
        if holder is not None:
            holder.close()


def _typed(flags: dict[str, Any]) -> dict[str, Any]:
    out = dict(flags)
    for key in ("features.disable",):
        if isinstance(out.get(key), str):
            out[key] = [out[key]]
    if isinstance(out.get("cluster.devices"), str):
        out["cluster.devices"] = [int(d) for d in out["cluster.devices"].split(",")]
    return out


class StandIn:
    """``collect_facts`` / ``spec_facts`` for the fact set: what each command asked for, from the corpus."""

    def __init__(self, facts: CheckFacts, only: set[Need] | None = None) -> None:
        self.facts = facts
        self.only = only  # restrict every command to these needs (the "plan" fact set)
        self.asked: list[str] = []

    def _restricted(self, skip: dict[str, str]) -> CheckFacts:
        missing = dict(skip)
        if self.only is not None:
            missing.update({n.value: "not in this fact set" for n in Need
                            if n not in self.only and n is not Need.SPEC})
        return self.facts.model_copy(deep=True, update={"not_collected": missing})

    def collect_facts(self, resolved: Any, budget_s: float = 0, *, skip: dict[str, str] | None = None,
                      **_: Any) -> CheckFacts:
        self.asked.append("collect_facts")
        return self._restricted(skip or {})

    def spec_facts(self, resolved: Any, model: Any = None, reasons: Any = None, look: bool = True) -> CheckFacts:
        from verlctl.checks.verdict import PLAN_REASONS

        self.asked.append("spec_facts")
        return self._restricted({n.value: why for n, why in PLAN_REASONS.items()})


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    import verlctl.cli as cli

    capsys.readouterr()
    try:
        cli.main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().out


def _json_errors(out: str) -> set[str]:
    doc = json.loads(out)
    return {f["code"] for f in doc.get("findings", []) if f["severity"] == "error"}


def _text_errors(out: str) -> set[str]:
    return {line.split()[1] for line in out.splitlines() if line.startswith("error ") and len(line.split()) > 1}


def codes_of(command: str, w: World, tmp: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> set[str]:
    spec_file = tmp / "spec.yaml"
    nested: dict[str, Any] = {}
    for path, value in _typed(w.flags).items():
        node = nested
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    spec_file.write_text(yaml.safe_dump(nested))
    if command == "plan":
        return _json_errors(_run(["plan", "-c", str(spec_file), "--json"], capsys)[1])
    if command == "check":
        return _json_errors(_run(["check", "-c", str(spec_file), "--json"], capsys)[1])
    if command == "launch":
        return _json_errors(_run(["launch", "-c", str(spec_file), "--dry-run", "--json"], capsys)[1])
    if command == "quickstart":
        for path, value in w.flags.items():
            monkeypatch.setenv("VERLCTL_" + path.upper().replace(".", "__"), str(value))
        try:
            return _json_errors(_run(["quickstart", "--dry-run", "--json", "--no-watch"], capsys)[1])
        finally:
            for path in w.flags:
                monkeypatch.delenv("VERLCTL_" + path.upper().replace(".", "__"))
    if command == "init":
        return _text_errors(_run(["init", "-c", str(spec_file), "--yes", "-o", str(tmp / "out.yaml"), "--force"],
                                 capsys)[1])
    raise AssertionError(command)


COMMANDS = ("plan", "check", "launch", "quickstart", "init")


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    kept = clean_env()
    for k in [k for k in os.environ if k not in kept]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("VERLCTL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "400")


@pytest.mark.parametrize("world", CASES, ids=[c.name for c in CASES], indirect=True)
def test_same_facts_same_error_codes(world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch, isolated: None) -> None:
    import verlctl.checks.verdict as verdict
    import verlctl.orchestrator.machine_facts as machine_facts

    def with_facts(only: set[Need] | None) -> Callable[[str], set[str]]:
        stand_in = StandIn(world.facts, only)
        monkeypatch.setattr(machine_facts, "collect_facts", stand_in.collect_facts)
        monkeypatch.setattr(verdict, "spec_facts", stand_in.spec_facts)
        return lambda command: codes_of(command, world, tmp_path, capsys, monkeypatch)

    # What plan has (the spec, the model's config.json): every command the same.
    run = with_facts({Need.SPEC, Need.MODEL})
    small = {c: run(c) for c in COMMANDS}
    assert all(small[c] == small["plan"] for c in COMMANDS), small
    # Every fact: check, launch --dry-run and quickstart --dry-run the same; init as check on init's facts.
    run = with_facts(None)
    full = {c: run(c) for c in ("check", "launch", "quickstart", "init")}
    assert full["check"] == full["launch"] == full["quickstart"], full
    monkeypatch.setattr(machine_facts, "collect_facts",
                        lambda r, b=0, *, skip=None, **_: StandIn(world.facts)._restricted({**INIT_SKIPS, **(skip or {})}))
    assert full["init"] == run("check"), full
    assert small["plan"] <= full["check"]
    assert world.case.expect <= full["check"], (world.case.name, full["check"])



def test_the_corpus_triggers_every_rule_of_the_issue() -> None:
    assert {c for case in CASES for c in case.expect} >= MUST_TRIGGER


@pytest.mark.parametrize("version", ("0.7.0", "0.9.1"))
def test_every_cited_verl_line_of_a_fact_rule_still_holds_it(version: str) -> None:
    """The fact rules' verl citations (G4's layers over PP, G8's max_model_len, U2's empty loader), as
    tests/checks/test_rule_parity.py checks the spec rules'."""
    from test_rule_parity import _need, cite_holds
    from verlctl.checks.rules import Cite
    from verlctl.checks.verdict import fact_rules

    _need(version)
    cites = [c for r in fact_rules() for c in r.cites if isinstance(c, Cite) and c.version == version]
    assert len(cites) >= 2
    bad = [why for c in cites if (why := cite_holds(c))]
    assert not bad, "\n".join(bad)


def test_plan_facts_are_the_spec_and_a_readable_model_config(tmp_path: Path) -> None:
    """What plan collects (checks.verdict.spec_facts): the model's shape when its config.json is here, else
    why not; the nodes only for a multi-node spec; nothing read with look=False."""
    from verlctl.checks.verdict import model_fact, spec_facts

    def spec(**flags: Any) -> Any:
        return load_spec(None, flags=flags, environ={})

    assert model_fact(spec().spec) == (None, "paths.model is not set")
    info, why = model_fact(spec(**{"paths.model": str(tmp_path / "absent")}).spec)
    assert info is None and why == f"no readable config.json under {tmp_path / 'absent'} on this machine"
    shapeless = tmp_path / "shapeless"
    shapeless.mkdir()
    (shapeless / "config.json").write_text("{}")
    info, why = model_fact(spec(**{"paths.model": str(shapeless)}).spec)
    assert info is None and why is not None and "gives no model shape" in why
    (shapeless / "config.json").write_text(json.dumps({"num_attention_heads": 8}))
    info, why = model_fact(spec(**{"paths.model": str(shapeless)}).spec)
    assert why is None and info is not None and info.num_attention_heads == 8
    model = _model_dir(tmp_path, QWEN3_8B)
    one = spec_facts(spec(**{"paths.model": str(model)}))
    assert one.model is not None and one.model.num_layers == 36 and "model" not in one.not_collected
    assert "nodes" not in one.not_collected and one.not_collected["docker"]
    two = spec_facts(spec(**{"paths.model": str(model), "cluster.nodes": ["192.0.2.1", "192.0.2.2"]}))
    assert "nodes" in two.not_collected
    unread = spec_facts(spec(**{"paths.model": str(model)}), look=False)
    assert unread.model is None and "model" in unread.not_collected


def test_a_rule_whose_facts_are_missing_is_listed_with_the_reason_and_not_run(tmp_path: Path) -> None:
    """decide(): a fact rule runs only when the facts hold every need; otherwise it is named, with the first
    missing need (in Need order) and the collector's reason, once per reason in the printed lines."""
    from verlctl.checks.verdict import decide, fact_rules, restrict

    model = _model_dir(tmp_path, QWEN3_8B)
    resolved = load_spec(None, flags={"paths.model": str(model), "train.tensor_parallel": 1,
                                      "train.pipeline_parallel": 8}, environ={})
    full = CheckFacts(machine=_machine("npu"), model=inspect_model(str(model)))
    got = decide(resolved, full)
    assert "model_layers_pp" in {f.code for f in got.findings} and not got.not_checked
    assert {r.name for r in fact_rules()} <= set(got.ran)
    only_spec = restrict(full, [Need.SPEC], "not here")
    got = decide(resolved, only_spec)
    assert "model_layers_pp" not in {f.code for f in got.findings}
    by_rule = {n.rule: n for n in got.not_checked}
    assert set(by_rule) == {r.name for r in fact_rules()}
    assert by_rule["model_fit"].need is Need.MODEL and by_rule["prompt_lengths"].need is Need.MODEL
    assert by_rule["device_nodes"].need is Need.HOST and by_rule["docker"].need is Need.DOCKER
    assert got.not_checked_lines() == [f"not checked: {', '.join(by_rule)} (not here)"]
    assert {"rule": "docker", "need": "docker", "reason": "not here"} in got.to_json()
    partly = full.model_copy(update={"not_collected": {"docker": "no Docker engine"}})
    got = decide(resolved, partly)
    assert [n.rule for n in got.not_checked] == ["device_nodes", "docker"]
    assert got.not_checked_lines() == ["not checked: device_nodes, docker (no Docker engine)"]
    assert "model_layers_pp" in {f.code for f in got.findings}
    assert restrict(full, [Need.SPEC, Need.MODEL], "x").not_collected == {
        n.value: "x" for n in Need if n not in (Need.SPEC, Need.MODEL)}
