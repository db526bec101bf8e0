#!/usr/bin/env bash
# The watcher's mutation sample (#25): bench/mutate.py over src/verlctl/orchestrator/watcher.py with its test set.
#
#   bench/mutate_watcher.sh SEED N OUT.json     (run it from a scratch clone with its own .venv: mutate.py
#                                                rewrites the module in place; never in the tree you commit from)
#
# The set runs on the host runtime and on the real Docker engine (the target tests take seconds); about 150 s
# quiet for the unmutated module. Each mutant gets 400 s.
set -euo pipefail
cd "$(dirname -- "${BASH_SOURCE[0]}")/.."
if [[ $# -ne 3 ]]; then
    echo "usage: $0 SEED N OUT.json" >&2
    exit 2
fi
MUTATE_SEED=$1 exec .venv/bin/python bench/mutate.py . src/verlctl/orchestrator/watcher.py "$3" "$2" 400 -- \
    -n 2 tests/orchestrator/test_watcher_timings.py tests/orchestrator/test_watcher_target_docker.py tests/orchestrator/test_watcher_relaunch_edges.py \
    tests/orchestrator/test_watcher_live_status_and_stalls.py tests/orchestrator/test_watcher_restarts.py \
    tests/orchestrator/test_recovery_host.py tests/orchestrator/test_watcher_record_gone.py tests/monitor/test_teardown.py tests/orchestrator/test_mode_stop_resume.py \
    tests/runtime/test_signals_spare_other_owners.py::test_a7_a_second_watcher_of_a_run_is_refused_and_a_hand_started_one_is_recorded \
    tests/runtime/test_signals_spare_other_owners.py::test_a7_stop_waits_for_a_relaunch_that_holds_the_record_and_stops_its_attempt
