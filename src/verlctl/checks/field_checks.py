"""Checks for launch failures seen in the field that a pre-check can prevent
(``reference/field-failures-and-scale-out.md`` §1: A4 port clash, A11 weight-sync bucket, G5 /dev/shm, and
verl's "Train dataloader is empty!" assert).

Pure functions (spec + facts in, findings out), except :func:`ports_in_use`, which tries to bind each port of a
range on this host (and closes it at once).
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verlctl.checks.findings import Finding, error, info, warning
from verlctl.checks.memory import BUCKET_DEFAULT_MB, BUCKET_KEY, Estimate, ModelShape
from verlctl.verl.modes import is_disaggregated

#: Ray's object store default: 30 % of the node's memory, at most 200 GB (ray_constants
#: DEFAULT_OBJECT_STORE_MEMORY_PROPORTION, DEFAULT_OBJECT_STORE_MAX_MEMORY_BYTES); below that much /dev/shm Ray
#: warns and puts the object store in /tmp.
RAY_OBJECT_STORE_FRACTION = 0.3
RAY_OBJECT_STORE_MAX_BYTES = 200 * 10**9


def _extra(spec: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for o in spec.extra_overrides:
        key, _, value = o.partition("=")
        out[key.lstrip("+~").strip()] = value.strip().strip("'\"")
    return out


#: verl 0.9.1's IPC threshold on Ascend (``utils/device.py:296-330`` ``check_ipc_version_support``): the driver's
#: "Software Version" (the HDK, ``npu-smi info -t board``) and the CANN toolkit in the image; A5 chips always
#: have IPC (``plugin/platform/platform_npu.py:164-178``).
IPC_MIN_HDK = "25.3.rc1"
IPC_MIN_CANN = "8.3.rc1"
_ASCEND_VERSION = re.compile(r"(\d+\.\d+(?=\.t))|(\d+\.\d+(?:\.(?:rc\d+|\d+))?)")


def ascend_version_key(text: str | None) -> tuple[int, ...] | None:
    """An Ascend version (``25.3.rc1.2``, ``25.5.0``, ``25.5.t3.b001``, ``8.3.RC1``) as a sortable key, cut to
    the base verl compares (its regex), ordered as ``packaging.version`` orders it (``8.3.rc1`` < ``8.3.0``)."""
    m = _ASCEND_VERSION.match((text or "").strip().lower())
    if not m:
        return None
    parts = (m.group(1) or m.group(2)).split(".")
    rc = parts[2][2:] if len(parts) == 3 and parts[2].startswith("rc") else None
    release = [int(p) for p in (parts[:2] if rc is not None else parts)] + [0, 0]
    return (*release[:3], 0 if rc is not None else 1, int(rc or 0))


@dataclass(frozen=True)
class IpcFacts:
    """What decides whether verl 0.9.1's NPU rollout has IPC: the chip generation and the driver version (from
    npu-smi on this host) and the CANN toolkit version (read inside the image). None: not known here."""

    a5: bool | None = None
    hdk: str | None = None
    cann: str | None = None

    @classmethod
    def from_facts(cls, npu: Any, image_versions: Any) -> IpcFacts:
        """From the parsed ``npu-smi`` output (``NpuInfo``, else not collected) and the ``ImageVersions``."""
        from verlctl.detect.npu import NpuInfo

        a5: bool | None = None
        hdk: str | None = None
        if isinstance(npu, NpuInfo) and npu.devices:
            names = [d.name or "" for d in npu.devices] + [b.chip_name or "" for b in npu.boards]
            a5 = any("950" in n or "910_95" in n for n in names)
            hdk = next((b.software_version for b in npu.boards if b.software_version), None) or npu.driver_version
        stack = getattr(image_versions, "stack", None) or {}
        return cls(a5, hdk, stack.get("cann"))

    def supported(self) -> bool | None:
        """verl's ``is_ipc_supported`` on these facts; None where a fact it needs is unknown."""
        if self.a5:
            return True
        hdk, cann = ascend_version_key(self.hdk), ascend_version_key(self.cann)
        if self.a5 is None or hdk is None:
            return None
        if hdk < (ascend_version_key(IPC_MIN_HDK) or ()):
            return False
        if cann is None:
            return None
        return cann >= (ascend_version_key(IPC_MIN_CANN) or ())

    def unknown(self) -> list[str]:
        out = []
        if self.a5 is None or self.hdk is None:
            out.append("the NPU driver (HDK) version and chip, from npu-smi on the training host")
        if self.cann is None:
            out.append("the CANN toolkit version inside the image")
        return out

    def read(self) -> str:
        got = [f"HDK {self.hdk}" if self.hdk else "", f"CANN {self.cann}" if self.cann else "",
               "not an A5 chip" if self.a5 is False else ""]
        return ", ".join(g for g in got if g)


