"""The known-defect gate (issue 23): a data table matched against the versions read inside the image.

The versions come from the real probe snippet (``VERSIONS_SNIPPET``, run with python3) over an "image" made of
installed-distribution metadata (``*.dist-info``) and a CANN install record, never from an image tag.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from verlctl.checks.defects import known_defect_findings
from verlctl.checks.findings import Severity
from verlctl.detect.check_probes import VERSIONS_SNIPPET, ImageVersions, parse_versions
from verlctl.spec.resolve import load_spec
from verlctl.verl import known_defects

from conftest import BASE_PATHS, ROOT


def installed(tmp: Path, dists: dict[str, str], cann: str | None = None,
              extra_path: Path | None = None) -> ImageVersions:
    """The real probe over a site dir holding these distributions' metadata (and a CANN toolkit record)."""
    site = tmp / "site"
    site.mkdir(parents=True, exist_ok=True)
    for name, version in dists.items():
        d = site / f"{name}-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    path = os.pathsep.join([str(site), *([str(extra_path)] if extra_path else [])])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": path, "PYTHONNOUSERSITE": "1"}
    if cann:
        home = tmp / "Ascend" / "ascend-toolkit" / "latest"
        (home / "aarch64-linux").mkdir(parents=True)
        (home / "aarch64-linux" / "ascend_toolkit_install.info").write_text(
            f"package_name=Ascend-cann-toolkit\nversion={cann}\narch=aarch64\n", encoding="utf-8")
        env["ASCEND_TOOLKIT_HOME"] = str(home)
    else:
        env["ASCEND_TOOLKIT_HOME"] = str(tmp / "no-toolkit")
    res = subprocess.run([sys.executable, "-S", "-c", VERSIONS_SNIPPET], capture_output=True, text=True, env=env,
                         timeout=60, check=True)
    v = parse_versions(res.stdout, "container verl-test")
    assert v is not None, res.stdout
    return v


def spec(**flags):
    return load_spec(None, flags={**BASE_PATHS, "verl_version": "0.9.1", "cluster.devices": list(range(8)), **flags},
                     environ={}).spec


def codes(findings):
    return [(f.severity, f.message.split(":")[0]) for f in findings if f.code == "known_defect"]


def test_the_probe_reads_the_stack_in_the_image(tmp_path: Path) -> None:
    v = installed(tmp_path, {"verl": "0.9.0", "torch_npu": "2.8.0.post2", "vllm_ascend": "0.11.0rc1"}, cann="8.3.RC1")
    assert v.stack["verl"] == "0.9.0" and v.stack["torch_npu"] == "2.8.0.post2"
    assert v.stack["vllm_ascend"] == "0.11.0rc1" and v.stack["cann"] == "8.3.RC1"
    assert v.stack["vllm"] is None and v.stack["torch"] is None


@pytest.mark.parametrize("mode", ["one_step_off_policy", "separate_async", "fully_async"])
def test_verl_090_on_npu_breaks_hccl_weight_sync_in_every_disaggregated_mode(tmp_path: Path, mode: str) -> None:
    bad = installed(tmp_path / "a", {"verl": "0.9.0"})
    good = installed(tmp_path / "b", {"verl": "0.9.1", "TransferQueue": "0.1.10"})
    f = known_defect_findings(spec(mode=mode), set(), bad)
    assert codes(f) == [(Severity.ERROR, "known defect verl_090_npu_hccl_weight_sync (verl 0.9.0 in container verl-test)")]
    assert "#7416" in f[0].message and "#7487" in f[0].message and "0.9.1" in (f[0].hint or "")
    assert "#7488 on main" in f[0].message and "release/v0.9.0 only" not in f[0].message  # the fix is on both
    assert codes(known_defect_findings(spec(mode=mode, strategy="fsdp"), set(), good)) == []
    assert codes(known_defect_findings(spec(mode=mode, device="gpu"), set(), bad)) == []
    assert codes(known_defect_findings(spec(mode="sync"), set(), bad)) == []


