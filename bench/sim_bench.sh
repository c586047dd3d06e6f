#!/usr/bin/env bash
# Simulator benchmark: the whole Philly trace (82,247 jobs) on the `large`
# preset (2,000 x 8 H200) at --arrival-scale 0.004 (offered load ~0.84, peak
# ~1.5), all four policies in one invocation. Reports wall time and peak
# resident memory (GNU time). Usage: bench/sim_bench.sh [extra loom sim flags]
set -euo pipefail
cd "$(dirname "$0")/.."
TRACE=../shared/traces/philly/philly_sia.csv
[ -f "$TRACE" ] || { echo "sim_bench: $TRACE not found" >&2; exit 2; }
./scripts/build.sh release loom > /dev/null
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
/usr/bin/time -f "wall %e s, peak RSS %M KiB, user %U s, sys %S s" \
  ./build/src/loom/cli/loom sim --cluster large --trace "$TRACE" \
  --policy fifo,backfill,las,fair --arrival-scale 0.004 --quiet "$@"
