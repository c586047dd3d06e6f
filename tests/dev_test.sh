#!/usr/bin/env bash
# `loom dev`: the quick-start cluster comes up with its four nodes on
# 127.0.0.2-5, runs a job, keeps its state across a restart on the same
# directory, and stops every process it started on SIGINT.
# Usage: tests/dev_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
# Under its own reaper; cleanup kills whole trees (tests/lib/procs.sh).
source tests/lib/procs.sh
W=$(mktemp -d)
DEV=""
cleanup() {
  local rc=0
  [ -n "$DEV" ] && kill -9 "$DEV" 2>/dev/null
  kill_test_processes "$W/dev" || rc=1
  wait 2>/dev/null
  rm -rf "$W"
  return $rc
}
trap 'cleanup || exit 1' EXIT
fail() { echo "FAIL: $*"; cat "$W/dev.out" "$W"/dev/*.log 2>/dev/null | tail -30; exit 1; }
source tests/lib/ports.sh
export LOOM_SERVER="http://127.0.0.1:$PORT"
# `loom dev` makes an admin token there and prints where (docs/security.md).
export LOOM_TOKEN_FILE="$W/dev/admin.token"

start_dev() {
  : > "$W/dev.out"
  "$LOOM" dev --port "$PORT" --data-dir "$W/dev" > "$W/dev.out" 2>&1 &
  DEV=$!
  for _ in $(seq 150); do
    grep -q "a local cluster is up" "$W/dev.out" 2>/dev/null && return 0
    kill -0 "$DEV" 2>/dev/null || fail "loom dev exited"
    sleep 0.1
  done
  fail "loom dev did not come up"
}
stop_dev() {
  kill -INT "$DEV"
  for _ in $(seq 200); do kill -0 "$DEV" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$DEV" 2>/dev/null && fail "loom dev did not stop on SIGINT"
  wait "$DEV"; rc=$?
  [ $rc = 0 ] || fail "loom dev exit status $rc after SIGINT"
  DEV=""
  # Its server and agents are gone too.
  pgrep -f -- "--data-dir $W/dev" > /dev/null && fail "children left running: $(pgrep -af -- "--data-dir $W/dev")"
  return 0
}

start_dev
grep -q "export LOOM_TOKEN_FILE=$W/dev/admin.token" "$W/dev.out" || fail "loom dev did not say where its admin token is"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$LOOM_SERVER/v1/jobs")" = 401 ] || fail "the dev server answered without a token"
"$LOOM" nodes -o json > "$W/nodes.json"
[ "$(grep -c '"up"' "$W/nodes.json")" = 4 ] || fail "nodes: $(cat "$W/nodes.json")"
for a in 127.0.0.2 127.0.0.3 127.0.0.4 127.0.0.5; do
  grep -q "\"$a:" "$W/nodes.json" || fail "no node on $a"
done
grep -q '"a100"' "$W/nodes.json" || fail "no A100 node"
"$LOOM" run -g 2 --gpu-model a100 --wait -- sh -c 'echo gpus=$CUDA_VISIBLE_DEVICES' > "$W/run.out" 2>&1 ||
  fail "job on the dev cluster: $(cat "$W/run.out")"
# The A100 pool partitions a free GPU for a MIG job (docs/scheduling.md).
"$LOOM" run --mig 1g.10gb --wait -- sh -c 'echo cvd=$CUDA_VISIBLE_DEVICES' > "$W/mig.out" 2>&1 ||
  fail "MIG job on the dev cluster: $(cat "$W/mig.out")"
grep -q 'cvd=MIG-' "$W/mig.out" || fail "MIG job's CUDA_VISIBLE_DEVICES: $(cat "$W/mig.out")"
echo "ok: four nodes up, a job ran, a MIG job ran on its instance"
stop_dev
echo "ok: SIGINT stopped loom dev and its children"

start_dev
"$LOOM" queue --all -o json | grep -q '"succeeded"' || fail "the job was lost across a restart"
echo "ok: state kept across a restart"
stop_dev
echo "all checks passed"