def test_the_tag_is_never_read(tmp_path: Path) -> None:
    """An image whose TAG says v0.9.0 but whose installed verl is 0.9.1 does not match the 0.9.0 entry."""
    s = spec(mode="separate_async", **{"container.image": "quay.io/ascend/verl:v0.9.0-cann9.0.0-a3-ubuntu22.04"})
    assert codes(known_defect_findings(s, set(), installed(tmp_path, {"verl": "0.9.1", "TransferQueue": "0.1.10"}))) == []
    # ... and with nothing read there is no claim either way
    assert codes(known_defect_findings(s, set(), installed(tmp_path / "x", {}))) == []


def test_old_torch_npu_silently_loses_expandable_segments(tmp_path: Path) -> None:
    old = installed(tmp_path / "a", {"verl": "0.9.1", "torch_npu": "2.8.0.post2", "TransferQueue": "0.1.10"})
    new = installed(tmp_path / "b", {"verl": "0.9.1", "torch_npu": "2.9.0", "TransferQueue": "0.1.10"})
    f = known_defect_findings(spec(), set(), old)
    assert codes(f) == [(Severity.WARNING, "known defect torch_npu_expandable_segments_off (verl 0.9.1, torch_npu "
                                           "2.8.0.post2 in container verl-test)")]
    assert codes(known_defect_findings(spec(), set(), new)) == []
    # The fix does not send the user into another defect: it no longer advises exporting expandable segments
    # (vLLM-Ascend's sleep mode refuses it), and says so.
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True" in (f[0].hint or "")
    assert "Do not export" in (f[0].hint or "") and "sleep mode" in (f[0].hint or "")
    assert "no longer sets PYTORCH_NPU_ALLOC_CONF" not in f[0].message  # no verl release ever set it
    assert "set_allocator_settings" in f[0].message and "platform_npu.py:100-107" in f[0].message
    env = {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}}
    assert codes(known_defect_findings(spec(**env), set(), old)) == [
        (Severity.ERROR, "known defect vllm_ascend_sleep_mode_expandable_segments")]


@pytest.mark.parametrize(("device", "name", "entry"), [
    ("npu", "PYTORCH_NPU_ALLOC_CONF", "vllm_ascend_sleep_mode_expandable_segments"),
    ("gpu", "PYTORCH_CUDA_ALLOC_CONF", "vllm_sleep_mode_expandable_segments"),
])
def test_expandable_segments_in_the_env_break_vllms_sleep_mode(device: str, name: str, entry: str) -> None:
    """vLLM's (and vLLM-Ascend's) sleep-mode allocator asserts 'Expandable segments are not compatible with memory
    pool'; verl turns sleep mode on by default. ``plan`` decides it (no version needed)."""
    from verlctl.commands.check import spec_findings

    def found(**flags):
        resolved = load_spec(None, flags={**BASE_PATHS, "device": device, "strategy": "fsdp", **flags}, environ={})
        return [f for f in spec_findings(resolved)[0] if f.code == "known_defect"]

    bad = found(env={name: "max_split_size_mb:256,expandable_segments:True"})
    assert [(f.severity, f.field) for f in bad] == [(Severity.ERROR, f"env.{name}")]
    assert entry in bad[0].message and "memory pool" in bad[0].message and "enable_sleep_mode=False" in (bad[0].hint or "")
    assert found(env={name: "expandable_segments:False"}) == []
    assert found() == []
    off = "actor_rollout_ref.rollout.enable_sleep_mode=False"
    assert found(env={name: "expandable_segments:True"}, extra_overrides=[off]) == []
    assert found(env={name: "expandable_segments:True"}, **{"train.rollout_engine": "sglang"}) == []


def test_device_ids_out_of_order_are_refused_by_plan() -> None:
    from verlctl.commands.check import spec_findings

    def found(devices):
        resolved = load_spec(None, flags={**BASE_PATHS, "cluster.devices": devices, "strategy": "fsdp"}, environ={})
        return [f for f in spec_findings(resolved)[0] if f.code == "known_defect"]

    bad = found([1, 0, 2, 3, 4, 5, 6, 7])
    assert [(f.severity, f.field) for f in bad] == [(Severity.ERROR, "cluster.devices")]
    assert "ascending" in bad[0].message and "Trinity-RFT PR #618" in bad[0].message
    assert found(list(range(8))) == []