#: Where the actor's weights get the dtype the rollout receives them in (verl 0.9.1): the FSDP engine keeps fp32
#: master weights (``trainer/config/engine/fsdp.yaml:33`` ``model_dtype: fp32``; its ``state_dict`` is synced as
#: it is), the Megatron engine bf16 parameters (``engine/megatron.yaml:120`` ``dtype: bfloat16``).
SYNC_DTYPE_KEY = {"megatron": "actor_rollout_ref.actor.megatron.dtype",
                  "fsdp": "actor_rollout_ref.actor.fsdp_config.model_dtype",
                  "fsdp2": "actor_rollout_ref.actor.fsdp_config.model_dtype"}
SYNC_DTYPE_DEFAULT = {"megatron": "bfloat16", "fsdp": "fp32", "fsdp2": "fp32"}
_DTYPE_BYTES = {"fp32": 4, "float32": 4, "float": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "half": 2}


def synced_dtype(spec: Any) -> tuple[str, int]:
    """The dtype the actor's weights are synced to the rollout in, and its size in bytes."""
    name = _extra(spec).get(SYNC_DTYPE_KEY[spec.strategy], SYNC_DTYPE_DEFAULT[spec.strategy]).lower()
    return name, _DTYPE_BYTES.get(name, 4)


def check_weight_bucket(spec: Any, version: str, shape: ModelShape | None, ipc: IpcFacts | None = None) -> list[Finding]:
    """verl 0.9.1's vLLM rollout without device IPC (``use_shm = not is_support_ipc()``, ``vllm_rollout.py:143``)
    asserts that every synced tensor fits the bucket (``bucketed_weight_transfer.py:140-143``: "is too large to
    fit in the bucket"); with IPC it sends a larger tensor directly (``_direct_send_large_weight``). The
    disaggregated modes reassemble the HCCL chunks first (``checkpoint_engine/base.py`` ``merge_weight_chunks``)
    and hit the same sender. The tensor's size is its synced dtype's (:func:`synced_dtype`). Without the IPC
    facts (``plan``) a warning names them; with them (``check``: npu-smi and the image) the rule decides. 0.7.0's
    key is read by the SGLang rollout only (``sglang_rollout.py:174``); CUDA always has IPC."""
    if shape is None or version != "0.9.1" or spec.train.rollout_engine != "vllm" or spec.device != "npu":
        return []
    key = BUCKET_KEY[version]
    raw = _extra(spec).get(key)
    try:
        bucket_mb = int(raw) if raw is not None else BUCKET_DEFAULT_MB[version]
    except ValueError:
        return []
    dtype, size = synced_dtype(spec)
    largest = shape.largest_tensor_numel * size
    if largest <= bucket_mb << 20:
        return []
    ipc = ipc or IpcFacts()
    supported = ipc.supported()
    if supported:
        return []
    want = 1 << max(0, int(largest * 1.25 - 1).bit_length() - 20)  # >= 1.25 x, a power of two, in MB
    if is_disaggregated(spec.mode):
        cost = (f"; in {spec.mode} the HCCL checkpoint engine holds two buffers of the bucket size on every trainer "
                f"and rollout device (hccl_checkpoint_engine.py:139-140), so this costs 2 x {want} MB of device "
                f"memory per device instead of 2 x {bucket_mb} MB")
    else:
        cost = f"; it costs {want} MB of host shared memory (/dev/shm) per rollout device for the bucket"
    what = (f"the largest tensor (embedding {shape.vocab} x {shape.hidden}, {dtype} as the {spec.strategy} actor "
            f"syncs it: {largest / 2**20:.0f} MB) does not fit verl's weight-sync bucket ({bucket_mb} MB)")
    need = f"A5 chips, or HDK >= {IPC_MIN_HDK} with CANN >= {IPC_MIN_CANN}"
    if supported is False:
        return [error(
            "weight_bucket_too_small",
            f"{what}, and these NPUs have no IPC for the weight sync ({ipc.read()}; verl needs {need}, "
            "platform_npu.py:164-178): verl 0.9.1 falls back to shared memory and stops at the first weight sync "
            "with 'too large to fit in the bucket'",
            "extra_overrides",
            f"add extra_overrides: {key}={want}{cost}; or upgrade the driver to HDK >= {IPC_MIN_HDK} and the "
            f"image's CANN to >= {IPC_MIN_CANN}",
        )]
    return [warning(
        "weight_bucket_ipc_unknown",
        f"{what}: verl 0.9.1 stops at the first weight sync with 'too large to fit in the bucket' if these NPUs "
        f"have no IPC ({need}, platform_npu.py:164-178); not known here: {' and '.join(ipc.unknown())}"
        + (f" (read: {ipc.read()})" if ipc.read() else ""),
        "extra_overrides",
        f"verlctl check decides it from npu-smi and the image; to be safe regardless, add extra_overrides: "
        f"{key}={want}{cost}",
    )]


