#!/usr/bin/env bash
# verlctl's Megatron DAPO command on a real NVIDIA GPU: 2 steps with a checkpoint each, then a relaunch that
# resumes from global_step_2 and trains step 3; prints one result line per phase and a JSON summary.
# Not in CI: run it by hand on a lent GPU machine (docs/development/benchmarks.md, "Megatron on a GPU").
#
# What it needs (checked first, each missing one named):
#   * Linux with at least one NVIDIA GPU and its driver (`nvidia-smi` lists it); no Docker engine is needed:
#     verl runs on the host (`container.runtime: host`);
#   * a Python environment (--python, default python3) with verl 0.9.1 and its megatron extra
#     (`pip install 'verl[megatron]==0.9.1'`: megatron-core, megatron-bridge, transformer-engine; plus vLLM),
#     and verlctl installed in it or beside it (`pip install -e .` from this checkout; --verlctl PATH);
#   * a model and data: --model DIR and --train / --val PARQUET (verl's gsm8k format), or nothing: then the
#     random 2-layer Qwen2 and the 48/16-row parquet of verlctl's demo are built offline
#     (src/verlctl/demo/tiny.py, transformers + tokenizers + pyarrow);
#   * about 10 GiB of GPU memory for the tiny model (a real model: what `verlctl check` estimates).
#
# Usage: bench/megatron_dapo_gpu.sh [--python PY] [--verlctl PATH] [--out DIR] [--device N] [--model DIR
#        --train PARQUET --val PARQUET] [--timeout SECONDS] [--plan-only]
#   --plan-only: write the spec and render verlctl's scripts (`verlctl plan`), train nothing (runs anywhere).
# Exit status: 0 the three steps ran and step 3 resumed from global_step_2; 1 a phase failed (its status and the
# log's last lines are printed); 2 a requirement is missing.
set -euo pipefail

REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
PY=python3
VERLCTL=""
OUT=""
DEVICE=0
MODEL=""
TRAIN=""
VAL=""
TIMEOUT=3600
PLAN_ONLY=0

die() { printf 'megatron_dapo_gpu: %s\n' "$*" >&2; exit 2; }
say() { printf '[megatron_dapo_gpu %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }  # progress: stderr

while [[ $# -gt 0 ]]; do
    case "$1" in
        --python) PY="${2:?--python needs a path}"; shift 2 ;;
        --verlctl) VERLCTL="${2:?--verlctl needs a path}"; shift 2 ;;
        --out) OUT="${2:?--out needs a directory}"; shift 2 ;;
        --device) DEVICE="${2:?--device needs a GPU index}"; shift 2 ;;
        --model) MODEL="${2:?--model needs a directory}"; shift 2 ;;
        --train) TRAIN="${2:?--train needs a parquet file}"; shift 2 ;;
        --val) VAL="${2:?--val needs a parquet file}"; shift 2 ;;
        --timeout) TIMEOUT="${2:?--timeout needs seconds}"; shift 2 ;;
        --plan-only) PLAN_ONLY=1; shift ;;
        -h|--help) sed -n '2,24p' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) die "unknown argument: $1 (see --help)" ;;
    esac
done
[[ "$DEVICE" =~ ^[0-9]+$ ]] || die "--device: a GPU index (0, 1, ...), got '$DEVICE'"
[[ "$TIMEOUT" =~ ^[0-9]+$ ]] || die "--timeout: seconds, got '$TIMEOUT'"
if [[ -n "$MODEL$TRAIN$VAL" && ( -z "$MODEL" || -z "$TRAIN" || -z "$VAL" ) ]]; then
    die "--model, --train and --val go together (or give none: the demo's tiny model and data are built)"
fi

# ---- requirements ------------------------------------------------------------------------------------
command -v "$PY" >/dev/null 2>&1 || die "--python: '$PY' is not an executable"
PY="$(command -v "$PY")"
PY="$(cd -- "$(dirname -- "$PY")" && pwd)/$(basename -- "$PY")"  # absolute, the venv's own (not resolved)
PY_ENV="$(dirname -- "$(dirname -- "$PY")")"
if [[ -z "$VERLCTL" ]]; then
    VERLCTL="$(dirname -- "$PY")/verlctl"
    [[ -x "$VERLCTL" ]] || VERLCTL="$(command -v verlctl || true)"