def test_a_new_entry_needs_no_code_change(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "defects.yaml"
    table.write_text(known_defects.TABLE.read_text(encoding="utf-8") + """
  - id: vllm_ascend_graph_capture
    issue: "vllm-project/vllm-ascend #9596"
    effect: "ACL graph capture fails at engine init with TP 8"
    fix: "set actor_rollout_ref.rollout.enforce_eager=True"
    severity: warning
    when:
      vllm_ascend: ">=0.11.0,<0.12"
      cann: "<9.0"
      device: [npu]
      modes: [sync, separate_async]
      features: [prefix_cache]
""", encoding="utf-8")
    monkeypatch.setenv("VERLCTL_KNOWN_DEFECTS", str(table))
    v = installed(tmp_path, {"verl": "0.9.1", "vllm_ascend": "0.11.0rc1", "TransferQueue": "0.1.10"}, cann="8.3.RC1")
    f = known_defect_findings(spec(mode="separate_async"), {"prefix_cache"}, v)
    assert codes(f) == [(Severity.WARNING, "known defect vllm_ascend_graph_capture (vllm_ascend 0.11.0rc1, cann "
                                           "8.3.RC1 in container verl-test)")]
    assert codes(known_defect_findings(spec(mode="separate_async"), set(), v)) == []  # the feature is off
    assert codes(known_defect_findings(spec(mode="fully_async", strategy="fsdp"), {"prefix_cache"}, v)) == []


@pytest.mark.parametrize(("entry", "says"), [
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: fatal\n", "severity must be error or warning"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {verl: '0.9'}\n",
     "when.verl part '0.9' is not <op><version>"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {cuda: '<12'}\n",
     "unknown condition 'cuda'"),
    ("  - id: x\n    effect: e\n    fix: f\n    severity: error\n", "'issue' is missing"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {env_contains: A}\n",
     "when.env_contains must be a mapping"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {engine: vllm}\n",
     "when.engine must be a list"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {missing: [cuda]}\n",
     "when.missing names 'cuda', not a component read in the image"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {strategy: megatron}\n",
     "when.strategy must be a list"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {unless_set: k}\n",
     "when.unless_set must be a list"),
    ("  - id: x\n    issue: i\n    effect: e\n    fix: f\n    severity: error\n    when: {override: [k]}\n",
     "when.override must be a mapping"),
])
def test_a_malformed_table_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str,
                                              says: str) -> None:
    table = tmp_path / "bad.yaml"
    table.write_text("defects:\n" + entry, encoding="utf-8")
    monkeypatch.setenv("VERLCTL_KNOWN_DEFECTS", str(table))
    f = known_defect_findings(spec(), set(), None)
    assert [x.code for x in f] == ["known_defect_table"] and says in f[0].message, f[0].message
    assert "\n" not in f[0].message


def test_the_packaged_table_is_valid_and_ships_with_the_package() -> None:
    ids = [d.id for d in known_defects.load()]
    assert ids[:5] == ["verl_090_npu_hccl_weight_sync", "torch_npu_expandable_segments_off",
                       "vllm_ascend_sleep_mode_expandable_segments", "vllm_sleep_mode_expandable_segments",
                       "ascend_visible_devices_not_ascending"]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert "verl/*.yaml" in pyproject


def test_check_matches_the_table_against_the_image_facts(tmp_path: Path) -> None:
    """`verlctl check`'s machine findings: the versioned entries, from the stack the probe read."""
    from verlctl.checks.facts import CheckFacts
    from verlctl.checks.machine_checks import machine_findings
    from verlctl.detect.machine import MachineState

    flags = {**BASE_PATHS, "verl_version": "0.9.1", "mode": "separate_async", "container.runtime": "host",
             "cluster.devices": list(range(8)), "strategy": "fsdp"}
    resolved = load_spec(None, flags=flags, environ={})
    stack = installed(tmp_path, {"verl": "0.9.0", "ray": "2.49.0"})
    found = [f for f in machine_findings(resolved, CheckFacts(machine=MachineState(), image_versions=stack))
             if f.code == "known_defect"]
    assert [(f.severity, f.field) for f in found] == [(Severity.ERROR, "container.runtime")]
    assert "verl_090_npu_hccl_weight_sync" in found[0].message
    assert not [f for f in machine_findings(resolved, CheckFacts(machine=MachineState(), image_versions=None))
                if f.code == "known_defect"]


