#!/usr/bin/env bash
# Builds the Slurm node image for the Slurm tests: the test image (tests/image/build.sh) plus Debian's
# slurmctld, slurmd and munge, as verlctl-test-slurm:<hash>. The hash covers the parent image's tag (itself a
# content hash), the package list and this file's build function; an existing tag is reused (about 0.2 s).
# apt-get runs in a --network host container (Debian's mirror), then docker commit; builds are serialised
# with flock. Prints the tag on stdout. Usage: build_slurm.sh PARENT_TAG
set -euo pipefail

PACKAGES="slurmctld slurmd slurm-client munge"
LOCK_FILE="${VERLCTL_TEST_IMAGE_LOCK:-/tmp/verlctl-test-image-build.lock}.slurm"

log() { printf '[build_slurm.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

build() {
    local from=$1 tag=$2 hash=$3 cid
    cid="$(docker create --network host --name "verlctl-test-build-slurm-$hash-$$" "$from" bash -c \
        "set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update -qq;
         apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null;
         rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /etc/munge/munge.key")"
    # shellcheck disable=SC2064  # the id is known now
    trap "docker rm -f '$cid' >/dev/null 2>&1 || true" EXIT
    log "apt-get install $PACKAGES in $from"
    docker start -a "$cid" >&2 || die "apt-get install in the build container failed (output above)"
    docker commit -c 'CMD ["/bin/bash"]' -c "LABEL verlctl.test.layer=slurm verlctl.test.hash=$hash" \
        "$cid" "$tag" >/dev/null
    docker rm -f "$cid" >/dev/null
    trap - EXIT
}

[[ $# -eq 1 ]] || die "usage: $0 PARENT_TAG (the tag tests/image/build.sh prints)"
PARENT=$1
HASH="$(printf '%s\n' v1 "$PARENT" "$PACKAGES" "$(declare -f build)" | sha256sum | cut -c1-16)"
TAG="verlctl-test-slurm:$HASH"
docker image inspect "$PARENT" >/dev/null 2>&1 || die "no image $PARENT (run tests/image/build.sh first)"

exec 9>>"$LOCK_FILE"
flock -w 3600 9 || die "timed out waiting for $LOCK_FILE"
if docker image inspect "$TAG" >/dev/null 2>&1; then
    log "$TAG present"
else
    start=$SECONDS
    build "$PARENT" "$TAG" "$HASH"
    log "$TAG built in $((SECONDS - start)) s"
fi
printf '%s\n' "$TAG"
