#!/usr/bin/env bash
# Job history at scale (docs/accounting.md): tests/e2e_retention_test.sh with
# 20,000 one-GPU jobs (20 arrays of 1,000) on two emulated 8-GPU nodes, a
# real server on the SQLite store, killed with SIGKILL three times (while
# jobs run, before the purge, in the middle of the purge). It prints the
# server's VmRSS at start, with the 20,000 finished jobs in memory and after
# they were purged, and fails unless sacct, report usage and
# loom_gpu_seconds_total agree, the counter never went down, and the memory
# is back within 25% (plus 8 MiB) of the start.
# Usage: bench/retention.sh [LOOM_BINARY] [N]   (about 15 minutes on 2 cores)
set -u
cd "$(dirname "$0")/.."
LOOM="$(realpath "${1:-build/src/loom/cli/loom}")"
[ -x "$LOOM" ] || { echo "no loom binary at $LOOM (build it first)"; exit 2; }
start=$(date +%s)
tests/e2e_retention_test.sh "$LOOM" "${2:-20000}"
rc=$?
echo "bench/retention.sh: $(($(date +%s) - start)) s in all, exit $rc"
exit $rc