fi
[[ -n "$VERLCTL" && -x "$VERLCTL" ]] || die "no verlctl: pip install -e '$REPO_ROOT' into the environment of $PY, or --verlctl PATH"
VERSIONS="$("$PY" - <<'EOF' 2>&1
import importlib.metadata as m
import importlib.util as u
out = []
for dist, mod in (("verl", "verl"), ("megatron-core", "megatron.core"), ("megatron-bridge", "megatron.bridge"),
                  ("vllm", "vllm"), ("torch", "torch")):
    try:
        found = u.find_spec(mod) is not None
    except ModuleNotFoundError:
        found = False
    try:
        out.append(f"{dist}={m.version(dist)}" if found else f"{dist}=MISSING")
    except m.PackageNotFoundError:
        out.append(f"{dist}={'present' if found else 'MISSING'}")
print(" ".join(out))
EOF
)" || die "$PY cannot report its packages: $VERSIONS"
say "python $PY: $VERSIONS"
VERL_VERSION="$(sed -n 's/.*verl=\([^ ]*\).*/\1/p' <<<"$VERSIONS")"
if [[ "$PLAN_ONLY" == 0 ]]; then
    [[ "$VERSIONS" != *MISSING* ]] || die "missing in $PY: $(grep -o '[a-z-]*=MISSING' <<<"$VERSIONS" | tr '\n' ' ')(pip install 'verl[megatron]==0.9.1' vllm)"
    [[ "$VERL_VERSION" == 0.9.1 ]] || die "verl $VERL_VERSION in $PY: this script runs verl 0.9.1's core trainer (pip install 'verl[megatron]==0.9.1')"
    command -v nvidia-smi >/dev/null 2>&1 || die "no nvidia-smi: this needs a machine with an NVIDIA GPU and its driver"
    GPUS="$(nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1)" || die "nvidia-smi failed: $GPUS"
    grep -q "^$DEVICE," <<<"$GPUS" || die "--device $DEVICE: nvidia-smi lists no such GPU ($GPUS)"
    say "GPUs: $(tr '\n' ';' <<<"$GPUS")"
fi

# ---- model, data, reward, spec -----------------------------------------------------------------------
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/verlctl-megatron-dapo.XXXXXX")}"
mkdir -p -- "$OUT"
OUT="$(cd -- "$OUT" && pwd)"
if [[ -z "$MODEL" ]]; then
    if [[ ! -f "$OUT/tiny/model/config.json" ]]; then
        say "building the demo's tiny model and data in $OUT/tiny (offline)"
        HF_HUB_OFFLINE=1 "$PY" "$REPO_ROOT/src/verlctl/demo/tiny.py" "$OUT/tiny" >/dev/null
    fi
    MODEL="$OUT/tiny/model" TRAIN="$OUT/tiny/data/train.parquet" VAL="$OUT/tiny/data/test.parquet"
    PROMPT=128 RESPONSE=32
else
    PROMPT=512 RESPONSE=256
fi
cp -- "$REPO_ROOT/src/verlctl/demo/reward.py" "$OUT/reward.py"
SPEC="$OUT/megatron-dapo.yaml"
q() { printf "'%s'" "${1//\'/\'\'}"; }  # a YAML single-quoted scalar
cat >"$SPEC" <<EOF
# verlctl's Megatron DAPO command on one GPU, 2 steps (written by bench/megatron_dapo_gpu.sh)
verl_version: '0.9.1'
algorithm: dapo
mode: sync
strategy: megatron
device: gpu
cluster:
  devices: [$DEVICE]
paths:
  model: $(q "$MODEL")
  train_files: [$(q "$TRAIN")]
  val_files: [$(q "$VAL")]
  checkpoints: $(q "$OUT/checkpoints")
  logs: $(q "$OUT/logs")
container:
  runtime: host
  python_env: $(q "$PY_ENV")
  workdir: $(q "$OUT")
train:
  steps: 2
  train_batch_size: 4
  mini_batch_size: 4
  micro_batch_size_per_device: 2
  responses_per_prompt: 2
  max_prompt_length: $PROMPT
  max_response_length: $RESPONSE
  save_freq: 1
  test_freq: -1
  tensor_parallel: 1
  pipeline_parallel: 1
  rollout_tensor_parallel: 1
