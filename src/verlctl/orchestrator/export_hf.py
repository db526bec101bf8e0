"""``verlctl export-hf``: a run's checkpoint to a Hugging Face model directory, with verl's own merger.

The conversion is verl's ``python -m verl.model_merger merge --backend fsdp|megatron --local_dir
<checkpoints>/global_step_<N>/actor --target_dir DIR`` (``verl/model_merger/__main__.py`` and
``base_model_merger.parse_args`` in verl 0.7.0 and 0.9.1), run inside the run's own container (or on this
host for ``container.runtime: host``), so it uses the verl, torch and transformers the run trained with.

- The backend comes from the run's recorded spec (``strategy: megatron`` -> ``megatron``; ``fsdp`` and
  ``fsdp2`` -> ``fsdp``). For Megatron, ``--tie-word-embedding`` is passed when the checkpoint's Hugging
  Face config says ``tie_word_embeddings: true`` (the merger does not read it itself:
  ``megatron_model_merger.py`` uses ``config.tie_word_embedding``).
- Older FSDP checkpoints have no ``fsdp_config.json`` (``FSDPModelMerger._get_world_size`` fails with
  "fsdp_config.json does not exist"); the known workaround (verl-project/verl#2252, from the discussion of
  PR #2125) is that file with ``{"FSDP_version": 1, "world_size": N}``, N read from the
  ``model_world_size_N_rank_0.pt`` shard names. verlctl never writes into the checkpoint: it points the
  merger at a staging directory of links to the checkpoint's files plus that one file.
- The merger's output lines are shown as they come; it is stopped (its own process group, verified) when
  ``timeout`` runs out. The result lands in a staging directory beside the checkpoints (a path the
  container mounts) and is moved to ``out`` only when complete: ``out`` is never half-written.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verlctl.errors import ExitCode, RuntimeFailure, VerlctlError
from verlctl.runtime.records import RunRecord, resolve_run

MERGER_MODULE = "verl.model_merger"
EXIT_LINE = "[verlctl] model_merger exit status"
_SHARD = re.compile(r"model_world_size_(\d+)_rank_0\.pt")
_STEP = re.compile(r"global_step_(\d+)")


@dataclass
class Source:
    step: int
    actor: Path  # <checkpoints>/global_step_<N>/actor (the same path in the container)
    backend: str  # fsdp | megatron
    tie_word_embedding: bool = False
    fsdp_world_size: int | None = None  # set when fsdp_config.json is missing (the workaround)


def backend_for(strategy: str) -> str:
    """verl.model_merger's ``--backend`` for a spec strategy."""
    return "megatron" if strategy == "megatron" else "fsdp"


def merger_argv(source: Source, local_dir: str, target_dir: str) -> list[str]:
    """The arguments after ``python3 -m verl.model_merger`` (flags of ``base_model_merger.parse_args``)."""
    argv = ["merge", "--backend", source.backend, "--local_dir", local_dir, "--target_dir", target_dir]
    if source.backend == "megatron" and source.tie_word_embedding:
        argv.append("--tie-word-embedding")
    return argv


def find_source(record: RunRecord, step: int | None) -> Source:
    """The checkpoint to convert (the newest when ``step`` is None), or one clear refusal."""
    if not record.checkpoints:
        raise VerlctlError(f"run {record.run_id} has no checkpoint directory recorded: nothing to convert")
    root = Path(record.checkpoints)
    if not root.is_dir():
        raise VerlctlError(f"the checkpoint directory {root} of run {record.run_id} does not exist on this host")
    steps = sorted(int(m.group(1)) for p in root.iterdir() if (m := _STEP.fullmatch(p.name)) and p.is_dir())
    if not steps:
        raise VerlctlError(f"run {record.run_id} has no checkpoint in {root} yet (no global_step_N directory)",
                           hint="checkpoints are saved every train.save_freq steps; wait for one, or pass --step")
    if step is None:
        step = _latest(root, steps)
    elif step not in steps:
        raise VerlctlError(f"--step {step}: run {record.run_id} has no checkpoint of step {step} in {root}",
                           hint=f"saved steps: {', '.join(map(str, steps[-10:]))}")
    actor = root / f"global_step_{step}" / "actor"
    if not actor.is_dir():
        raise VerlctlError(f"{actor} does not exist: global_step_{step} holds no actor checkpoint",
                           hint="the checkpoint may still be being written, or it was saved without the model")
    backend = backend_for(_strategy(record))
    source = Source(step, actor, backend)
    if backend == "fsdp":
        shards = [int(m.group(1)) for p in actor.iterdir() if (m := _SHARD.fullmatch(p.name))]
        if not shards:
            raise VerlctlError(f"{actor} has no FSDP model shard (model_world_size_N_rank_0.pt)",
                               hint="is this run's strategy right? (the recorded spec says fsdp)")
        if not (actor / "fsdp_config.json").is_file():
            source.fsdp_world_size = max(shards)
    else:
        for hf in (actor / "huggingface", actor / "model" / "huggingface"):  # verl 0.7.0 / 0.9.1 layouts
            config = _read_json(hf / "config.json")
            if config is not None:
                source.tie_word_embedding = bool(config.get("tie_word_embeddings", False))
                break
    return source


