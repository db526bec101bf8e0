#!/usr/bin/env bash
# Benchmark, not a CI step (run as root, Docker engine needed only to make the fresh machine): the README's first
# command on a fresh Debian 12 with its system Python and python3-venv, and NO Docker engine in it.
#
# The "fresh machine" is a container of the test base image (tests/image/build.sh: Debian bookworm minbase +
# python3, python3-pip, python3-venv from debootstrap) with no Docker socket, a copy of this checkout, and an
# empty cache dir. pip installs from the real-verl image's wheelhouse (tests/image/build_realverl.sh, the same
# pins) with PIP_NO_INDEX=1, so no index is asked; set BENCH_INDEX=1 to let pip use its index instead. The command
# is read from the README's first code block (not retyped here) and run with `--yes` appended (no terminal to
# answer the checklist), after `apt-get install libnuma1`, which the README names (BENCH_NO_LIBNUMA=1 leaves it out:
# the demo must then refuse in one line). Prints the wall time and the demo's last lines.
#
#   bench/readme_first_command.sh [--steps N]
set -euo pipefail
SRC="$(cd "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
STEPS=2
if [[ "${1:-}" == "--steps" ]]; then STEPS=$2; fi
BASE="$("$SRC/tests/image/build.sh" --print-tags | sed -n 1p)"
WHEELHOUSE="${VERLCTL_PIP_CACHE:-/var/cache/verlctl-pip}/wheelhouse"
EXTRA="${VERLCTL_DEMO_TEST_CACHE:-/var/cache/verlctl-demo-test}/extra-wheels"
docker image inspect "$BASE" >/dev/null 2>&1 || { echo "build the test images first (tests/image/build.sh)" >&2; exit 1; }
FIRST="$(awk '/^```bash/{f=1; next} f{print; exit}' "$SRC/README.md")"
case "$FIRST" in *"verlctl demo"*) ;; *) echo "the README's first command does not run verlctl demo: $FIRST" >&2; exit 1;; esac
# verlctl's own requirements and its build backend, beside the wheelhouse (which holds verl's)
mkdir -p "$EXTRA"
python3 -m pip download -q -d "$EXTRA" "$SRC" pip wheel 'setuptools>=68' >/dev/null
WORK="$(mktemp -d /var/tmp/verlctl-readme-bench.XXXXXX)"
mkdir "$WORK/checkout"
git -C "$SRC" archive --format=tar HEAD | tar -x -C "$WORK/checkout" -f -
echo "fresh machine: $BASE; command: $FIRST --yes --steps $STEPS"
PIPENV=(-e PIP_NO_INDEX=1 -e "PIP_FIND_LINKS=/wheelhouse /extra")
if [[ "${BENCH_INDEX:-0}" == 1 ]]; then PIPENV=(); fi
T0=$SECONDS
docker run --rm --name "verlctl-readme-bench-$$" --network host --shm-size 4g \
  -v "$WORK/checkout:/home/user/verlctl" -v "$WHEELHOUSE:/wheelhouse:ro" -v "$EXTRA:/extra:ro" \
  "${PIPENV[@]}" -e "BENCH_NO_LIBNUMA=${BENCH_NO_LIBNUMA:-0}" -e VERLCTL_CACHE_DIR=/home/user/cache -w /home/user/verlctl "$BASE" \
  bash -c 'set -e; test ! -S /var/run/docker.sock; command -v dockerd >/dev/null && exit 9 || true
           python3 --version; t=$SECONDS
           if [ "${BENCH_NO_LIBNUMA:-0}" != 1 ]; then  # the README names it: the demo needs it
             apt-get update -qq && apt-get install -y -qq --no-install-recommends libnuma1 >/dev/null; fi
           '"$FIRST"' --yes --steps '"$STEPS"' 2>&1 | tail -n 25
           echo "in-container wall: $((SECONDS - t)) s"'
echo "total wall: $((SECONDS - T0)) s (work dir $WORK)"
