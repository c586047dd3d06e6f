#!/usr/bin/env bash
# Hot spares end to end (docs/fault-tolerance.md, "Hot spares"): four
# emulated nodes on loopback; a 2-node job of whole-node tasks with
# `spares: 1`, and two preemptible jobs filling the other two nodes, one of
# them on the job's spare. The node of the job's task 1 dies (its agent and
# task, SIGKILL): the job runs again on its surviving node and the spare,
# and the preemptible job there is killed without grace and requeued.
# Usage: tests/e2e_spares_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/recovery.sh
PY=python3
write_cluster 4
HEARTBEAT_TIMEOUT=4 start_server --heartbeat-interval 500ms --suspect-after 1.5
start_agents 4

cat > "$W/job.yaml" <<YAML
name: gang
tasks: 2
resources: {gpus_per_task: 8}
spares: 1
command: ["/bin/sh", "-c", "echo run \$LOOM_RESTART_COUNT on \$LOOM_NODE_HOST; exec sleep 600"]
YAML
ID=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
wait_for 30 state_is "$ID" running || fail "the job did not run: $("$LOOM" show "$ID")"
"$LOOM" show "$ID" -o json > "$W/before.json"
SPARE=$(jget "$ID" "','.join(j['spare_nodes'])")
[ -n "$SPARE" ] && [ "${SPARE#*,}" = "$SPARE" ] || fail "want one spare, got '$SPARE': $("$LOOM" show "$ID")"
"$LOOM" show "$ID" | grep -q "^Hot spares: *$SPARE (1 of 1 asked)" || fail "loom show: $("$LOOM" show "$ID")"
SURVIVOR=$(task_node 0)
VICTIM=$(task_node 1)
echo "ok: job $ID on $SURVIVOR and $VICTIM, hot spare $SPARE"

# Bad input: spares on tasks of half a node, refused before anything is made.
printf 'name: half\nresources: {gpus_per_task: 4}\nspares: 1\ncommand: [x]\n' > "$W/half.yaml"
"$LOOM" submit -f "$W/half.yaml" > "$W/half.out" 2>&1 && fail "spares on half-node tasks were accepted"
grep -q "spares: only for jobs whose tasks take whole nodes" "$W/half.out" || fail "error: $(cat "$W/half.out")"

SPOTS=()
for k in 1 2; do
  printf 'name: spot-%s\npreemptible: true\npriority: low\nresources: {gpus_per_task: 8}\ncommand: [sleep, "600"]\n' "$k" > "$W/spot.yaml"
  SPOTS+=("$("$LOOM" submit -f "$W/spot.yaml" | grep -o '[0-9]*$')") || fail "submit spot"
done
for s in "${SPOTS[@]}"; do
  wait_for 30 state_is "$s" running || fail "spot job $s did not run: $("$LOOM" show "$s")"
done
ON_SPARE=""
for s in "${SPOTS[@]}"; do
  [ "$(jget "$s" "j['placement']['tasks'][0]['node']")" = "$SPARE" ] && ON_SPARE=$s
done
[ -n "$ON_SPARE" ] || fail "no preemptible job on the spare $SPARE"
echo "ok: preemptible job $ON_SPARE runs on the spare"

kill_node "${VICTIM#h200-}"
rerun() { [ "$(jget "$ID" "j['restart_count']")" = 1 ] && state_is "$ID" running; }
wait_for 30 rerun || fail "the job did not run again: $("$LOOM" show "$ID")"
"$LOOM" show "$ID" -o json > "$W/after.json"
NEW0=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['placement']['tasks'][0]['node'])" "$W/after.json")
NEW1=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['placement']['tasks'][1]['node'])" "$W/after.json")
[ "$NEW0" = "$SURVIVOR" ] && [ "$NEW1" = "$SPARE" ] ||
  fail "run 1 on $NEW0 and $NEW1, want $SURVIVOR and the spare $SPARE: $("$LOOM" show "$ID")"
[ "$(jget "$ID" "j['node_losses']")" = 1 ] && [ "$(jget "$ID" "j['restarts_used']")" = 0 ] ||
  fail "not a node-loss requeue: $("$LOOM" show "$ID")"
grep -q "1 of them on its hot spare(s) $SPARE in place of lost nodes" "$W/after.json" ||
  fail "no start event on the spare: $("$LOOM" show "$ID")"
"$LOOM" show "$ON_SPARE" -o json > "$W/spot.json"
grep -q "restarts on its hot spare(s) where this preemptible job runs; SIGKILL now" "$W/spot.json" ||
  fail "the spot job was not killed for the spare: $("$LOOM" show "$ON_SPARE")"
[ "$(jget "$ON_SPARE" "j['preempted_by']")" = "$ID" ] || fail "preempted_by: $("$LOOM" show "$ON_SPARE")"
# Requeued, not failed: it waits for a node (the dead one is down).
wait_for 10 state_is "$ON_SPARE" pending || fail "the spot job was not requeued: $("$LOOM" show "$ON_SPARE")"
"$LOOM" show "$ID" | grep -q "^Recovery: " || fail "no recovery phases: $("$LOOM" show "$ID")"
echo "ok: job $ID runs again on $SURVIVOR and the spare $SPARE; spot job $ON_SPARE killed without grace and requeued"
"$LOOM" show "$ID" | grep -E "^(Recovery|Recovered from|Hot spares):"
echo "PASS"
