"""verl is the oracle, both directions, on a matrix of plans.

Rows: every (verl version x mode x strategy {megatron, fsdp, fsdp2} x algorithm {dapo, grpo} x device {npu, gpu})
of the two supported versions (0.7.0: 2 modes, 0.9.1: 5 modes: 84 rows), each with a feature set and a batch
shape picked by a deterministic greedy pairwise covering (every feature set and every batch shape meets every
value of every other factor, and each other, at least once: 84 of the 504 x 6 product); the 0.9.1 modes asked
of 0.7.0 (36 rows); the audit's cases (``test_verl_validation.REFUSAL_CASES``); and verl's own launch scripts
(``tests/fixtures/official-scripts``, imported and planned as a user would).

verl decides, with its own code (``tests/verlvalidate.py``, one subprocess per version, side by side): Hydra
composition of the plan's command against verl's config tree, ``validate_config``, the dataclass conversions,
each mode's trainer/rollouter constructor asserts, and the first actor update's batch asserts (worker
normalisation, the dispatch to the data-parallel ranks, the mini-batch iterator) with the trainer's device facts.

* A plan verlctl accepts must pass: "accepted but rejected by verl" is 0.
* A plan verlctl refuses must fail there (its command is rendered and run all the same); a feature refused
  where verl has no form of it must be shown so by verl's code (its keys absent from verl's config tree for
  that strategy; a MindSpeed flag, whose code path verl takes only where MindSpeed / an NPU is, executed both
  ways); a mode the version lacks must be absent from verl's tree; else the refusal says verlctl does not
  support it (counted apart, by name). Anything else is an unexplained refusal: 0.
* A refusal that rests on a device fact (the weight-sync bucket without IPC) is run through verl's code with
  the fact both ways (:func:`test_a_refusal_on_a_device_fact_is_verls_code_with_the_fact_both_ways`).

The totals are printed.
"""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import pytest

from test_verl_validation import REFUSAL_CASES, SP, SPLIT
from verlctl.plan import make_plan
from verlctl.spec.resolve import load_spec

import verlcompose
from conftest import BASE_PATHS

VERSIONS = ("0.7.0", "0.9.1")
MODES = {
    "0.7.0": ("sync", "one_step_off_policy"),
    "0.9.1": ("sync", "one_step_off_policy", "colocate_async", "separate_async", "fully_async"),
}
#: Feature sets: the defaults, four masks of the seed's 7 bits, and a named list (as the audit's matrix).
FEATURE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    "m0000000": {"features.mask": "0000000"},
    "m1111111": {"features.mask": "1111111"},
    "m1110000": {"features.mask": "1110000"},
    "m0001111": {"features.mask": "0001111"},
    "named": {"features.enable": ["flash_attn", "dynamic_batch", "remove_padding", "gradient_checkpointing",
                                  "prefix_cache", "chunked_prefill"]},
}
#: Batch shapes (the spec's defaults: 32 prompts, mini = train, 8 responses, 8 devices) that reach the batch
#: rules from both sides.
SHAPES: dict[str, dict[str, Any]] = {
    "default": {},
    "mini>train": {"train.mini_batch_size": 64},
    "uneven-mini": {"train.train_batch_size": 48, "train.mini_batch_size": 32},
    "n1": {"train.responses_per_prompt": 1},
    "sp2": {"extra_overrides": [f"{SP}=2"]},
    "tiny-mini": {"train.mini_batch_size": 1, "train.responses_per_prompt": 4, "train.train_batch_size": 8},
}
CORE = ("version", "mode", "strategy", "algorithm", "device")
#: The 0.9.1 modes asked of verl 0.7.0 (default features, as the audit's matrix): nothing of verl's to run.
ABSENT_070 = ("colocate_async", "separate_async", "fully_async")


def core_rows() -> list[dict[str, str]]:
    return [dict(zip(CORE, (v, m, s, a, d), strict=True))
            for v in VERSIONS for m, s, a, d in itertools.product(
                MODES[v], ("megatron", "fsdp", "fsdp2"), ("dapo", "grpo"), ("npu", "gpu"))]


