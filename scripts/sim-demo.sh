#!/usr/bin/env bash
# The simulator tour: set up, build, and replay real GPU-cluster traces
# against both built-in fleets with all four scheduling policies side by side.
# Writes tables, JSON and HTML plots under out/.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh release loom
mkdir -p out
LOOM=./build/src/loom/cli/loom
TRACES=../shared/traces

if [ -f "$TRACES/itp/cluster01.csv" ]; then
  echo "== small fleet (224 GPUs), Microsoft ITP cluster01 trace, arrivals x0.14"
  $LOOM sim --cluster small --trace "$TRACES/itp/cluster01.csv" \
    --policy fifo,backfill,las,fair --arrival-scale 0.14 \
    --json out/itp-small.json --plot out/itp-small.html | tee out/itp-small.txt
fi
if [ -f "$TRACES/philly/philly_sia.csv" ]; then
  echo "== large fleet (16,000 GPUs), Microsoft Philly trace (82k jobs), arrivals x0.004"
  $LOOM sim --cluster large --trace "$TRACES/philly/philly_sia.csv" \
    --policy fifo,backfill,las,fair --arrival-scale 0.004 \
    --json out/philly-large.json --plot out/philly-large.html | tee out/philly-large.txt
else
  echo "== ../shared/traces not found: replaying the bundled sample trace"
  $LOOM sim --cluster small --trace testdata/traces/sample.csv \
    --policy fifo,backfill,las,fair --json out/sample.json --plot out/sample.html
fi
echo
echo "Open out/*.html in a browser for utilisation, queue length and JCT CDFs."
