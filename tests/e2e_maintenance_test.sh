#!/usr/bin/env bash
# Rolling maintenance end to end (docs/maintenance.md): 8 emulated nodes
# whose agents read their driver version from a file (`--emulate-driver
# @FILE`), a checkpointing 16-GPU gang running on two of them, a new driver
# declared (`loom apply`: the nodes are outdated and keep working), then
# `loom maintain --pool h200 --batch 2` with a command that "upgrades" the
# driver (writes the new version into the node's file). The server is
# killed with -9 half-way and started again; the run carries on. Asserted:
# never more than 2 nodes out at once, the gang moves at most twice and
# resumes from its checkpoint each time, every node ends on the new driver,
# and bad requests are refused with reasons.
# Usage: tests/e2e_maintenance_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
spec() {
  cat <<YAML
name: e2e
pools:
  - name: h200
    nodes: 8
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    stack: {driver: "$1"}
network: {nodes_per_leaf: 4, leaves_per_spine: 2}
YAML
}
OLD=550.54.15
NEW=560.35.03
spec "$OLD" > "$W/cluster.yaml"
spec "$NEW" > "$W/cluster-new.yaml"
start_server --checkpoint-root "$W/checkpoints"
for i in $(seq 0 7); do
  echo "$OLD" > "$W/driver-h200-$i"
  AGENT_FLAGS=(--emulate-driver "@$W/driver-h200-$i")
  launch_agent "$i"