def covering(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """Each core row gets the (feature set, batch shape) that covers the most pairs not yet covered (first in
    order on a tie: deterministic). Pairs: features x shape, and each of them x every core factor's value."""
    covered: set[tuple[Any, ...]] = set()
    out = []
    for row in rows:
        fs, sh = max(itertools.product(FEATURE_SETS, SHAPES), key=lambda p: len(_pairs(row, *p) - covered))
        covered |= _pairs(row, fs, sh)
        out.append({**row, "features": fs, "shape": sh})
    return out


def _pairs(row: dict[str, str], fs: str, sh: str) -> set[tuple[Any, ...]]:
    return {("fs-sh", fs, sh)} | {("fs", k, row[k], fs) for k in CORE} | {("sh", k, row[k], sh) for k in CORE}


def all_pairs() -> set[tuple[Any, ...]]:
    values = {k: {r[k] for r in core_rows()} for k in CORE}
    return ({("fs-sh", f, s) for f in FEATURE_SETS for s in SHAPES}
            | {("fs", k, v, f) for k in CORE for v in values[k] for f in FEATURE_SETS}
            | {("sh", k, v, s) for k in CORE for v in values[k] for s in SHAPES})


def _flags(row: dict[str, str]) -> dict[str, Any]:
    flags: dict[str, Any] = {**BASE_PATHS, "verl_version": row["version"], "mode": row["mode"],
                             "strategy": row["strategy"], "algorithm": row["algorithm"], "device": row["device"],
                             "cluster.devices": list(range(8)), **FEATURE_SETS[row["features"]],
                             **SHAPES[row["shape"]]}
    if row["strategy"] == "megatron" and row["shape"] == "sp2":
        del flags["extra_overrides"]  # Ulysses SP is FSDP's (Megatron's actor config has no such key)
    if row["mode"] in SPLIT:
        flags["train.tensor_parallel"] = 2  # 4 trainer devices: TP2 x PP2 (as the audit's matrix)
    return flags


def _batch(name: str, version: str, plan: Any) -> dict[str, Any] | None:
    """The plan's command for the validation helper; None when the plan has no entry point (a mode that the
    version lacks: there is nothing of verl's to run)."""
    if any(f.code == "mode_version" for f in plan.findings):
        return None
    e = plan.command.entry
    return {"id": name, "module": e.module, "mode": plan.resolved.spec.mode,
            "config_dir": str(verlcompose.config_dir(version, e.config_dir)), "config_name": e.config_name,
            "overrides": plan.command.override_texts()}


def validate_in_parallel(batches: dict[str, list[dict[str, Any]]], tmp_path: Path) -> dict[str, str | None]:
    """tests/verlvalidate.py on each version's batches, the versions' processes side by side."""
    import json
    import subprocess
    import sys

    from test_verl_validation import HELPER

    procs = {}
    for version, items in batches.items():
        path = tmp_path / f"matrix-{version}.json"
        path.write_text(json.dumps(items), encoding="utf-8")
        procs[version] = subprocess.Popen(
            [sys.executable, str(HELPER), version, str(path), str(verlcompose.verl_root(version))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results: dict[str, str | None] = {}
    for proc in procs.values():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        results.update(json.loads(out.strip().splitlines()[-1]))
    return results


def official_plans(tmp_path: Path) -> list[tuple[str, str, Any]]:
    """verl's official scripts that `import` takes, imported as a user would and planned."""
    import yaml

    import test_import_parity as parity_test
    from verlctl.errors import VerlctlError
    from verlctl.importer import import_script

    parity = parity_test.parity
    out = []
    for rel in sorted(parity_test.SCOPE):
        if "cannot_import" in (parity_test.SCOPE[rel] or {}):
            continue
        tree = parity.TREE[rel.split("/", 1)[0]]
        try:
            result = import_script(parity.FIXTURES / rel, tree, dict(parity.ENVIRON))
        except VerlctlError:
            continue
        path = tmp_path / (rel.replace("/", "_") + ".yaml")
        path.write_text(yaml.safe_dump(result.document), encoding="utf-8")
        paths = result.document.get("paths") or {}
        missing = {k: v for k, v in BASE_PATHS.items() if not paths.get(k.split(".", 1)[1])}  # a $VAR left unset
        plan = make_plan(load_spec(path, flags=missing, environ={}))
        out.append((f"script:{rel}", plan.command.version, plan))
    return out


def _no_v1_trainer(version: str, plan: Any) -> str | None:
    """A mode_version refusal of a V1-trainer mode that the version's verl tree has no registry for."""
    from verlctl.verl.modes import MODES as INFO

    info = INFO.get(plan.resolved.spec.mode)
    if info is None or not info.v1_trainer_mode or version in info.versions:
        return None
    if (verlcompose.verl_root(version) / "verl" / "trainer" / "ppo" / "v1").is_dir():
        return None
    return f"verl {version} has no V1 trainer (no verl/trainer/ppo/v1, so no trainer_mode {info.v1_trainer_mode!r})"


def _requirement(message: str) -> tuple[Any, Any] | None:
    """(feature, requirement) of a feature_prerequisite finding's message (verlctl's feature table)."""
    from verlctl.verl.features import FEATURES

    return next(((f, r) for f in FEATURES for r in f.requires if r.message == message), None)


def _feature_keys(feature: Any) -> list[str]:
    """The feature's Megatron overrides as verl keys (``+`` dropped: is the key in verl's config at all?)."""
    from verlctl.verl.table import STATE

    out = []
    for emit in feature.emits:
        for ov in emit.overrides:
            value = True if ov.value is STATE else (2 if callable(ov.value) else ov.value)
            if ov.key.startswith("actor_rollout_ref.actor.megatron."):
                out.append(f"{ov.key}={value}")
    return out


def mindspeed_is_an_image_fact(version: str) -> str:
    """swap_optimizer acts only through MindSpeed (Ascend): verl's code takes the MindSpeed path only where the
    MindSpeed package is present / the device is an NPU. Executed both ways, from verl's source."""
    import ast
    import sys
    import types

    root = verlcompose.verl_root(version)
    if version == "0.7.0":  # megatron_workers.py:30-33: try: from ...mindspeed... import repatch except ImportError
        path = root / "verl" / "workers" / "megatron_workers.py"
        tree = ast.parse(path.read_text(encoding="utf-8"))
        guard = next(n for n in tree.body if isinstance(n, ast.Try) and "repatch" in ast.unparse(n))
        code = compile(ast.Module(body=[guard], type_ignores=[]), str(path), "exec")
        name = "verl.workers.engine.mindspeed.transformer_impl"
        got = {}
        for present in (False, True):
            saved = {k: sys.modules.get(k) for k in (name, "verl")}
            try:
                sys.modules["verl"] = None if not present else types.ModuleType("verl")  # type: ignore[assignment]
                sys.modules[name] = None if not present else types.SimpleNamespace(  # type: ignore[assignment]
                    repatch=lambda cfg: None)
                env: dict[str, Any] = {}
                exec(code, env)
                got[present] = env["repatch"] is not None
            finally:
                for k, v in saved.items():
                    if v is None:
                        sys.modules.pop(k, None)
                    else:
                        sys.modules[k] = v
        assert got == {False: False, True: True}, got
        return "verl 0.7.0 megatron_workers.py:30-33 repatches MindSpeed only where it imports (the Ascend image)"
    path = root / "verl" / "workers" / "engine" / "mindspeed" / "transformer_impl.py"
    devices = {kw.value.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
               if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("EngineRegistry.register")
               for kw in n.keywords if kw.arg == "device" and isinstance(kw.value, ast.Constant)}
    assert devices == {"npu"}, devices
    return "verl 0.9.1 registers its MindSpeed engine for device npu only (engine/mindspeed/transformer_impl.py)"


def _features_without_form(name: str, version: str, plan: Any, results: dict[str, str | None]) -> str | None:
    """Every error is a feature asked for where verl has no form of it: on a strategy whose config tree lacks
    the feature's keys (verl's Hydra rejects them on this plan's command), or a MindSpeed flag off Ascend."""
    errs = [f for f in plan.findings if f.severity.value == "error"]
    whys = []
    for f in errs:
        fr = _requirement(f.message) if f.code == "feature_prerequisite" else None
        if fr is None:
            return None
        feature, req = fr
        if req.field == "strategy" and results.get(f"{name}#{feature.name}"):
            whys.append(f"{feature.name}: verl's {plan.resolved.spec.strategy} config has no "
                        f"{', '.join(k.split('=')[0] for k in _feature_keys(feature))}")
        elif req.field == "device" and feature.name == "swap_optimizer":
            whys.append(mindspeed_is_an_image_fact(version))
        else:
            return None
    return "; ".join(whys) or None


def _unsupported(plan: Any) -> str | None:
    errs = [f for f in plan.findings if f.severity.value == "error"]
    if errs and all("not supported by verlctl" in f.message for f in errs):
        return "; ".join(f.code for f in errs)
    return None


def _need() -> None:
    for v in VERSIONS:
        if not verlcompose.available(v):
            if os.environ.get("CI"):
                pytest.fail(f"verl {v} config tree missing under {verlcompose.CACHE} (.ci/run installs it)")
            pytest.skip(f"verl {v} not installed under {verlcompose.CACHE}")


def test_the_matrix_covers_every_pair() -> None:
    rows = covering(core_rows())
    assert len(rows) == 84
    got: set[tuple[Any, ...]] = set()
    for r in rows:
        got |= _pairs(r, r["features"], r["shape"])
    assert got == all_pairs(), sorted(all_pairs() - got)[:5]


@pytest.mark.slow  # about a minute of CPU (two verl processes side by side): handed out first under xdist
def test_verl_decides_both_ways_on_the_matrix(tmp_path: Path) -> None:
    _need()
    t0 = time.perf_counter()
    plans: list[tuple[str, str, Any]] = []
    for row in covering(core_rows()):
        name = "/".join(row[k] for k in (*CORE, "features", "shape"))
        plans.append((name, row["version"], make_plan(load_spec(None, flags=_flags(row), environ={}))))
    for mode, strategy, algorithm, device in itertools.product(ABSENT_070, ("megatron", "fsdp", "fsdp2"),
                                                               ("dapo", "grpo"), ("npu", "gpu")):
        row = {"version": "0.7.0", "mode": mode, "strategy": strategy, "algorithm": algorithm, "device": device,
               "features": "default", "shape": "default"}
        plans.append(("/".join(row.values()), "0.7.0", make_plan(load_spec(None, flags=_flags(row), environ={}))))
    for name, version, extra in REFUSAL_CASES:
        flags = {**BASE_PATHS, "verl_version": version, "strategy": "fsdp", "cluster.devices": list(range(8)), **extra}
        plans.append((f"audit:{name}", version, make_plan(load_spec(None, flags=flags, environ={}))))
    plans += official_plans(tmp_path)
    t_plan = time.perf_counter() - t0

    batches: dict[str, list[dict[str, Any]]] = {v: [] for v in VERSIONS}
    for name, version, plan in plans:
        if (b := _batch(name, version, plan)) is not None:
            batches[version].append(b)
            # a feature refused on a strategy without it: its Megatron keys against this plan's config tree
            for f in plan.findings:
                if f.code == "feature_prerequisite" and (fr := _requirement(f.message)) and fr[1].field == "strategy":
                    batches[version].append({**b, "id": f"{name}#{fr[0].name}",
                                             "overrides": [*b["overrides"], *_feature_keys(fr[0])]})
    results = validate_in_parallel(batches, tmp_path)

    accepted = [(n, p) for n, _, p in plans if p.ok]
    refused = [(n, v, p) for n, v, p in plans if not p.ok]
    rejected = {n: results[n] for n, _ in accepted if results.get(n) is not None}
    by_verl, no_v1, unsupported, unexplained = {}, {}, {}, []
    for name, version, plan in refused:
        if results.get(name):
            by_verl[name] = str(results[name])
        elif (why := _features_without_form(name, version, plan, results)) is not None:
            by_verl[name] = why
        elif (why := _no_v1_trainer(version, plan)) is not None:
            no_v1[name] = why
        elif (why := _unsupported(plan)) is not None:
            unsupported[name] = why
        else:
            unexplained.append(f"{name}: {[f.line() for f in plan.findings if f.severity.value == 'error']}")
    n_scripts = sum(1 for n, _, _ in plans if n.startswith("script:"))
    print(f"\nverl oracle matrix: {len(plans)} plans (84 matrix rows, {len(ABSENT_070) * 12} 0.7.0 rows of 0.9.1 "
          f"modes, {len(REFUSAL_CASES)} audit cases, "
          f"{n_scripts} official scripts) in {time.perf_counter() - t0:.0f} s (planning {t_plan:.0f} s); "
          f"{len(accepted)} accepted, {len(rejected)} accepted but rejected by verl; {len(refused)} refused: "
          f"{len(by_verl)} fail in verl, {len(no_v1)} modes verl lacks, {len(unsupported)} not supported by "
          f"verlctl, {len(unexplained)} unexplained refusals")
    kinds: dict[str, int] = {}
    for name, why in unsupported.items():
        plan = next(p for n, _, p in plans if n == name)
        key = f"verl {plan.command.version} {plan.resolved.spec.mode}: {why}"
        kinds[key] = kinds.get(key, 0) + 1
    for key, count in sorted(kinds.items()):
        print(f"  not supported by verlctl: {key} ({count} plans)")
    codes: dict[str, int] = {}
    for name, _, plan in refused:
        if name in by_verl:
            for c in {f.code for f in plan.findings if f.severity.value == "error"}:
                codes[c] = codes.get(c, 0) + 1
    print(f"  refusals verl's code rejects, by finding: {dict(sorted(codes.items()))}")
    for name, why in sorted(rejected.items()):
        print(f"  ACCEPTED BUT REJECTED: {name}: {why[:160]}")
    for line in unexplained:
        print(f"  UNEXPLAINED: {line[:300]}")
    assert not rejected, dict(list(rejected.items())[:5])
    assert not unexplained, unexplained[:5]
    assert len(accepted) >= 40 and len(by_verl) >= 10 and n_scripts >= 30


# ------------------------------------------------------------------ refusals that rest on a device fact


def _verl_ipc_check() -> Any:
    """verl 0.9.1's own ``check_ipc_version_support`` (utils/device.py), compiled from its source (the module
    imports torch)."""
    import ast
    import logging
    import re

    from packaging import version

    path = verlcompose.verl_root("0.9.1") / "verl" / "utils" / "device.py"
    fn = next(n for n in ast.parse(path.read_text(encoding="utf-8")).body
              if isinstance(n, ast.FunctionDef) and n.name == "check_ipc_version_support")
    ns: dict[str, Any] = {"re": re, "version": version, "logger": logging.getLogger("verl-ipc")}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(path), "exec"), ns)
    return ns["check_ipc_version_support"]


def _verl_bucket_assert() -> Any:
    """verl 0.9.1's weight-sync sender statement that stops a sync (BucketedWeightSender, compiled from its
    source): ``if offset + weight.nbytes > self.bucket_size: assert not self.use_shm, ...``."""
    import ast

    path = verlcompose.verl_root("0.9.1") / "verl" / "workers" / "rollout" / "vllm_rollout" / "bucketed_weight_transfer.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.If) and isinstance(n.body[0], ast.Assert)
                and ast.unparse(n.test) == "offset + weight.nbytes > self.bucket_size"
                and "use_shm" in ast.unparse(n.body[0].test))
    stmt = ast.If(test=node.test, body=[node.body[0]], orelse=[])
    return compile(ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[])), str(path), "exec")


