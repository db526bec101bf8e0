"""Checks that need the machine: paths, devices, the model's shape against the parallel layout, the network
interface, the image and the container.

The rules are pure (a spec plus facts in, findings out; ``field`` is always the spec path the finding is
about) and live by concern in :mod:`~verlctl.checks.model_checks`, :mod:`~verlctl.checks.dataset_checks`,
:mod:`~verlctl.checks.checkpoints`, :mod:`~verlctl.checks.devices`, :mod:`~verlctl.checks.network`,
:mod:`~verlctl.checks.container` and :mod:`~verlctl.checks.storage`. They read a
:class:`~verlctl.checks.facts.CheckFacts`, which ``orchestrator.machine_facts.collect_facts`` gathers (the probes in
``detect``, Docker through the runtime) or a test builds from parsed captures. This module runs them all and
summarises what was found.
"""

from __future__ import annotations

from typing import Any

from verlctl.checks.checkpoints import (
    CHECKPOINT_BYTES_PER_PARAM,
    CHECKPOINT_FORMULA,
    COMFORTABLE_CHECKPOINTS,
    check_checkpoints,
    checkpoint_bytes,
)
from verlctl.checks.container import check_docker, check_recipe
from verlctl.checks.dataset_checks import PARQUET_INSTALL_HINT, check_datasets
from verlctl.checks.devices import check_devices, npu_logical_id
from verlctl.checks.facts import CheckFacts
from verlctl.checks.findings import Finding
from verlctl.checks.model_checks import (
    UNEVEN_PP_KEYS,
    check_model_fit,
    check_model_path,
    megatron_tp_ok,
    vllm_tp_ok,
)
from verlctl.checks.network import check_network, find_interface, is_head, local_ipv4
from verlctl.checks.units import params_text, total_devices
from verlctl.detect.check_probes import CheckpointProbe, DatasetCheck, DockerFacts, FileProbe
from verlctl.detect.common import Unavailable
from verlctl.detect.datasets import DatasetInfo
from verlctl.detect.gpu import GpuInfo
from verlctl.detect.machine import MachineState
from verlctl.detect.models import ModelInfo
from verlctl.detect.network import NetworkInfo
from verlctl.detect.npu import NpuInfo
from verlctl.spec.model import RunSpec
from verlctl.spec.resolve import ResolvedSpec

__all__ = [  # the rules by concern, re-exported for the callers of this module
    "CHECKPOINT_BYTES_PER_PARAM", "CHECKPOINT_FORMULA", "COMFORTABLE_CHECKPOINTS", "PARQUET_INSTALL_HINT",
    "UNEVEN_PP_KEYS", "CheckFacts", "CheckpointProbe", "DatasetCheck", "DockerFacts", "FileProbe",
    "check_checkpoints", "check_datasets", "check_devices", "check_docker", "check_model_fit", "check_model_path",
    "check_network", "check_recipe", "checkpoint_bytes", "describe_machine", "is_head", "local_ipv4",
    "machine_findings", "megatron_tp_ok", "npu_logical_id", "params_text", "summarize", "total_devices",
    "vllm_tp_ok",
]


def _recompute_on(resolved: ResolvedSpec) -> bool:
    from verlctl.verl.compose import effective_version, resolve_features

    states, _ = resolve_features(resolved, effective_version(resolved)[0])
    st = states.get("recompute")
    return bool(st and st.on and st.applicable)


def _target_version(resolved: ResolvedSpec) -> str:
    from verlctl.verl.compose import effective_version

    return effective_version(resolved)[0]


def machine_findings(resolved: ResolvedSpec, facts: CheckFacts, vpp_on: bool | None = None) -> list[Finding]:
    """Every machine rule of the verdict (``checks/verdict_rules.py``: the fact rules other than the memory
    and field-failure family of :func:`verlctl.checks.field_checks.memory_and_field_findings`) on the facts
    :func:`collect_facts` gathered (or a test built). ``vpp_on``: kept for callers; the feature states come
    from the composed command."""
    from verlctl.checks.field_checks import FIELD_RULES
    from verlctl.checks.verdict import VerdictCtx, fact_rules
    from verlctl.verl.compose import build_command

    ctx = VerdictCtx(resolved, build_command(resolved), facts)
    out: list[Finding] = []
    for r in fact_rules():
        if r.name not in FIELD_RULES:
            out += r.run(ctx)
    return out


