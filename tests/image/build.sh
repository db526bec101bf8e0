#!/usr/bin/env bash
# Builds the verlctl test images with a local Docker engine and NO image registry.
#
#   verlctl-test-base:<hash>   Debian bookworm minbase + python3/pip (debootstrap, then docker import)
#   verlctl-test-deps:<hash>   + ray, hydra-core, swanlab, pyarrow, and verl==0.7.0 --no-deps
#                              (pip inside a --network host container, then docker commit)
#   verlctl-test-verl:<hash>   + /verl work dir with the stand-in trainer (a TEST DOUBLE for verl's
#   verlctl-test-verl:0.7.0      training entry points), and a TEST DOUBLE npu-smi (docker build)
#
# Each <hash> is computed from that layer's inputs: the text of the function that builds it, the
# pinned versions, the parent layer's hash and (final layer) the files copied into the image. An
# unchanged input set is a no-op; any change rebuilds that layer and the ones above it.
# Builds are serialised machine-wide with flock, so parallel callers (pytest-xdist workers, CI, other
# sessions sharing the engine) wait for one another instead of building twice.
#
# Usage: tests/image/build.sh              build what is missing; print the final content tag on stdout
#        tests/image/build.sh --print-tags print the three content tags (base, deps, final); build nothing
# Progress goes to stderr. Needs: docker (engine answering), debootstrap (base layer only), flock, root.
set -euo pipefail

# ---- pinned inputs ---------------------------------------------------------------------------------
DEBIAN_SUITE=bookworm
BASE_INCLUDE=python3,python3-pip,python3-venv,procps,iproute2,ca-certificates,bash
RAY_VERSION=2.60.0
HYDRA_VERSION=1.3.8
SWANLAB_VERSION=0.10.3
PYARROW_VERSION=26.0.1
VERL_VERSION=0.7.0

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
IMAGE_DIR="$REPO_ROOT/tests/image"
STANDIN_DIR="$REPO_ROOT/tests/standin"
OVERLAY_DIR="$REPO_ROOT/tests/verl_overlay/v$VERL_VERSION"
NPU_SMI_FIXTURE="$REPO_ROOT/tests/fixtures/npu-smi/info-910B4-8card-25.0.rc1.1-full-noproc-atlas800IA2.txt"
WORK_TMP="${VERLCTL_TEST_IMAGE_TMPDIR:-/var/tmp}"
LOCK_FILE="${VERLCTL_TEST_IMAGE_LOCK:-/tmp/verlctl-test-image-build.lock}"
HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
# No buildx on CI machines: use the classic builder (it builds FROM local images without a registry).
export DOCKER_BUILDKIT=0