def test_a_refusal_on_a_device_fact_is_verls_code_with_the_fact_both_ways() -> None:
    """The weight-sync bucket refusal (``check`` knows the NPU driver and the image's CANN) on every 0.9.1 NPU
    vLLM row of the matrix: verlctl refuses exactly where verl's code stops the first weight sync, run with the
    fact both ways: verl's own ``check_ipc_version_support`` on the versions (``use_shm = not is_support_ipc()``,
    ``vllm_rollout.py:143``) and the sender's assert on the plan's largest synced tensor and bucket."""
    import types

    from test_field_checks import QWEN3_8B
    from verlctl.checks import field_checks as fc
    from verlctl.checks.memory import BUCKET_DEFAULT_MB, BUCKET_KEY, ModelShape

    if not verlcompose.available("0.9.1"):
        pytest.skip("verl 0.9.1 not installed")
    verl_ipc, sender = _verl_ipc_check(), _verl_bucket_assert()
    shape = ModelShape.from_config(QWEN3_8B)
    assert shape is not None
    facts = {"no IPC": fc.IpcFacts(a5=False, hdk="25.0.rc1.1", cann="8.3.rc1"),
             "IPC": fc.IpcFacts(a5=False, hdk="25.3.rc1.2", cann="8.3.rc1")}
    rows = [r for r in covering(core_rows()) if r["version"] == "0.9.1" and r["device"] == "npu"]
    refused = agreed = 0
    for row in rows:
        resolved = load_spec(None, flags=_flags(row), environ={})
        spec = resolved.spec
        _dtype, size = fc.synced_dtype(spec)
        given = [o.partition("=")[2] for o in spec.extra_overrides if o.lstrip("+").startswith(BUCKET_KEY["0.9.1"] + "=")]
        bucket_mb = int(given[-1]) if given else BUCKET_DEFAULT_MB["0.9.1"]
        for what, ipc in facts.items():
            ours = [f.code for f in fc.check_weight_bucket(spec, "0.9.1", shape, ipc) if f.severity.value == "error"]
            use_shm = not verl_ipc(ipc.hdk, ipc.cann)
            sender_self = types.SimpleNamespace(bucket_size=bucket_mb << 20, bucket_size_mb=bucket_mb, use_shm=use_shm)
            weight = types.SimpleNamespace(nbytes=shape.largest_tensor_numel * size, shape=(shape.vocab, shape.hidden),
                                           dtype=_dtype)
            try:
                exec(sender, {"self": sender_self, "offset": 0, "weight": weight, "name": "embed_tokens.weight"})
                verl_stops = False
            except AssertionError:
                verl_stops = True
            assert (ours == ["weight_bucket_too_small"]) is verl_stops, (row, what, ours)
            refused += verl_stops
            agreed += 1
    print(f"\nweight-sync bucket on {len(rows)} 0.9.1 NPU rows x 2 IPC facts: {refused} refused, each where verl's "
          f"sender stops; {agreed - refused} accepted")
    assert refused >= 5 and agreed - refused >= len(rows)