def check_shm(spec: Any, shm_bytes: int | None, host_ram_bytes: int | None, where: str) -> list[Finding]:
    """Ray puts its object store in /dev/shm; below 30 % of RAM (max 200 GB) it warns and falls back to /tmp
    (G5). ``where`` says whose /dev/shm it is: verlctl's containers use the host's (``ipc_mode: host`` in
    runtime/containers.py, which makes Docker ignore ``--shm-size``)."""
    if shm_bytes is None or not host_ram_bytes:
        return []
    want = min(int(host_ram_bytes * RAY_OBJECT_STORE_FRACTION), RAY_OBJECT_STORE_MAX_BYTES)
    if shm_bytes >= want:
        return []
    return [warning(
        "shm_too_small",
        f"/dev/shm of {where} is {shm_bytes / 2**30:.1f} GiB; Ray wants {want / 2**30:.0f} GiB (30 % of RAM, at "
        "most 200 GB) for its object store and otherwise uses /tmp (slow, or 'object store size exceeds "
        "/dev/shm size')",
        None,
        f"enlarge the host's /dev/shm to at least {want // 2**30 + 1}G (mount -o remount,size="
        f"{want // 2**30 + 1}G /dev/shm); verlctl's containers share it (ipc=host)",
    )]


def check_dataset_rows(spec: Any, train_rows: list[int | None]) -> list[Finding]:
    """verl's train loader uses ``drop_last=True`` with ``batch_size = data.gen_batch_size or
    train_batch_size`` and asserts ``len(self.train_dataloader) >= 1, "Train dataloader is empty!"``
    (``ray_trainer.py``: 0.7.0 lines 392-414, 0.9.1 lines 405-427)."""
    if not train_rows or any(r is None for r in train_rows):
        return []
    rows = sum(r for r in train_rows if r is not None)
    batch = spec.train.gen_batch_size or spec.train.train_batch_size
    field = "train.gen_batch_size" if spec.train.gen_batch_size else "train.train_batch_size"
    if rows >= batch:
        return []
    return [error(
        "dataset_smaller_than_batch",
        f"the training files have {rows} rows, fewer than one batch of {batch}: verl stops with "
        "'Train dataloader is empty!' (the loader drops the last incomplete batch)",
        field,
        f"lower {field} to at most {rows}, or add training data",
    )]


def parse_port_range(text: str) -> list[int]:
    """``60000-60050`` or ``60000`` (HCCL's range syntax); ``auto`` or anything else: no fixed ports."""
    lo, sep, hi = text.strip().partition("-")
    try:
        first = int(lo)
        last = int(hi) if sep else first
    except ValueError:
        return []
    if not (0 < first <= last <= 65535) or last - first > 4096:
        return []
    return list(range(first, last + 1))


