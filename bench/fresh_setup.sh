#!/usr/bin/env bash
# Benchmark, not a CI step (run as root): times .ci/run's set-up steps as on a fresh machine: a fresh clone of HEAD,
# an empty pip cache, a private Docker engine (its own bridge, no iptables) with an empty data root and an empty
# wheelhouse. apt packages are not redone. FRESH_DIR (default /var/tmp/verlctl-fresh-setup) holds it all (~11 GB);
# remove it afterwards (umount FRESH_DIR/exec/netns/default first if busy).
set -euo pipefail
SRC="$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
R=${FRESH_DIR:-/var/tmp/verlctl-fresh-setup}
if [[ -e "$R" ]]; then echo "error: $R exists: remove it first (this script only fills a new directory)" >&2; exit 1; fi
mkdir -p -- "$R"
git clone -q -- "$SRC" "$R/clone"
if ip link show fresh0 >/dev/null 2>&1; then echo "error: a network link fresh0 exists already (not this script's): nothing done" >&2; exit 1; fi
ip link add name fresh0 type bridge && ip addr add 172.31.250.1/24 dev fresh0 && ip link set fresh0 up
dockerd --data-root "$R/data" --exec-root "$R/exec" -H "unix://$R/d.sock" --pidfile "$R/d.pid" \
  --bridge fresh0 --iptables=false --ip6tables=false >"$R/dockerd.log" 2>&1 &
dpid=$!
trap 'kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null || true; ip link del fresh0 2>/dev/null || true' EXIT
export DOCKER_HOST="unix://$R/d.sock"
for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
docker info --format 'private engine {{.ServerVersion}}, images {{.Images}}'
export PIP_CACHE_DIR="$R/pipcache" VERLCTL_PIP_CACHE="$R/wheelhouse" VERLCTL_TEST_IMAGE_TMPDIR="$R/tmp"
mkdir -p "$R/tmp"
cd "$R/clone"
# shellcheck disable=SC2016  # the literal text of .ci/run's cd line
awk '/^step "system packages"/{exit} {print}' .ci/run | grep -v 'cd "$(dirname' > "$R/cifuncs.sh"
# shellcheck disable=SC1091
source "$R/cifuncs.sh"
T0=$SECONDS
step "venv (.[dev])" setup_venv
step "verl config trees" install_verl_config_trees
step "test images" build_test_images
step "real-verl image" build_realverl_image
printf '  %s\n' "${TIMINGS[@]}"
echo "total set-up $((SECONDS - T0)) s"
du -sm "$R/wheelhouse" "$R/pipcache" "$R/data" 2>/dev/null || true