# --- verl 0.9.1's V1 trainer, fully_async's optimizer step count: entries whose citations are checked against the
# verl 0.9.1 wheel under .cache/verl (set-up in CONTRIBUTING), and whose effect and fix run verl's own code.

VERL_091 = ROOT / ".cache" / "verl" / "0.9.1"


def verl_091(rel: str) -> list[str]:
    path = VERL_091 / rel
    if not path.is_file():
        pytest.skip(f"the verl 0.9.1 wheel is not under .cache/verl ({rel})")
    return path.read_text(encoding="utf-8").splitlines()


def verl_function(rel: str, name: str, scope: dict) -> object:
    """verl 0.9.1's own function ``name`` from ``rel``, run against ``scope`` (the names its module imports)."""
    import ast

    tree = ast.parse("\n".join(verl_091(rel)))
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    exec(compile(ast.Module(body=[node], type_ignores=[]), rel, "exec"), scope)  # noqa: S102 - verl's code
    return scope[name]


def entry(did: str) -> known_defects.Defect:
    return next(d for d in known_defects.load() if d.id == did)


@pytest.mark.parametrize(("rel", "line", "text"), [
    ("verl/trainer/main_ppo.py", 137, "import transfer_queue as tq"),
    ("verl/trainer/main_ppo.py", 183, "if config.trainer.use_v1:"),
    ("verl/trainer/config/ppo_trainer.yaml", 232, "use_v1: true"),
    ("verl/trainer/ppo/v1/trainer_base.py", 30, "import transfer_queue as tq"),
    ("verl/experimental/fully_async_policy/fully_async_main.py", 78, "self._create_trainer(config)"),
    ("verl/experimental/fully_async_policy/fully_async_main.py", 92, "set_total_train_steps.remote(total_train_steps)"),
    ("verl/experimental/fully_async_policy/fully_async_main.py", 155, "ray.get(trainer.init_workers.remote())"),
    ("verl/experimental/fully_async_policy/fully_async_rollouter.py", 498, "self.total_train_steps = int("),
    ("verl/experimental/fully_async_policy/fully_async_rollouter.py", 501, ")"),
    ("verl/utils/megatron/optimizer.py", 242, "lr_decay_steps = config.total_training_steps"),
    ("verl/trainer/config/optim/megatron.yaml", 10, "total_training_steps: -1"),
    ("verl/workers/engine/fsdp/transformer_impl.py", 508, "total_steps = optim_config.total_training_steps"),
    ("verl/workers/engine/fsdp/transformer_impl.py", 527, "num_training_steps=total_steps,"),
    ("verl/utils/torch_functional.py", 761, "num_training_steps - num_warmup_steps"),
    ("verl-0.9.1.dist-info/METADATA", None, 'Requires-Dist: TransferQueue>=0.1.10; extra == "verl-core"'),
])
def test_the_new_entries_cite_lines_that_say_so(rel: str, line: int | None, text: str) -> None:
    lines = verl_091(rel)
    if line is None:
        assert text in lines
    else:
        assert text in lines[line - 1], (rel, line, lines[line - 1])
    if line is not None:  # the entry cites this file at this line (alone, in a list "78,155" or a range)
        import re

        cited = " ".join(d.issue + " " + d.fix for d in known_defects.load())
        name = re.escape(rel.rsplit("/", 1)[-1])
        spans = [(int(a), int(b or a)) for part in re.findall(rf"{name}:([\d,-]+)", cited)
                 for a, b in re.findall(r"(\d+)(?:-(\d+))?", part)]
        assert any(a <= line <= b for a, b in spans), (rel, line, spans)


def test_every_cited_number_is_an_address() -> None:
    """The new entries cite their verl issues and PRs as addresses a reader can open."""
    for did, numbers in (("verl_v1_trainer_without_transfer_queue", ("issues/7320",)),
                         ("fully_async_megatron_lr_decay_steps", ("pull/6987",)),
                         ("fully_async_fsdp_cosine_lr_without_total_steps", ("issues/6683",))):
        for n in numbers:
            assert f"https://github.com/verl-project/verl/{n}" in entry(did).issue