def ports_in_use(ports: Iterable[int], host: str = "0.0.0.0", reuse: bool = False) -> list[int]:
    """The ports of ``ports`` that cannot be bound on this host right now (someone listens on them).
    ``reuse``: bind as a server does (SO_REUSEADDR), so that connections of a stopped run left in TIME_WAIT
    do not count, only a listener."""
    busy: list[int] = []
    for port in ports:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                busy.append(port)
        finally:
            sock.close()
    return busy


def hccl_port_ranges(spec: Any, env: dict[str, str]) -> dict[str, list[int]]:
    """The fixed HCCL port ranges this run exports (spec.env wins over verlctl's defaults)."""
    out: dict[str, list[int]] = {}
    for name in ("HCCL_HOST_SOCKET_PORT_RANGE", "HCCL_NPU_SOCKET_PORT_RANGE"):
        value = spec.env.get(name, env.get(name))
        if value:
            ports = parse_port_range(value)
            if ports:
                out[name] = ports
    return out


def check_hccl_ports(busy: dict[str, list[int]], total: dict[str, list[int]], where: str = "this host") -> list[Finding]:
    """A4: another job already holds the run's HCCL ports ("EJ0003: Failed to bind the IP port"). HCCL takes
    one port of the range per communicator, so a few busy ports are a warning, all of them an error."""
    out: list[Finding] = []
    for name, ports in busy.items():
        if not ports:
            continue
        shown = ", ".join(str(p) for p in ports[:5]) + (" …" if len(ports) > 5 else "")
        all_busy = len(ports) >= len(total.get(name, ports))
        make = error if all_busy else warning
        out.append(make(
            "hccl_ports_in_use",
            f"{len(ports)} of the {len(total.get(name, ports))} ports of {name} are already bound on {where} "
            f"({shown}): HCCL fails with 'EJ0003: Failed to bind the IP port'",
            "env",
            f"set env.{name} to a free range (or 'auto'), or stop the job that holds them",
        ))
    return out



# --------------------------------------------------------------------------------------------------
# Prompt lengths with the model's own tokenizer (optional: pyarrow + tokenizers)

PROMPT_SAMPLE_ROWS = 512


@dataclass
class PromptLengths:
    sampled: int
    over: int
    longest: int
    path: str


def _chat_template(model_dir: str) -> str | None:
    path = os.path.join(model_dir, "tokenizer_config.json")
    try:
        if os.path.getsize(path) > 8 << 20:
            return None
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    tpl = cfg.get("chat_template") if isinstance(cfg, dict) else None
    if isinstance(tpl, list):  # [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in tpl if isinstance(t, dict)}
        tpl = named.get("default") or next(iter(named.values()), None)
    return tpl if isinstance(tpl, str) else None


def _render(template: str, messages: list[dict[str, Any]]) -> str:
    """transformers' apply_chat_template(messages, add_generation_prompt=True, tokenize=False), which verl's
    dataset and agent loop call (rl_dataset.py:247): the same sandboxed Jinja environment and helpers."""
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, tools=None)


def measure_prompts(model_dir: str, path: str, max_prompt_length: int, prompt_key: str = "prompt",
                    rows: int = PROMPT_SAMPLE_ROWS) -> PromptLengths | str:
    """Token counts of the first ``rows`` prompts of a parquet file, chat template applied; a reason string
    when they cannot be counted here."""
    try:
        import pyarrow.parquet as pq
        from tokenizers import Tokenizer
    except ImportError as exc:
        return f"{exc.name} is not installed here (pip install 'verlctl[prompts]')"
    tok_path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.isfile(tok_path):
        return f"no tokenizer.json in {model_dir}"
    try:
        tokenizer = Tokenizer.from_file(tok_path)
    except Exception as exc:  # not a tokenizers file (e.g. a slow tokenizer's placeholder)
        return f"{tok_path} cannot be read by the tokenizers package ({exc})"
    try:
        pf = pq.ParquetFile(path)
        if prompt_key not in pf.schema_arrow.names:
            return f"{path} has no {prompt_key!r} column"
        batch = next(pf.iter_batches(batch_size=rows, columns=[prompt_key]), None)
    except Exception as exc:  # a corrupt file or tokenizer: say so, do not fail the check
        return f"{type(exc).__name__}: {exc}"
    prompts = batch.column(0).to_pylist() if batch is not None else []
    template = _chat_template(model_dir)
    texts: list[str] = []
    for p in prompts:
        if isinstance(p, list) and template:
            try:
                texts.append(_render(template, p))
            except Exception as exc:
                return f"the chat template of {model_dir} failed: {exc}"
        elif isinstance(p, list):
            texts.append("\n".join(str(m.get("content", "")) for m in p if isinstance(m, dict)))
        else:
            texts.append(str(p))
    if not texts:
        return f"{path} has no rows"
    lengths = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    return PromptLengths(len(lengths), sum(n > max_prompt_length for n in lengths), max(lengths), path)


