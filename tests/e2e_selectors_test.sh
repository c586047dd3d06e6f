#!/usr/bin/env bash
# Selectors and drift end to end (docs/scheduling.md, "Labels and
# selectors"; docs/cluster-spec.md, "stack"): a server whose pool declares
# the GPU driver 550.54.15 and three emulated agents on loopback. h200-0 is
# as declared; h200-1 reports CUDA 12.6 (not part of the declared stack, so
# it is not drifted); h200-2 reports the driver 535.161.08 and becomes
# `drifted`. A job with a selector lands only on the matching node, one that
# no node matches waits saying so, and the drifted node gets no work.
# Usage: tests/e2e_selectors_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
cat > "$W/cluster.yaml" <<YAML
name: e2e
pools:
  - name: h200
    nodes: 3
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    labels: {rack: r1}
    stack: {driver: "550.54.15"}
network: {nodes_per_leaf: 2, leaves_per_spine: 2}
YAML
start_server
launch_agent 0
AGENT_FLAGS=(--emulate-cuda 12.6)
launch_agent 1
AGENT_FLAGS=(--emulate-driver 535.161.08)
launch_agent 2
AGENT_FLAGS=()

node_state() {
  "$LOOM" nodes -o json 2>/dev/null |
    jq -r --arg n "$1" '.nodes[] | select(.name == $n) | .state'
}
states_are() {
  [ "$(node_state h200-0)" = up ] && [ "$(node_state h200-1)" = up ] &&
    [ "$(node_state h200-2)" = drifted ]
}
wait_for 15 states_are ||
  fail "node states: $(node_state h200-0) $(node_state h200-1) $(node_state h200-2)"
echo "ok: h200-2, with another driver, is drifted; the others are up"

# What the agents report are labels, beside the declared and topology ones.
"$LOOM" nodes -o json | jq -e '.nodes[] | select(.name == "h200-1") |
    .labels["gpu.cuda"] == "12.6" and .labels["gpu.driver"] == "550.54.15"
    and .labels["gpu.model"] == "h200" and .labels.rack == "r1"
    and (.labels.kernel | length > 0) and (.labels.leaf | length > 0)' \
  > /dev/null || fail "labels of h200-1: $("$LOOM" nodes -o json)"
echo "ok: nodes carry reported, declared and topology labels"

# loom nodes shows the difference; --drifted lists only the drifted node.
"$LOOM" nodes > "$W/nodes.out" || fail "loom nodes"
grep -q "h200-2 .*drifted.*driver 535.161.08 (pool wants 550.54.15)" "$W/nodes.out" ||
  fail "loom nodes does not show the drift: $(cat "$W/nodes.out")"
"$LOOM" nodes --drifted > "$W/drifted.out" || fail "loom nodes --drifted"
grep -q "^h200-2 " "$W/drifted.out" || fail "--drifted lacks h200-2: $(cat "$W/drifted.out")"
! grep -q "^h200-[01] " "$W/drifted.out" || fail "--drifted lists an up node: $(cat "$W/drifted.out")"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" | grep -qx 'loom_nodes_drifted 1' ||
  fail "metric loom_nodes_drifted is not 1"
echo "ok: loom nodes, loom nodes --drifted and /metrics show the drift"

job_id() { grep -o 'job [0-9]*' | head -1 | grep -o '[0-9]*$'; }
node_of() { jget "$1" "j['placement']['tasks'][0]['node']"; }

# A selector that one node matches: the job lands there.
CUDA=$("$LOOM" run -g 1 --constraint gpu.cuda=12.6 -- sleep 60 | job_id) ||
  fail "loom run --constraint"
wait_for 10 state_is "$CUDA" running || fail "job $CUDA did not start: $(jget "$CUDA" "j['reason']")"
[ "$(node_of "$CUDA")" = h200-1 ] || fail "job $CUDA ran on $(node_of "$CUDA"), not h200-1"
echo "ok: a job with --constraint gpu.cuda=12.6 runs on h200-1 only"

# A selector no node matches: the job waits and says why.
NONE=$("$LOOM" run -g 1 --constraint gpu.cuda=13.0 -- true | job_id) || fail "submit"
reason_has() { jget "$1" "j['reason']" | grep -qF "$2"; }
wait_for 10 reason_has "$NONE" "no node matches node_selector {gpu.cuda: 13.0}" ||
  fail "reason of job $NONE: $(jget "$NONE" "j['reason']")"
state_is "$NONE" pending || fail "job $NONE is not pending"
echo "ok: a job no node matches waits: $(jget "$NONE" "j['reason']")"

# The drifted node matches this selector but takes no work.
OLD=$("$LOOM" run -g 1 --constraint gpu.driver=535.161.08 -- true | job_id) || fail "submit"
wait_for 10 reason_has "$OLD" "1 of 3 nodes match, 0 schedulable" ||
  fail "reason of job $OLD: $(jget "$OLD" "j['reason']")"
echo "ok: the drifted node's only job waits: $(jget "$OLD" "j['reason']")"

# Whole-node jobs without a selector: one fits (h200-0), the drifted h200-2
# gets none, so the second waits.
A=$("$LOOM" run -g 8 -- sleep 60 | job_id) || fail "submit"
B=$("$LOOM" run -g 8 -- sleep 60 | job_id) || fail "submit"
wait_for 10 state_is "$A" running || fail "job $A did not start"
sleep 1
state_is "$B" pending || fail "job $B is $(jget "$B" "j['state']") on $(node_of "$B")"
[ "$(node_of "$A")" = h200-0 ] || fail "job $A ran on $(node_of "$A")"
"$LOOM" nodes -o json | jq -e '.nodes[] | select(.name == "h200-2") | .jobs == []' \
  > /dev/null || fail "the drifted node has jobs"
echo "ok: the drifted node gets no work"

# Bad constraints are refused by the CLI, naming the flag.
"$LOOM" run -g 1 --constraint "bad key=1" -- true > "$W/bad.out" 2>&1 &&
  fail "a bad --constraint was accepted"
grep -q -- "--constraint" "$W/bad.out" || fail "error does not name --constraint: $(cat "$W/bad.out")"
echo "ok: a bad --constraint is refused"
echo "PASS"