def test_verl_091_v1_trainer_without_transfer_queue_is_refused_by_the_image(tmp_path: Path) -> None:
    without = installed(tmp_path / "a", {"verl": "0.9.1"})
    with_tq = installed(tmp_path / "b", {"verl": "0.9.1", "TransferQueue": "0.1.10"})
    assert without.stack["transfer_queue"] is None and with_tq.stack["transfer_queue"] == "0.1.10"
    for mode in ("sync", "colocate_async", "separate_async"):
        f = known_defect_findings(spec(mode=mode, strategy="fsdp"), set(), without)
        assert codes(f) == [(Severity.ERROR, "known defect verl_v1_trainer_without_transfer_queue (verl 0.9.1, no "
                                             "transfer_queue in container verl-test)")], mode
        assert "TransferQueue>=0.1.10" in (f[0].hint or "") and f[0].field == "container.image"
        assert codes(known_defect_findings(spec(mode=mode, strategy="fsdp"), set(), with_tq)) == []
    # the experimental trainers do not import it; verl 0.7.0 has no V1 trainer
    for mode in ("fully_async", "one_step_off_policy"):
        assert codes(known_defect_findings(spec(mode=mode, strategy="fsdp"), set(), without)) == []
    old = installed(tmp_path / "c", {"verl": "0.7.0"})
    assert codes(known_defect_findings(spec(mode="sync", strategy="fsdp"), set(), old)) == []
    # the legacy trainer (sync, trainer.use_v1=False) does not import it
    legacy = spec(mode="sync", strategy="fsdp", extra_overrides=["trainer.use_v1=False"])
    assert codes(known_defect_findings(legacy, set(), without)) == []
    # a stack read by a probe that did not look for it makes no claim; plan (nothing read) makes none either
    unread = ImageVersions(where="container old-probe", stack={"verl": "0.9.1"})
    assert codes(known_defect_findings(spec(mode="sync", strategy="fsdp"), set(), unread)) == []
    assert codes(known_defect_findings(spec(mode="sync", strategy="fsdp"), set(), None)) == []


def test_a_transfer_queue_module_without_metadata_is_not_missing(tmp_path: Path) -> None:
    """A TransferQueue source tree on PYTHONPATH has no dist-info: the probe locates the module (find_spec, which
    does not run it), and the gate makes no claim."""
    v = installed(tmp_path, {"verl": "0.9.1"})
    assert v.stack["transfer_queue"] is None
    pkg = tmp_path / "site" / "transfer_queue"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise SystemExit('the probe must not import transfer_queue')\n", encoding="utf-8")
    v = installed(tmp_path / "again", {"verl": "0.9.1"}, extra_path=tmp_path / "site")
    assert v.stack["transfer_queue"] == "found (no distribution metadata)"
    assert codes(known_defect_findings(spec(mode="sync", strategy="fsdp"), set(), v)) == []


def test_the_transfer_queue_entry_covers_the_modes_whose_entry_point_imports_it() -> None:
    """One fact, two users: the in-target look-up imports what the entry point needs (Entry.imports); the gate's
    entry names exactly the modes whose 0.9.1 entry point needs transfer_queue."""
    from verlctl.verl.entrypoints import entry_for
    from verlctl.verl.modes import version_problem

    modes = ("sync", "one_step_off_policy", "colocate_async", "separate_async", "fully_async")
    needs = {m for m in modes if not version_problem(m, "0.9.1")
             for strategy in ("fsdp", "megatron") for algorithm in ("grpo", "dapo")
             if "transfer_queue" in entry_for("0.9.1", algorithm, m, strategy).imports}
    assert set(entry("verl_v1_trainer_without_transfer_queue").when["modes"]) == needs