def _accelerator_summary(spec: RunSpec, machine: MachineState) -> dict[str, Any]:
    if spec.device == "cpu":
        return {"tool": None, "status": "not_applicable", "reason": "device: cpu (the demo device layer)"}
    result = machine.npu if spec.device == "npu" else machine.gpu
    tool = "npu-smi" if spec.device == "npu" else "nvidia-smi"
    if isinstance(result, Unavailable):
        return {"tool": tool, "status": "unavailable", "reason": result.reason}
    if isinstance(result, NpuInfo):
        busy: dict[int, list[int]] = {}
        for p in result.processes:
            busy.setdefault(p.device, []).append(p.pid)
        devices = [
            {"id": npu_logical_id(d), "npu": d.id, "chip": d.chip, "name": d.name, "health": d.health,
             "pids": busy.get(d.id, [])}
            for d in result.devices
        ]
        return {"tool": tool, "status": "ok", "version": result.tool_version, "devices": devices}
    if isinstance(result, GpuInfo):
        devices = [
            {"id": d.id, "name": d.name, "pids": [p.pid for p in result.processes if p.device == d.id]}
            for d in result.devices
        ]
        return {"tool": tool, "status": "ok", "version": result.driver_version, "devices": devices}
    return {"tool": tool, "status": "not_checked"}


def _network_summary(spec: RunSpec, network: NetworkInfo | Unavailable | None, master_ips: list[str]) -> dict[str, Any]:
    if not isinstance(network, NetworkInfo):
        return {"status": "unavailable", "reason": network.reason if network else "not checked"}
    name = spec.cluster.socket_ifname
    iface = find_interface(network, name) if name else None
    return {
        "status": "ok",
        "default_interface": network.default_interface,
        "socket_ifname": name,
        "socket_ifname_up": iface.is_up if iface else None,
        "socket_ifname_ipv4": iface.ipv4_addresses if iface else [],
        "master_addr": spec.cluster.master_addr,
        "master_ips": master_ips,
        "is_head": is_head(spec, network, master_ips),
    }


def _model_summary(model: ModelInfo | Unavailable | None) -> dict[str, Any] | None:
    if model is None:
        return None
    if isinstance(model, Unavailable):
        return {"status": "unavailable", "reason": model.reason}
    return model.model_dump(
        include={"path", "is_model", "missing", "num_layers", "num_attention_heads", "num_kv_heads",
                 "param_count", "param_count_source"}
    )


def _dataset_summary(check: DatasetCheck) -> dict[str, Any]:
    out: dict[str, Any] = {"field": check.field, "path": check.path}
    out["file"] = check.file.problem if isinstance(check.file, FileProbe) else check.file.reason
    s = check.verl_schema
    if isinstance(s, DatasetInfo):
        out.update(checked_in=s.checked_in, num_rows=s.num_rows, verl_ok=s.verl_ok)
    elif isinstance(s, Unavailable):
        out.update(schema="unavailable", reason=s.reason)
    return out


def summarize(resolved: ResolvedSpec, facts: CheckFacts) -> dict[str, Any]:
    """A compact, JSON-ready view of what was found (``check --json``'s ``machine``)."""
    spec = resolved.spec
    machine = facts.machine
    model = facts.model if isinstance(facts.model, ModelInfo) else None
    ckpt: dict[str, Any] | None = None
    if isinstance(facts.checkpoint, CheckpointProbe):
        ckpt = facts.checkpoint.model_dump()
        ckpt["checkpoint_bytes"] = (checkpoint_bytes(model.param_count, spec.strategy)
                                  if model and model.param_count else None)
    elif isinstance(facts.checkpoint, Unavailable):
        ckpt = {"status": "unavailable", "reason": facts.checkpoint.reason}
    return {
        "hostname": machine.hostname,
        "collected_at": machine.collected_at,
        "device": spec.device,
        "accelerator": _accelerator_summary(spec, machine),
        "network": _network_summary(spec, machine.network, facts.master_ips),
        "docker": facts.docker.model_dump() if facts.docker else {"status": "not_used (container.runtime: host)"},
        "model": _model_summary(facts.model),
        "datasets": [_dataset_summary(c) for c in facts.datasets],
        "checkpoints": ckpt,
        "unavailable": [u.line() for u in machine.unavailable()],
    }


def describe_machine(resolved: ResolvedSpec, facts: CheckFacts) -> list[str]:
    """A few lines for people: what was looked at, before the findings."""
    s = summarize(resolved, facts)
    acc = s["accelerator"]
    lines = [f"host {s['hostname'] or '?'}"]
    if acc["status"] == "ok":
        lines.append(f"{acc['tool']}: {len(acc['devices'])} device(s)")
    else:
        lines.append(f"{acc['tool']}: {acc.get('reason', acc['status'])}")
    d = facts.docker
    if d is None:
        lines.append("docker: not used (container.runtime: host)")
    elif d.error:
        lines.append(f"docker: {d.error}")
    else:
        state = f"{d.state}" if d.exists else "absent"
        present = "present" if d.image_present else "not present"
        lines.append(f"docker {d.engine_version}: image {d.image} {present}; container {d.container} {state}")
    m = facts.model
    if isinstance(m, ModelInfo) and m.param_count:
        lines.append(
            f"model {m.name}: {params_text(m.param_count)} params, {m.num_layers} layers, "
            f"{m.num_attention_heads} heads / {m.num_kv_heads} KV heads"
        )
    return lines