done
AGENT_FLAGS=()
nodes_json() { curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/nodes"; }
all_up() { [ "$(nodes_json | jq '[.nodes[] | select(.state == "up")] | length')" = 8 ]; }
wait_for 20 all_up || fail "nodes: $("$LOOM" nodes)"
echo "ok: 8 nodes up on driver $OLD"

# The gang: task 0 appends "run=R step=S" to a file in its checkpoint dir at
# each start, and on SIGUSR1 saves its step and reports it.
cat > "$W/gang.sh" <<'SH'
ckpt="$LOOM_CHECKPOINT_DIR/step"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
if [ "$LOOM_TASK_INDEX" = 0 ]; then
  mkdir -p "$LOOM_CHECKPOINT_DIR"
  echo "run=$LOOM_RESTART_COUNT step=$step" >> "$LOOM_CHECKPOINT_DIR/runs"
fi
save() {
  if [ "$LOOM_TASK_INDEX" = 0 ]; then
    echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
    echo "saved run=$LOOM_RESTART_COUNT step=$step" >> "$LOOM_CHECKPOINT_DIR/runs"
    "$LOOM" checkpoint --step "$step" > /dev/null
  fi
  exit 0
}
trap save USR1
while true; do
  step=$((step + 1))
  sleep 0.05 & wait $!
done
SH
cat > "$W/gang.yaml" <<YAML
name: gang
resources: {gpus: 16, nodes: 2}
command: ["/bin/bash", "$W/gang.sh"]
env: {LOOM: "$LOOM"}
checkpoint: {signal: SIGUSR1, grace: 20s}
YAML
GANG=$("$LOOM" submit -f "$W/gang.yaml" | grep -o '[0-9]*$') || fail "submit gang"
wait_for 20 state_is "$GANG" running || fail "gang did not start: $("$LOOM" show "$GANG")"
RUNS="$W/checkpoints/$GANG/runs"
wait_for 10 test -s "$RUNS" || fail "the gang wrote no start line"
sleep 1
echo "ok: gang $GANG runs on $(jget "$GANG" "','.join(t['node'] for t in j['placement']['tasks'])")"

# The new driver is declared: the nodes are outdated, not drifted, and the
# gang keeps running.
"$LOOM" plan -f "$W/cluster-new.yaml" > "$W/plan.out"
RC=$?
[ $RC = 2 ] || fail "loom plan: exit $RC (want 2): $(cat "$W/plan.out")"
grep -q "stack" "$W/plan.out" || fail "the plan does not show the stack: $(cat "$W/plan.out")"
"$LOOM" apply -f "$W/cluster-new.yaml" > "$W/apply.out" || fail "apply: $(cat "$W/apply.out")"
outdated_all() {
  [ "$(nodes_json | jq '[.nodes[] | select(.state == "up" and (.outdated | length) == 1)] | length')" = 8 ]
}
wait_for 10 outdated_all || fail "nodes are not all up and outdated: $(nodes_json | jq -c '[.nodes[] | {name, state, reason}]')"
"$LOOM" nodes | grep -q "outdated: driver $OLD (pool wants $NEW)" ||
  fail "loom nodes does not say outdated: $("$LOOM" nodes)"
state_is "$GANG" running || fail "the gang stopped at the apply"
echo "ok: after the apply the nodes are outdated and keep working"

# Bad requests: refused with reasons, nothing started.
"$LOOM" maintain --pool nope --batch 2 --run true > "$W/bad.out" 2>&1 &&
  fail "a maintenance of an unknown pool started"
grep -q "pool" "$W/bad.out" || fail "error does not name the pool: $(cat "$W/bad.out")"
curl -s "${AUTH[@]}" -X POST -d '{"pool": "h200", "batch": 0, "command": "x"}' \
  "$LOOM_SERVER/v1/maintenance" | jq -e '.error.message | startswith("batch:")' > /dev/null ||
  fail "batch 0 was not refused naming batch"
[ "$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/maintenance" | jq '.maintenances | length')" = 0 ] ||
  fail "a refused request made a run"
echo "ok: bad maintenance requests are refused, nothing made"

# Out-of-service nodes, sampled every 0.2 s while the run goes on (not
# while the server is down; nor nodes `unknown` just after its restart,
# until their agents register again: that is the restart, not the run).
(
  while true; do
    nodes_json 2>/dev/null | jq '[.nodes[] | select(.state != "up" and .state != "unknown")] | length' >> "$W/out.samples" 2>/dev/null
    sleep 0.2
  done
) &
PIDS+=($!)

CMD="sleep 1; echo $NEW > $W/driver-\$LOOM_NODE"
"$LOOM" maintain --pool h200 --batch 2 --max-unavailable 2 --run "$CMD" > "$W/start.out" 2>&1 ||
  fail "loom maintain: $(cat "$W/start.out")"
grep -q "maintenance 1 started" "$W/start.out" || fail "start said: $(cat "$W/start.out")"
echo "ok: $(head -1 "$W/start.out")"
# Its progress, followed through the server's restart.
"$LOOM" maintain status 1 -w > "$W/watch.out" 2>&1 &
WATCH=$!
PIDS+=($WATCH)
# One at a time.
"$LOOM" maintain --pool h200 --batch 1 --run true > "$W/second.out" 2>&1 &&
  fail "a second maintenance started"
grep -q "maintenance 1" "$W/second.out" || fail "refusal does not name the active run: $(cat "$W/second.out")"

run_json() { curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/maintenance/1"; }
done_at_least() { [ "$(run_json | jq '.counts.done')" -ge "$1" ] 2>/dev/null; }
wait_for 60 done_at_least 3 || fail "maintenance stuck: $("$LOOM" maintain status)"
"$LOOM" maintain status > "$W/status.out" || fail "loom maintain status"
grep -q "h200-" "$W/status.out" || fail "status lists no nodes: $(cat "$W/status.out")"

# Half-way: the server dies and comes back on the same store.
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null
echo "ok: server killed with -9 after $(jq -s 'length' "$W/out.samples") samples, $(grep -c . "$RUNS") gang starts"
start_server --checkpoint-root "$W/checkpoints"
ended() { [ "$(run_json | jq -r '.state')" != running ] 2>/dev/null; }
wait_for 120 ended || fail "maintenance did not end: $("$LOOM" maintain status)"
run_json > "$W/run.json"
[ "$(jq -r .state "$W/run.json")" = done ] || fail "maintenance ended $(jq -r '.state + ": " + .reason' "$W/run.json"): $("$LOOM" maintain status)"
[ "$(jq '.counts.done' "$W/run.json")" = 8 ] || fail "not every node is done: $(jq -c .counts "$W/run.json")"
echo "ok: the maintenance carried on after the restart and is done: $(jq -r .reason "$W/run.json")"
wait "$WATCH" || fail "loom maintain status -w exited $?: $(cat "$W/watch.out")"
grep -q "batch 4 of 4 started" "$W/watch.out" && grep -q "h200-0 done" "$W/watch.out" &&
  grep -q "h200-7 running" "$W/watch.out" ||
  fail "the watch lacks batches or nodes: $(cat "$W/watch.out")"
echo "ok: loom maintain status -w followed it through the restart and exited 0 ($(wc -l < "$W/watch.out") lines)"

# Every node on the new driver, up, not outdated.
wait_for 10 all_up || fail "nodes not all up: $("$LOOM" nodes)"
[ "$(nodes_json | jq --arg v "$NEW" '[.nodes[] | select(.stack.driver == $v and (.outdated | length) == 0 and (.drift | length) == 0)] | length')" = 8 ] ||
  fail "not every node is on $NEW: $(nodes_json | jq -c '[.nodes[] | {name, stack, outdated}]')"
echo "ok: every node runs driver $NEW"

# Never more than 2 nodes out at once.
MAX_OUT=$(sort -n "$W/out.samples" | tail -1)
[ -n "$MAX_OUT" ] && [ "$MAX_OUT" -le 2 ] || fail "up to $MAX_OUT nodes were out at once"
[ "$MAX_OUT" -ge 1 ] || fail "no node was ever seen out of service"
echo "ok: at most $MAX_OUT nodes out at once ($(wc -l < "$W/out.samples") samples)"

# The gang: moved at most twice, each run from the step saved before it.
wait_for 20 state_is "$GANG" running || fail "the gang is $(jget "$GANG" "j['state']")"
echo "gang runs:"; sed 's/^/  /' "$RUNS"
STARTS=$(grep -c '^run=' "$RUNS")
[ "$STARTS" -ge 1 ] && [ "$STARTS" -le 3 ] || fail "the gang started $STARTS times (moved more than twice)"
python3 - "$RUNS" <<'PY' || fail "a run did not resume from the checkpoint: $(cat "$RUNS")"
import re, sys
saved = None
for line in open(sys.argv[1]):
    m = re.match(r"(saved )?run=(\d+) step=(\d+)$", line.strip())
    if not m:
        sys.exit(f"unreadable line {line!r}")
    step = int(m.group(3))
    if m.group(1):
        saved = step
    elif saved is not None and (step != saved or saved == 0):
        sys.exit(f"run {m.group(2)} started at step {step}; saved {saved}")
PY
echo "ok: the gang moved $((STARTS - 1)) time(s), resuming from its checkpoint each time"

grep -q '"event":"maintenance_started".*"user":"[^"]' "$W/server.log" ||
  fail "no audit line for the start: $(grep maintenance "$W/server.log")"
echo "ok: the start is in the server's log with its user"
echo "PASS"