def _latest(root: Path, steps: list[int]) -> int:
    """verl's own pointer (``latest_checkpointed_iteration.txt``) when it names a saved step, else the newest."""
    try:
        text = (root / "latest_checkpointed_iteration.txt").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return steps[-1]
    return int(text) if text.isdigit() and int(text) in steps else steps[-1]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.loads(fh.read(1 << 20))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _strategy(record: RunRecord) -> str:
    import yaml

    path = record.dir / record.spec_file
    try:  # a plain file of the run's own directory, never through a symlink (the record is input)
        doc = yaml.safe_load(record.read_file(record.spec_file).decode("utf-8"))
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise VerlctlError(f"cannot read the recorded spec {path}: {exc}") from None
    strategy = doc.get("strategy") if isinstance(doc, dict) else None
    if strategy not in ("megatron", "fsdp", "fsdp2"):
        raise VerlctlError(f"the recorded spec {path} names no strategy (megatron, fsdp or fsdp2)")
    return str(strategy)


def check_out(out: Path) -> Path:
    """``-o DIR``: a new directory (or an empty one) in an existing directory; never through a symlink."""
    out = Path(os.path.abspath(out))
    if out.is_symlink():
        raise VerlctlError(f"-o {out} is a symbolic link: refused (choose a new directory)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise VerlctlError(f"-o {out} exists and is not an empty directory: nothing was written",
                           hint="choose a new directory")
    if not out.parent.is_dir():
        raise VerlctlError(f"-o {out}: the directory {out.parent} does not exist")
    return out


def export_hf(run_id: str | None, step: int | None, out: Path, timeout: float, console: Any) -> dict[str, Any]:
    """Convert, show progress on ``console``, move the result to ``out``; the ``export-hf --json`` object."""
    from verlctl.backends.docker import target

    started = time.monotonic()
    out = check_out(out)
    record = resolve_run(run_id)
    source = find_source(record, step)
    ex, container = target(record)
    if ex is None:
        raise VerlctlError(f"the run's container {container.get('name')} is {container.get('state')}: the "
                           "conversion runs inside it",
                           hint=f"start it (`docker start {container.get('name')}`), then run export-hf again")

    def say(text: str) -> None:
        console.print(f"[bold cyan]→[/] {_esc(text)}", highlight=False)

    say(f"checkpoint: step {source.step} ({source.backend}) in {source.actor}")
    staging = Path(record.checkpoints) / f".verlctl-export-{secrets.token_hex(4)}"
    try:
        staging.mkdir(mode=0o755)
    except OSError as exc:
        raise VerlctlError(f"cannot create the staging directory {staging}: {exc.strerror or exc}",
                           hint="the conversion writes there first (the container mounts the checkpoint "
                                "directory): make it writable") from None
    try:
        local_dir = str(source.actor)
        if source.fsdp_world_size is not None:
            local_dir = str(_stage_fsdp_config(source, staging))
            say(f"no fsdp_config.json (an older checkpoint): the merger reads a staged one with world_size "
                f"{source.fsdp_world_size}, from the shard names (verl-project/verl#2252); the checkpoint is "
                "not changed")
        target_dir = str(staging / "hf")
        argv = merger_argv(source, local_dir, target_dir)
        say(f"run python3 -m {MERGER_MODULE} {' '.join(argv)} in {ex.describe()} (up to {int(timeout)}s)")
        _run_merger(ex, record, argv, staging, timeout, console)
        if record.runtime == "docker":  # the merger ran as the container's user: hand the files to ours
            ex.run(["chown", "-R", "--", f"{os.getuid()}:{os.getgid()}", str(staging)], timeout=300)
        produced = staging / "hf"
        if not (produced / "config.json").is_file():
            raise RuntimeFailure(f"{MERGER_MODULE} ended without writing a model (no config.json in {produced})")
        _move(produced, out)
        say(f"wrote the Hugging Face model to {out}")
    finally:
        _remove_staging(ex, record, staging)
    return {"run_id": record.run_id, "step": source.step, "backend": source.backend,
            "checkpoint": str(source.actor), "out": str(out),
            "fsdp_config_staged": source.fsdp_world_size is not None,
            "tie_word_embedding": source.tie_word_embedding,
            "seconds": round(time.monotonic() - started, 1),
            "files": sorted(p.name for p in out.iterdir())}