log() { printf '[build.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sha() { sha256sum | cut -c1-16; }

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Hash of files (relative path + content) under the given paths; missing paths hash as absent.
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

# ---- layer 1: base ---------------------------------------------------------------------------------
build_base() {
    local tag=$1 hash=$2 rootfs
    command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap, or run .ci/run)"
    rootfs="$(mktemp -d "$WORK_TMP/verlctl-test-rootfs.XXXXXX")"
    # shellcheck disable=SC2064  # expand now: the trap must remove this rootfs even if a later one is made
    trap "rm -rf '$rootfs'" EXIT
    log "base: debootstrap --variant=minbase $DEBIAN_SUITE (default Debian mirror) into $rootfs"
    debootstrap --variant=minbase --include="$BASE_INCLUDE" "$DEBIAN_SUITE" "$rootfs" >"$rootfs.log" 2>&1 ||
        { tail -n 30 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap failed (log tail above)"; }
    rm -f "$rootfs.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/lib/apt/lists/*
    log "base: docker import -> $tag"
    tar --numeric-owner -C "$rootfs" -c . |
        docker import -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' \
            -c "LABEL verlctl.test.layer=base verlctl.test.hash=$hash" - "$tag" >/dev/null
    rm -rf "$rootfs"
    trap - EXIT
}

# ---- layer 2: deps ---------------------------------------------------------------------------------
build_deps() {
    local from=$1 tag=$2 hash=$3 cid script
    script="set -eu
export PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
if [ -s /tmp/verlctl-host-ca.crt ]; then export PIP_CERT=/tmp/verlctl-host-ca.crt; fi
python3 -m pip install --break-system-packages 'ray==$RAY_VERSION' 'hydra-core==$HYDRA_VERSION' \
    'swanlab==$SWANLAB_VERSION' 'pyarrow==$PYARROW_VERSION'
python3 -m pip install --break-system-packages --no-deps 'verl==$VERL_VERSION'
rm -f /tmp/verlctl-host-ca.crt
python3 -c 'import ray, hydra, swanlab, pyarrow, importlib.metadata as m; print(\"verl\", m.version(\"verl\"), \"ray\", ray.__version__)'"
    # Named, not labelled: docker commit would copy a container label into the image.
    cid="$(docker create --network host --name "verlctl-test-build-deps-$hash-$$" "$from" bash -c "$script")"
    # shellcheck disable=SC2064
    trap "docker rm -f '$cid' >/dev/null 2>&1 || true" EXIT
    # The host's CA bundle goes in by docker cp (not a bind mount, not an env var) so that nothing of it is
    # committed: the script deletes it after pip, and pip trusts whatever the host trusts (TLS proxies).
    if [[ -s "$HOST_CA_BUNDLE" ]]; then docker cp -L "$HOST_CA_BUNDLE" "$cid:/tmp/verlctl-host-ca.crt"; fi
    log "deps: pip install ray==$RAY_VERSION hydra-core==$HYDRA_VERSION swanlab==$SWANLAB_VERSION" \
        "pyarrow==$PYARROW_VERSION verl==$VERL_VERSION (--no-deps) in container ${cid:0:12}"
    docker start -a "$cid" >&2 || die "pip install in the deps container failed (output above)"
    docker commit -c 'CMD ["/bin/bash"]' -c "LABEL verlctl.test.layer=deps verlctl.test.hash=$hash" \
        "$cid" "$tag" >/dev/null
    docker rm -f "$cid" >/dev/null
    trap - EXIT
}

# ---- layer 3: final --------------------------------------------------------------------------------
# /verl is laid out like verl's source checkout in the real image (quay.io/ascend/verl:...-v0.7.0):
# the four training entry modules are the stand-in's entry wrapper, verl/trainer/config is a symlink
# to the installed wheel's real config, and everything under the overlay dir (the recipe configs,
# which the 0.7.0 wheel does not ship) is copied over the tree.
stage_verl_tree() {
    local dest=$1 overlay=$2 d entry
    for d in verl verl/trainer verl/experimental verl/experimental/one_step_off_policy \
        recipe recipe/dapo recipe/one_step_off_policy; do
        mkdir -p "$dest/$d"
        : >"$dest/$d/__init__.py"
    done
    printf '%s\n' "# verlctl test image: this empty package shadows the installed verl wheel (whose __init__" \
        "# needs torch) when python3 runs from /verl, so that the stand-in entry modules below can run." \
        "# importlib.metadata.version('verl') still reports the installed wheel's version." \
        >"$dest/verl/__init__.py"
    for entry in verl/trainer/main_ppo.py recipe/dapo/main_dapo.py recipe/one_step_off_policy/main_ppo.py \
        verl/experimental/one_step_off_policy/main_ppo.py; do
        cp "$STANDIN_DIR/entry.py" "$dest/$entry"
    done
    if [[ -d "$overlay" ]]; then
        [[ ! -e "$overlay/verl/trainer/config" ]] ||
            die "$overlay/verl/trainer/config would hide the real config from the wheel; remove it"
        cp -R "$overlay/." "$dest/"
    else
        log "final: no overlay dir $overlay (recipe configs will be missing)"
    fi
    # 0.9.x-style entry module path: its config dir is the recipe's, as in 0.7.0 (where it lives in recipe/).
    if [[ -d "$dest/recipe/one_step_off_policy/config" && ! -e "$dest/verl/experimental/one_step_off_policy/config" ]]; then
        ln -s ../../../recipe/one_step_off_policy/config "$dest/verl/experimental/one_step_off_policy/config"
    fi
    find "$dest" -name __pycache__ -prune -exec rm -rf {} +
}

build_final() {
    local from=$1 tag=$2 alias=$3 hash=$4 ctx
    [[ -f "$NPU_SMI_FIXTURE" ]] || die "missing $NPU_SMI_FIXTURE"
    ctx="$(mktemp -d "$WORK_TMP/verlctl-test-ctx.XXXXXX")"
    # shellcheck disable=SC2064
    trap "rm -rf '$ctx'" EXIT
    mkdir -p "$ctx/verl" "$ctx/standin"
    stage_verl_tree "$ctx/verl" "$OVERLAY_DIR"
    cp "$STANDIN_DIR/standin_trainer.py" "$ctx/standin/"
    cp "$IMAGE_DIR/npu-smi" "$ctx/npu-smi"
    cp "$NPU_SMI_FIXTURE" "$ctx/npu-smi-info.txt"
    cat >"$ctx/Dockerfile" <<EOF
FROM $from
COPY npu-smi /usr/local/bin/npu-smi
COPY npu-smi-info.txt /usr/local/share/verlctl-test/npu-smi/info.txt
COPY standin/ /opt/verlctl-test/standin/
COPY verl/ /verl/
# python3 -I: without /verl on sys.path, so that find_spec sees the installed wheel, not the shadow.
RUN set -eu; \\
    chmod 0755 /usr/local/bin/npu-smi; \\
    pkg="\$(python3 -I -c 'import importlib.util as u; print(list(u.find_spec("verl").submodule_search_locations)[0])')"; \\
    ln -s "\$pkg/trainer/config" /verl/verl/trainer/config; \\
    echo /opt/verlctl-test/standin > "\$(dirname "\$pkg")/verlctl-test-standin.pth"; \\
    cd /verl; \\
    test -f verl/trainer/config/ppo_trainer.yaml; \\
    python3 -c 'import importlib.metadata as m, standin_trainer; assert m.version("verl") == "$VERL_VERSION", m.version("verl")'; \\
    npu-smi info | grep -q '910B4'
# The real image has torch_npu, so verl's auto_set_device() switches trainer.device to npu; the stand-in
# reads this instead (set VERLCTL_STANDIN_TORCH_NPU=0 for a GPU-style run).
ENV VERLCTL_STANDIN_TORCH_NPU=1
LABEL verlctl.test.layer=final verlctl.test.hash=$hash verlctl.test.verl-version=$VERL_VERSION
EOF
    log "final: docker build -> $tag, $alias"
    docker build -q -t "$tag" -t "$alias" "$ctx" >/dev/null 2>"$ctx.log" ||
        { cat "$ctx.log" >&2; rm -f "$ctx.log"; die "docker build of the final image failed"; }
    rm -f "$ctx.log"
    rm -rf "$ctx"
    trap - EXIT
}

# ---- hashes and tags -------------------------------------------------------------------------------
BASE_HASH="$(printf '%s\n' v1 "$DEBIAN_SUITE" "$BASE_INCLUDE" "$(declare -f build_base)" | sha)"
DEPS_HASH="$(printf '%s\n' "$BASE_HASH" "$RAY_VERSION" "$HYDRA_VERSION" "$SWANLAB_VERSION" \
    "$PYARROW_VERSION" "$VERL_VERSION" "$(declare -f build_deps)" | sha)"
FINAL_HASH="$(printf '%s\n' "$DEPS_HASH" "$(declare -f stage_verl_tree build_final)" \
    "$(files_hash tests/image/npu-smi tests/standin "tests/verl_overlay/v$VERL_VERSION" \
        "${NPU_SMI_FIXTURE#"$REPO_ROOT"/}")" | sha)"
BASE_TAG="verlctl-test-base:$BASE_HASH"
DEPS_TAG="verlctl-test-deps:$DEPS_HASH"
FINAL_TAG="verlctl-test-verl:$FINAL_HASH"
FINAL_ALIAS="verlctl-test-verl:$VERL_VERSION"

if [[ "${1:-}" == "--print-tags" ]]; then
    printf '%s\n' "$BASE_TAG" "$DEPS_TAG" "$FINAL_TAG"
    exit 0
elif [[ $# -gt 0 ]]; then
    die "unknown argument: $1 (usage: $0 [--print-tags])"
fi

docker version >/dev/null 2>&1 || die "no Docker engine answers (docker version failed)"

exec 9>>"$LOCK_FILE"
if ! flock -n 9; then
    log "another build holds $LOCK_FILE; waiting"
    flock -w 3600 9 || die "timed out waiting for $LOCK_FILE"
fi

timed() {  # timed <label> <cmd...>: run, then log the wall time
    local label=$1 start=$SECONDS
    shift
    "$@"
    log "$label: built in $((SECONDS - start)) s"
}

if image_exists "$BASE_TAG"; then log "base: $BASE_TAG present"
else timed "base $BASE_TAG" build_base "$BASE_TAG" "$BASE_HASH"; fi
if image_exists "$DEPS_TAG"; then log "deps: $DEPS_TAG present"
else timed "deps $DEPS_TAG" build_deps "$BASE_TAG" "$DEPS_TAG" "$DEPS_HASH"; fi
if image_exists "$FINAL_TAG"; then
    log "final: $FINAL_TAG present"
    # Keep the version alias pointing at the current content (another checkout may have moved it).
    docker tag "$FINAL_TAG" "$FINAL_ALIAS"
else
    timed "final $FINAL_TAG" build_final "$DEPS_TAG" "$FINAL_TAG" "$FINAL_ALIAS" "$FINAL_HASH"
fi
printf '%s\n' "$FINAL_TAG"