@pytest.mark.parametrize("strategy", ["megatron", "fsdp"])
def test_fully_async_megatron_on_091_stops_at_init_workers(tmp_path: Path, strategy: str) -> None:
    v = installed(tmp_path, {"verl": "0.9.1", "TransferQueue": "0.1.10"})

    def found(**flags):
        return codes(known_defect_findings(spec(mode="fully_async", strategy=strategy, **flags), set(), v))

    if strategy == "fsdp":
        assert found() == []
        return
    f = known_defect_findings(spec(mode="fully_async", strategy="megatron"), set(), v)
    assert codes(f) == [(Severity.ERROR, "known defect fully_async_megatron_lr_decay_steps (verl 0.9.1 in "
                                         "container verl-test)")]
    assert "lr_decay_steps > 0" in f[0].message and "total_training_steps=N" in (f[0].hint or "")
    assert found(extra_overrides=["actor_rollout_ref.actor.optim.total_training_steps=120"]) == []
    assert found(extra_overrides=["actor_rollout_ref.actor.optim.lr_decay_steps=120"]) == []
    assert found(extra_overrides=["actor_rollout_ref.actor.optim.total_training_steps=-1"]) != []
    assert codes(known_defect_findings(spec(mode="separate_async", strategy="megatron"), set(), v)) == []
    old = installed(tmp_path / "old", {"verl": "0.7.0"})
    assert codes(known_defect_findings(spec(mode="fully_async", strategy="megatron"), set(), old)) == []


def test_verl_builds_megatrons_scheduler_from_the_step_count_the_fix_sets() -> None:
    """verl 0.9.1's get_megatron_optimizer_param_scheduler over its own optim/megatron.yaml: lr_decay_steps is
    -1 (megatron-core's OptimizerParamScheduler asserts > 0) until total_training_steps is given."""
    from omegaconf import OmegaConf

    seen: dict = {}

    class OptimizerParamSchedulerDouble:  # test double for megatron-core's class (not installed here)
        def __init__(self, optimizer, **kwargs):
            seen.update(kwargs)

    build = verl_function("verl/utils/megatron/optimizer.py", "get_megatron_optimizer_param_scheduler",
                          {"OptimizerParamScheduler": OptimizerParamSchedulerDouble})
    cfg = OmegaConf.load(VERL_091 / "verl/trainer/config/optim/megatron.yaml")
    build(None, cfg)
    assert seen["lr_decay_steps"] == -1
    cfg.total_training_steps = 120  # the fix: actor_rollout_ref.actor.optim.total_training_steps=120
    build(None, cfg)
    assert seen["lr_decay_steps"] == 120 and seen["lr_warmup_steps"] < 120


def test_fully_async_fsdp_cosine_schedule_without_steps_is_a_warning(tmp_path: Path) -> None:
    v = installed(tmp_path, {"verl": "0.9.1", "TransferQueue": "0.1.10"})
    cosine = "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"

    def found(strategy="fsdp", mode="fully_async", *overrides):
        return codes(known_defect_findings(spec(mode=mode, strategy=strategy, extra_overrides=list(overrides)),
                                           set(), v))

    warn = [(Severity.WARNING, "known defect fully_async_fsdp_cosine_lr_without_total_steps (verl 0.9.1 in "
                               "container verl-test)")]
    assert found("fsdp", "fully_async", cosine) == warn and found("fsdp2", "fully_async", cosine) == warn
    assert found("fsdp", "fully_async") == []  # verl's default constant schedule
    assert found("fsdp", "fully_async", cosine, "actor_rollout_ref.actor.optim.total_training_steps=120") == []
    assert found("fsdp", "sync", cosine) == []


def test_verls_cosine_schedule_built_for_minus_one_steps_puts_every_other_step_at_lr_0() -> None:
    """verl 0.9.1's get_cosine_schedule_with_warmup, as the FSDP engine calls it with total_training_steps -1."""
    import math

    class LambdaLRDouble:  # test double for torch's LambdaLR (torch is not installed here): keeps the lambda
        def __init__(self, optimizer, lr_lambda, last_epoch=-1):
            self.lr_lambda = lr_lambda

    make = verl_function("verl/utils/torch_functional.py", "get_cosine_schedule_with_warmup",
                         {"LambdaLR": LambdaLRDouble, "math": math, "Optimizer": object})
    broken = make(None, num_warmup_steps=0, num_training_steps=-1).lr_lambda
    assert [broken(s) for s in range(4)] == [1.0, 0.0, 1.0, 0.0]
    fixed = make(None, num_warmup_steps=0, num_training_steps=120).lr_lambda
    assert all(fixed(s) > 0.9 for s in range(1, 4))