def _stage_fsdp_config(source: Source, staging: Path) -> Path:
    """A directory of links to the actor checkpoint's entries, plus the missing fsdp_config.json."""
    actor = staging / "actor"
    actor.mkdir()
    for entry in source.actor.iterdir():
        (actor / entry.name).symlink_to(entry)
    doc = {"FSDP_version": 1, "world_size": source.fsdp_world_size}
    (actor / "fsdp_config.json").write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return actor


def _run_merger(ex: Any, record: RunRecord, argv: list[str], staging: Path, timeout: float, console: Any) -> None:
    log = staging / "merge.log"
    script = f'python3 -m {MERGER_MODULE} "$@"; s=$?; echo "{EXIT_LINE} $s"; exit $s'
    marker = f"{record.run_id}/export-hf/{secrets.token_hex(8)}"
    group = ex.start_group(["bash", "-c", script, "verlctl-export-hf", *argv], str(log), marker,
                           cwd=record.workdir)
    try:
        text = _wait(ex, group, log, timeout, console)
    except BaseException:  # Ctrl-C or a lost engine: the merger it started does not run on unattended
        ex.stop_group(group, grace_s=10)
        raise
    status = text.rsplit(EXIT_LINE, 1)[1].split()[0] if text.rsplit(EXIT_LINE, 1)[1].split() else "?"
    if status != "0":
        last = [ln for ln in text.split(EXIT_LINE)[0].splitlines() if ln.strip()][-1:] or ["no output"]
        raise RuntimeFailure(f"{MERGER_MODULE} failed (exit {status}): {last[0].strip()[:300]}",
                             hint="the lines above are its output; nothing was written")


def _wait(ex: Any, group: Any, log: Path, timeout: float, console: Any) -> str:
    """Show the merger's lines as they come until its exit line; stop it when ``timeout`` runs out."""
    deadline = time.monotonic() + timeout
    pos = 0
    text = ""
    next_check = 0.0
    while True:
        chunk = _read_from(log, pos)
        pos += len(chunk)
        new = chunk.decode(errors="replace")
        text += new
        for line in new.splitlines():
            if line.strip():
                # the merger's own line, whole (a path in it is never cut)
                console.print(f"  | {line}", highlight=False, markup=False, no_wrap=True, overflow="ignore",
                              crop=False)
        if EXIT_LINE in text:
            break
        now = time.monotonic()
        if now >= deadline:  # (the caller stops the merger)
            raise VerlctlError(f"{MERGER_MODULE} did not finish within {int(timeout)}s: it was stopped and nothing "
                               "was written", code=ExitCode.TIMEOUT,
                               hint="give it more time with --timeout SECONDS (large models take long)")
        if now >= next_check:
            next_check = now + 2.0
            if not ex.group_alive(group):
                text += _read_from(log, pos).decode(errors="replace")
                if EXIT_LINE not in text:
                    raise RuntimeFailure(f"{MERGER_MODULE} ended without an exit status (see the lines above)")
                break
        time.sleep(0.3)
    return text


def _read_from(path: Path, pos: int) -> bytes:
    try:
        with open(path, "rb") as fh:
            fh.seek(pos)
            return fh.read(1 << 20)
    except OSError:
        return b""


def _move(produced: Path, out: Path) -> None:
    """Put the finished model at ``out`` in one step (a rename; a copy beside ``out`` first when the
    checkpoints are on another file system)."""
    if out.exists():
        out.rmdir()  # empty (checked): rename cannot replace it on every file system
    try:
        os.rename(produced, out)
        return
    except OSError as exc:
        import errno

        if exc.errno != errno.EXDEV:
            raise VerlctlError(f"cannot move the model to {out}: {exc.strerror or exc}") from None
    tmp = out.with_name(f".{out.name}.verlctl-{secrets.token_hex(4)}")
    try:
        shutil.copytree(produced, tmp, symlinks=True)
        os.rename(tmp, out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise VerlctlError(f"cannot write the model to {out}: {exc.strerror or exc}") from None


def _remove_staging(ex: Any, record: RunRecord, staging: Path) -> None:
    if record.runtime == "docker":  # files the container's user made: removed where they were made
        ex.run(["rm", "-rf", "--", str(staging)], timeout=300)
    shutil.rmtree(staging, ignore_errors=True)


def _esc(text: str) -> str:
    from rich.markup import escape

    return escape(str(text))