def check_prompt_lengths(spec: Any, result: PromptLengths | str | None) -> list[Finding]:
    """verl keeps over-long prompts by default (``data.filter_overlong_prompts: False``, legacy_data.yaml:77 in
    0.7.0, :83 in 0.9.1) while the rollout pads every prompt to ``rollout.prompt_length =
    data.max_prompt_length`` (rollout.yaml:21); with ``data.truncation: error`` (the default, GRPO here) verl's
    ``postprocess_data`` raises ``sequence_length=... is larger than max_length=...``."""
    field = "train.max_prompt_length"
    if result is None:
        return []
    if isinstance(result, str):
        return [info("prompt_length_unchecked", f"prompt lengths not checked: {result}", field)]
    if not result.over:
        return []
    limit = spec.train.max_prompt_length
    truncating = spec.algorithm == "dapo"  # verlctl sets data.truncation=left for DAPO (verl/base.py)
    what = ("they are cut from the left (data.truncation=left): the start of those questions is lost" if truncating
            else "verl's default data.truncation=error stops the run on the first one")
    make = warning if truncating else error
    return [make(
        "prompt_too_long",
        f"{result.over} of the first {result.sampled} prompts of {result.path} are longer than {limit} tokens "
        f"(longest {result.longest}, counted with the model's tokenizer and chat template): {what}",
        field,
        f"raise {field} to {result.longest}, or drop them: extra_overrides: data.filter_overlong_prompts=True",
    )]


# --------------------------------------------------------------------------------------------------
# All of them, for `verlctl check` (with the memory fit)


def collect_prompt_lengths(resolved: Any, facts: Any, budget: float) -> Any:
    """The first train file's prompts counted with the model's tokenizer, within ``budget`` seconds."""
    from verlctl.detect.check_probes import FileProbe
    from verlctl.detect.common import CallTimeout, call_with_timeout

    spec = resolved.spec
    first = next((c for c in facts.datasets if c.field == "paths.train_files"), None)
    if not spec.paths.model or first is None or not isinstance(first.file, FileProbe) or first.file.problem != "ok":
        return None
    model, path, limit = spec.paths.model, first.path, spec.train.max_prompt_length
    try:
        return call_with_timeout(lambda: measure_prompts(model, path, limit), budget, "verlctl-prompts")
    except CallTimeout:
        return f"counting did not finish within {budget:g} s"


def memory_and_field_findings(resolved: Any, facts: Any, budget: float = 20.0) -> tuple[Estimate | None, list[Finding]]:
    """The memory fit with this machine's device memory and RAM, and the field-failure checks: the verdict's
    rules of that family (``checks/verdict_rules.py``), with the live facts they read collected now when the
    caller's facts lack them (the HCCL ports, the prompt lengths)."""
    from verlctl.checks.verdict import VerdictCtx, fact_rules
    from verlctl.verl.compose import build_command

    spec = resolved.spec
    command = build_command(resolved)
    if facts.prompt_lengths is None:
        facts = facts.model_copy(update={"prompt_lengths": collect_prompt_lengths(resolved, facts, budget)})
    if facts.hccl_ports_busy is None and spec.device == "npu":
        ranges = hccl_port_ranges(spec, command.env)
        facts = facts.model_copy(update={"hccl_ports_busy": {n: ports_in_use(p) for n, p in ranges.items()}})
    ctx = VerdictCtx(resolved, command, facts)
    out: list[Finding] = []
    for r in fact_rules():
        if r.name in FIELD_RULES:
            out += r.run(ctx)
    return ctx.memory, out


#: The verdict's rules that :func:`memory_and_field_findings` runs.
FIELD_RULES = ("memory_fit", "weight_bucket", "shm", "dataset_rows", "prompt_lengths", "hccl_ports")