logging:
  project: verlctl-megatron-dapo
  swanlab:
    enabled: false
extra_overrides:
  # a reward with variance (a random or small model scores 0 everywhere under gsm8k: DAPO's filter_groups
  # would drop every group)
  - reward.custom_reward_function.path=$OUT/reward.py
  - reward.custom_reward_function.name=compute_score
EOF
export VERLCTL_STATE_DIR="$OUT/state"
say "spec: $SPEC; verlctl state: $VERLCTL_STATE_DIR"
"$VERLCTL" plan -c "$SPEC" -o "$OUT/plan" --force >&2
if [[ "$PLAN_ONLY" == 1 ]]; then
    say "plan only: verlctl's scripts are in $OUT/plan"
    exit 0
fi

# ---- the two phases ----------------------------------------------------------------------------------
# Waits for the newest run to end; prints "STATE STEP" (the last step verl logged).
wait_end() {
    local deadline=$((SECONDS + TIMEOUT)) js
    while ((SECONDS < deadline)); do
        js="$("$VERLCTL" status --json 2>/dev/null || true)"
        if "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); s=str(d["state"]); sys.exit(0 if (s in ("finished","stopped") or s.startswith("failed")) and not d["watcher"]["alive"] else 1)' "$js" 2>/dev/null; then
            "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); print(str(d["state"]).split()[0], (d.get("last_step") or {}).get("step", 0))' "$js"
            return 0
        fi
        sleep 10
    done
    echo "timeout 0"
}

phase() {  # phase NAME STEPS -> "NAME STATE STEP WALL_S"
    local name=$1 steps=$2 t0=$SECONDS res
    say "$name: verlctl launch (train.steps=$steps)"
    # verlctl's own output goes to stderr: this function's stdout is its one result line
    if ! "$VERLCTL" launch -c "$SPEC" --set "train.steps=$steps" --yes --watch --verify-timeout 1800 >&2; then
        echo "$name launch_failed 0 $((SECONDS - t0))"
        return 0
    fi
    res="$(wait_end)"
    echo "$name $res $((SECONDS - t0))"
}

read -r _ S1 STEP1 WALL1 <<<"$(phase first 2)"
saved() { find "$OUT/checkpoints" -mindepth 1 -maxdepth 1 -type d -name 'global_step_*' -printf '%f\n' 2>/dev/null | sort -V; }
say "first: $S1 at step $STEP1 in ${WALL1}s; checkpoints: $(saved | tr '\n' ' ')"
S2=skipped STEP2=0 WALL2=0
if [[ "$S1" == finished ]]; then
    read -r _ S2 STEP2 WALL2 <<<"$(phase resume 3)"
    say "resume: $S2 at step $STEP2 in ${WALL2}s"
fi
TRAIN_LOG="$(find "$OUT/logs" -maxdepth 1 -name 'dapo_*.log' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -1 | cut -d' ' -f2- || true)"
RESUMED="$(grep -o 'Resuming from [^ ]*global_step_2, setting global step to 2' "$TRAIN_LOG" 2>/dev/null | tail -1 || true)"
CKPTS="$(saved | grep -c . || true)"
PASS=0
[[ "$S1" == finished && "$S2" == finished && "$STEP2" == 3 && -n "$RESUMED" && -d "$OUT/checkpoints/global_step_3" ]] && PASS=1
"$PY" - "$OUT" "$VERSIONS" "$S1" "$STEP1" "$WALL1" "$S2" "$STEP2" "$WALL2" "$CKPTS" "$RESUMED" "$PASS" <<'EOF'
import json, sys
out, versions, s1, st1, w1, s2, st2, w2, ckpts, resumed, ok = sys.argv[1:]
print("RESULT " + json.dumps({
    "result": "PASS" if ok == "1" else "FAIL", "packages": versions, "out": out,
    "first": {"state": s1, "last_step": int(st1), "wall_s": int(w1)},
    "resume": {"state": s2, "last_step": int(st2), "wall_s": int(w2), "resumed": resumed or None},
    "checkpoints": int(ckpts or 0),
}))
EOF
if [[ "$PASS" != 1 ]]; then
    "$VERLCTL" status >&2 || true
    [[ -n "$TRAIN_LOG" ]] && tail -n 40 -- "$TRAIN_LOG" >&2
    exit 1
fi
