#!/usr/bin/env bash
# A task never outlives its supervisor unnoticed (docs/agent-tasks.md): kill
# -9 of a running task's shim kills the task's whole tree (its main process
# and a background child) within seconds, the agent reports the task lost
# at once (its log: "supervisor (shim) died"), and the server fails the job, or
# restarts it by its restart policy, after which a cancel completes.
# Usage: tests/e2e_shim_kill_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PY=/usr/bin/python3
write_cluster 1
start_server
start_agents 1
echo "ok: one agent registered"

# record_field TASK KEY: KEY of the task's record on the agent.
record_field() {
  grep -o "\"$2\": *[0-9]*" "$W/agent0/tasks/$1.json" 2>/dev/null | grep -o '[0-9]*$'
}
# kill_shim_of JOB RUN: kills the shim of task 0 of the job's run RUN; sets
# LEADER, BACKGROUND (the task's pids) and TASK.
kill_shim_of() {
  TASK="$1.0.$2"
  wait_for 10 test -s "$W/agent0/tasks/$TASK.json" || fail "no record of task $TASK"
  wait_for 10 sh -c "grep -q '\"phase\": *\"running\"' '$W/agent0/tasks/$TASK.json'" ||
    fail "task $TASK does not run"
  LEADER=$(record_field "$TASK" pid)
  local shim
  shim=$(record_field "$TASK" shim_pid)
  wait_for 10 sh -c "[ \$(pgrep -g $LEADER | wc -l) -ge 2 ]" || fail "task $TASK has no background child"
  BACKGROUND=$(pgrep -g "$LEADER" | grep -vx "$LEADER" | head -1)
  kill -9 "$shim" || fail "kill the shim $shim"
}
dead() { ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }

# A job without restarts fails at once, saying why.
ONE=$("$LOOM" run -g 1 --name orphan -- sh -c 'sleep 600 & sleep 600' | grep -o '[0-9]*$') || fail "submit"
wait_for 20 state_is "$ONE" running || fail "job $ONE did not start: $("$LOOM" show "$ONE")"
kill_shim_of "$ONE" 0
T0=$(date +%s.%N)
wait_for 5 state_is "$ONE" failed || fail "job $ONE still $(jget "$ONE" "j['state']") 5 s after its shim died: $("$LOOM" show "$ONE")"
T1=$(date +%s.%N)
"$LOOM" show "$ONE" > "$W/one.show"
grep -q "task 0 on h200-0 was lost" "$W/one.show" || fail "loom show does not say the task was lost: $(cat "$W/one.show")"
grep -q "task $TASK lost: .*supervisor (shim) died" "$W/agent0.log" || fail "the agent does not say the shim died"
wait_for 5 dead "$LEADER" || fail "the task's main process $LEADER outlived its shim"
wait_for 5 dead "$BACKGROUND" || fail "the task's background child $BACKGROUND outlived its shim"
echo "ok: a killed shim failed its job in $(awk "BEGIN { printf \"%.1f\", $T1 - $T0 }") s and its task's processes died"
grep -m1 -o "task $TASK lost: .*" "$W/agent0.log" | sed 's/^/  agent: /' | cut -c1-220

# A job with a restart runs again; a cancel then completes.
cat > "$W/again.yaml" <<'YAML'
name: again
resources: {gpus: 1}
command: ["/bin/sh", "-c", "sleep 600 & sleep 600"]
restart: {max: 1, backoff: 1s}
YAML
TWO=$("$LOOM" submit -f "$W/again.yaml" | grep -o '[0-9]*$') || fail "submit the restartable job"
wait_for 20 state_is "$TWO" running || fail "job $TWO did not start: $("$LOOM" show "$TWO")"
kill_shim_of "$TWO" 0
wait_for 10 sh -c "[ \"\$('$LOOM' show $TWO -o json | $PY -c 'import json,sys; print(json.load(sys.stdin)[\"restart_count\"])')\" = 1 ]" ||
  fail "job $TWO was not restarted: $("$LOOM" show "$TWO")"
wait_for 20 state_is "$TWO" running || fail "job $TWO did not run again: $("$LOOM" show "$TWO")"
wait_for 5 dead "$BACKGROUND" || fail "the first run's background child outlived its shim"
"$LOOM" cancel "$TWO" > /dev/null || fail "cancel $TWO"
wait_for 15 state_is "$TWO" cancelled || fail "job $TWO did not end after cancel: $("$LOOM" show "$TWO")"
echo "ok: a job whose shim died ran again by its restart policy, and a cancel then completed"
echo "all checks passed"
