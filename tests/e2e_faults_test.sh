#!/usr/bin/env bash
# Faults end to end on loopback (docs/fault-tolerance.md): three agents
# emulating 8-GPU nodes, faults injected with `loom chaos`.
#  1. Preemption: a high-priority job preempts a preemptible one, which saves
#     a checkpoint in its grace period (SIGUSR1), is requeued, and resumes
#     from that checkpoint once the high-priority job is done.
#  2. Health: an emulated GPU failure drains the node and moves its job to
#     another node.
#  3. Partition: a node's heartbeats freeze; its agent fences (kills) the
#     job's task before the server restarts the job elsewhere; when the
#     partition heals, the node comes back and no job ever ran twice at once.
#  4. kill-task: a killed task makes the job restart by its policy.
#  5. A node's agent is killed (-9) and never restarted: the task's shim
#     fences it (docs/agent.md, "Fencing") before the server restarts the
#     job elsewhere, so again no job runs twice at once.
# Usage: tests/e2e_faults_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PY=python3
# runs_apart A B T_NS WHAT [MAX_S]: from $W/part.trace ("run=R TIME_NS"
# lines), says when run A last wrote (after T_NS, the moment of WHAT) and
# when run B first wrote; fails unless B began after A ended and, with
# MAX_S, A ended within MAX_S seconds of T_NS.
runs_apart() {
  "$PY" - "$W/part.trace" "$@" <<'PYEOF'
import sys
trace, a, b, t0, what = sys.argv[1:6]
limit = float(sys.argv[6]) if len(sys.argv) > 6 else None
runs = {}
for line in open(trace):
    run, t = line.split()
    runs.setdefault(run, []).append(int(t))
last, first = max(runs["run=" + a]), min(runs["run=" + b])
ran_on = (last - int(t0)) / 1e9
print(f"run {a} last wrote {ran_on:.2f} s after {what}; "
      f"run {b} first wrote {(first - last) / 1e9:.2f} s after that")
assert first > last, f"run {b} started before run {a} stopped"
assert limit is None or ran_on < limit, f"run {a} ran on for {ran_on:.2f} s"
PYEOF
}
node_state_is() {
  "$LOOM" nodes -o json | "$PY" -c "
import json,sys
n=[x for x in json.load(sys.stdin)['nodes'] if x['name']=='$1'][0]
sys.exit(0 if n['state']=='$2' else 1)"
}

write_cluster 3
# Runs resume from a checkpoint on whichever nodes they get: a checkpoint
# root all nodes share (here, one host).
start_server --checkpoint-root "$W/checkpoints"
start_agents 3
echo "ok: three agents registered"

# --- 1. Preemption --------------------------------------------------------
# A spot job on all 24 GPUs counts steps; on SIGUSR1 task 0 saves its step
# to LOOM_CHECKPOINT_DIR, reports it with `loom checkpoint`, and every task
# exits 0. A run starts from the saved step.
cat > "$W/spot.sh" <<'SH'
ckpt="$LOOM_CHECKPOINT_DIR/step"
step=$(cat "$ckpt" 2>/dev/null || echo 0)
echo "start run=$LOOM_RESTART_COUNT step=$step"
save() {
  if [ "$LOOM_TASK_INDEX" = 0 ]; then
    mkdir -p "$LOOM_CHECKPOINT_DIR" && echo "$step" > "$ckpt.tmp" && mv "$ckpt.tmp" "$ckpt"
    "$LOOM" checkpoint --step "$step" > /dev/null
    echo "checkpoint $step"
  fi
  exit 0
}
trap save USR1
while [ "$step" -lt 150 ]; do
  step=$((step + 1))
  sleep 0.05 & wait $!
done
echo "done step=$step"
SH
cat > "$W/spot.yaml" <<YAML
name: spot
priority: low
preemptible: true
resources: {gpus: 24, nodes: 3}
command: ["/bin/bash", "$W/spot.sh"]
env: {LOOM: "$LOOM"}
checkpoint: {signal: SIGUSR1, grace: 20s}
YAML
SPOT=$("$LOOM" submit -f "$W/spot.yaml" | grep -o '[0-9]*$') || fail "submit spot"
wait_for 20 state_is "$SPOT" running || fail "spot job did not start: $("$LOOM" show "$SPOT")"
# Let it count a while (so that the checkpoint is not step 0).
wait_for 20 sh -c "'$LOOM' logs $SPOT --task 0 | grep -q '^start run=0'" || fail "spot did not start its loop"
sleep 1.5
URGENT=$("$LOOM" run -g 8 --name urgent -- /bin/sh -c 'sleep 2; echo urgent done' 2>&1 | grep -o '[0-9]*$')
# `loom run` uses the default (normal) priority class, above "low".
[ -n "$URGENT" ] || fail "submit urgent"
wait_for 20 state_is "$URGENT" running || fail "urgent job did not start: $("$LOOM" show "$URGENT")"
[ "$(jget "$SPOT" "j['preempted_by']")" = "$URGENT" ] || fail "spot does not say who preempted it: $("$LOOM" show "$SPOT")"
"$LOOM" show "$SPOT" | grep -q "Preempted by: *job $URGENT" || fail "loom show has no 'Preempted by': $("$LOOM" show "$SPOT")"
"$LOOM" show "$SPOT" -o json | grep -q "preempted by job $URGENT (priority normal over this preemptible low job)" ||
  fail "no preemption event with the reason: $("$LOOM" show "$SPOT")"
STEP=$(jget "$SPOT" "j['checkpoint']['step']")
[ -n "$STEP" ] && [ "$STEP" -gt 0 ] || fail "no checkpoint saved in the grace period: $("$LOOM" show "$SPOT")"
echo "ok: job $URGENT preempted spot job $SPOT, which saved step $STEP in its grace period"
wait_for 30 state_is "$URGENT" succeeded || fail "urgent did not finish: $("$LOOM" show "$URGENT")"
wait_for 30 sh -c "'$LOOM' logs $SPOT --task 0 2>/dev/null | grep -q '^start run=1'" ||
  fail "spot was not requeued and restarted: $("$LOOM" show "$SPOT")"
"$LOOM" logs "$SPOT" --task 0 | grep -q "^start run=1 step=$STEP\$" ||
  fail "run 1 did not resume from step $STEP: $("$LOOM" logs "$SPOT" --task 0)"
wait_for 30 state_is "$SPOT" succeeded || fail "spot did not finish: $("$LOOM" show "$SPOT")"
"$LOOM" logs "$SPOT" --task 0 | grep -q "^done step=150$" || fail "spot did not count to 150"
[ "$(jget "$SPOT" "j['requeues']")" = 1 ] || fail "requeues != 1"
[ "$(jget "$SPOT" "j['restart_count']")" = 1 ] || fail "restart_count != 1"
echo "ok: spot job resumed from step $STEP and finished"

# --- 2. Health: a failed GPU drains the node and moves its job -------------
cat > "$W/long.yaml" <<YAML
name: long
resources: {gpus: 8}
command: ["/bin/bash", "-c", "trap 'echo checkpoint-signal; exit 0' USR1; echo run=\$LOOM_RESTART_COUNT; while :; do sleep 0.1 & wait \$!; done"]
checkpoint: {grace: 5s}
YAML
LONG=$("$LOOM" submit -f "$W/long.yaml" | grep -o '[0-9]*$') || fail "submit long"
wait_for 20 state_is "$LONG" running || fail "long did not start"
SICK=$(jget "$LONG" "j['placement']['tasks'][0]['node']")
moved_off() {
  "$LOOM" show "$LONG" -o json | "$PY" -c "
import json,sys
j=json.load(sys.stdin)
ok = j['state']=='running' and j['restart_count']==1 and j['placement'] and j['placement']['tasks'][0]['node']!='$SICK'
sys.exit(0 if ok else 1)"
}
"$LOOM" chaos fail-gpu "$SICK" 3 > "$W/chaos.out" 2>&1 || fail "loom chaos fail-gpu: $(cat "$W/chaos.out")"
wait_for 10 node_state_is "$SICK" drained || fail "node $SICK not drained: $("$LOOM" nodes)"
"$LOOM" nodes | grep "$SICK" | grep -q "unhealthy: GPU 3 .* failed (injected fault)" ||
  fail "loom nodes does not say why: $("$LOOM" nodes)"
wait_for 20 moved_off ||
  fail "job $LONG was not moved off $SICK: $("$LOOM" show "$LONG")"
"$LOOM" show "$LONG" -o json | grep -q "moved off $SICK: unhealthy: GPU 3" || fail "no 'moved off' event"
[ "$(jget "$LONG" "j['requeues']")" = 1 ] || fail "a move is a requeue: $("$LOOM" show "$LONG")"
echo "ok: GPU 3 of $SICK failed; the node was drained and job $LONG moved to $(jget "$LONG" "j['placement']['tasks'][0]['node']")"
"$LOOM" chaos heal "$SICK" > /dev/null || fail "chaos heal"
node_state_is "$SICK" drained || fail "a healed node must stay drained until uncordoned"
"$LOOM" uncordon "$SICK" > /dev/null || fail "uncordon"
wait_for 10 node_state_is "$SICK" up || fail "$SICK not up after heal + uncordon: $("$LOOM" nodes)"
"$LOOM" cancel "$LONG" > /dev/null
wait_for 20 state_is "$LONG" cancelled || fail "cancel long"
echo "ok: healed and uncordoned, $SICK is up again"

# --- 3. Partition that heals: no job runs twice ----------------------------
# Every task appends "run=R TIME" to one trace file ten times a second.
cat > "$W/part.yaml" <<YAML
name: part
resources: {gpus: 8}
command: ["/bin/bash", "-c", "while :; do echo \"run=\$LOOM_RESTART_COUNT \$(date +%s%N)\" >> $W/part.trace; sleep 0.1; done"]
restart: {max: 3, backoff: 0s}
YAML
PART=$("$LOOM" submit -f "$W/part.yaml" | grep -o '[0-9]*$') || fail "submit part"
wait_for 20 state_is "$PART" running || fail "part did not start"
FROZEN=$(jget "$PART" "j['placement']['tasks'][0]['node']")
FI=${FROZEN#h200-}
sleep 1
T_FREEZE=$(date +%s%N)
"$LOOM" chaos freeze "$FROZEN" > /dev/null || fail "chaos freeze"
wait_for 6 node_state_is "$FROZEN" suspect || fail "$FROZEN never suspect: $("$LOOM" nodes)"
echo "ok: $FROZEN is suspect"
wait_for 15 sh -c "grep -q '^run=1 ' $W/part.trace" || fail "part did not run again: $("$LOOM" show "$PART")"
node_state_is "$FROZEN" down || fail "$FROZEN should be down: $("$LOOM" nodes)"
[ "$(jget "$PART" "j['placement']['tasks'][0]['node']")" != "$FROZEN" ] || fail "restarted on the frozen node"
grep -q "fenced: no heartbeat answered" "$W/agent$FI.log" || fail "agent of $FROZEN did not fence: $(tail "$W/agent$FI.log")"
"$LOOM" chaos thaw "$FROZEN" > /dev/null || fail "chaos thaw"
wait_for 10 node_state_is "$FROZEN" up || fail "$FROZEN did not come back: $("$LOOM" nodes)"
sleep 1.5
runs_apart 0 1 "$T_FREEZE" "the freeze" || fail "the job ran twice at once: $("$LOOM" show "$PART")"
[ "$(cut -d' ' -f1 "$W/part.trace" | sort -u | tr '\n' ' ')" = "run=0 run=1 " ] ||
  fail "runs other than 0 and 1: $(cut -d' ' -f1 "$W/part.trace" | sort -u)"
state_is "$PART" running || fail "part not running after the heal"
[ "$(jget "$PART" "len(j['placement']['tasks'])")" = 1 ] || fail "part has more than one task"
echo "ok: partition healed; $FROZEN up again; job $PART ran once at a time"

# --- 4. kill-task ------------------------------------------------------------
"$LOOM" chaos kill-task "$PART" > /dev/null || fail "chaos kill-task"
wait_for 15 sh -c "grep -q '^run=2 ' $W/part.trace" || fail "killed task did not restart: $("$LOOM" show "$PART")"
"$LOOM" show "$PART" -o json | grep -q "killed by SIGKILL" || fail "no kill event: $("$LOOM" show "$PART")"
echo "ok: a killed task restarts the job (run 2)"

# Bad chaos input gets a clear error and a non-zero exit.
"$LOOM" chaos fail-gpu "$FROZEN" 99 > "$W/bad.out" 2>&1 && fail "GPU 99 accepted"
grep -q "GPU index from 0 to 7" "$W/bad.out" || fail "bad GPU message: $(cat "$W/bad.out")"
"$LOOM" chaos explode h200-0 > "$W/bad.out" 2>&1 && fail "unknown action accepted"
grep -q "unknown chaos action" "$W/bad.out" || fail "unknown action message"
"$LOOM" chaos freeze no-such-node > "$W/bad.out" 2>&1 && fail "unknown node accepted"
grep -q "no node 'no-such-node'" "$W/bad.out" || fail "unknown node message: $(cat "$W/bad.out")"
code=$(curl -s "${AUTH[@]}" -o /dev/null -w '%{http_code}' -X POST --data 'nope' "$LOOM_SERVER/v1/chaos")
[ "$code" = 400 ] || fail "garbage chaos body: HTTP $code"
kill -0 "$SERVER" || fail "server died"
echo "ok: bad chaos input refused"

# --- 5. Agent killed, never restarted: the shim fences the task ------------
wait_for 10 state_is "$PART" running || fail "part not running as run 2"
DEAD=$(jget "$PART" "j['placement']['tasks'][0]['node']")
DI=${DEAD#h200-}
sleep 1
T_KILL=$(date +%s%N)
kill -9 "${AGENT_PIDS[$DI]}" || fail "kill the agent of $DEAD"
wait_for 15 sh -c "grep -q '^run=3 ' $W/part.trace" || fail "part did not run again after its agent died: $("$LOOM" show "$PART")"
sleep 1
# Fenced at the limit (4 s: 80% of the 5 s heartbeat timeout), not later.
runs_apart 2 3 "$T_KILL" "its agent was killed" 5.5 ||
  fail "the job ran twice at once, or run 2 outlived its lease: $("$LOOM" show "$PART")"
grep -q "^signaled 9 " "$W/agent$DI/tasks/$PART.0.2.exit" ||
  fail "no SIGKILL exit recorded by the shim: $(cat "$W/agent$DI/tasks/$PART.0.2.exit" 2>&1)"
echo "ok: the agent of $DEAD was killed; its shim fenced run 2 before run 3 started"

# --- 6. A plain job (no restart policy) whose node dies runs again ---------
# Losing a node is not the job's fault (requeue); its own exit code is.
"$LOOM" cancel "$PART" > /dev/null
wait_for 20 state_is "$PART" cancelled || fail "cancel part"
PLAIN=$("$LOOM" run -g 8 --name plain -- sleep 600 | grep -o 'job [0-9]*' | grep -o '[0-9]*$') ||
  fail "submit the plain job"
wait_for 20 state_is "$PLAIN" running || fail "plain did not start: $("$LOOM" show "$PLAIN")"
LOSTN=$(jget "$PLAIN" "j['placement']['tasks'][0]['node']")
kill -9 "${AGENT_PIDS[${LOSTN#h200-}]}" || fail "kill the agent of $LOSTN"
runs_again() {
  [ "$(jget "$PLAIN" "j['state'], j['restart_count'], j['restarts_used'], j['requeues']")" = "running 1 0 1" ]
}
wait_for 20 runs_again || fail "plain was not requeued after its node died: $("$LOOM" show "$PLAIN")"
[ "$(jget "$PLAIN" "j['placement']['tasks'][0]['node']")" != "$LOSTN" ] || fail "plain runs on the dead node"
"$LOOM" show "$PLAIN" > "$W/plain.show"
grep -q "requeued: task 0 was lost with its node $LOSTN (no heartbeat for" "$W/plain.show" ||
  fail "loom show does not say plain was requeued for its node: $(cat "$W/plain.show")"
grep -q "Restarts: *1 (0 after its own failures, 1 requeued" "$W/plain.show" ||
  fail "loom show does not tell the requeue from a restart: $(cat "$W/plain.show")"
"$LOOM" cancel "$PLAIN" > /dev/null
OWN=$("$LOOM" run -g 1 --name own -- sh -c 'exit 3' | grep -o 'job [0-9]*' | grep -o '[0-9]*$') ||
  fail "submit the failing job"
wait_for 20 state_is "$OWN" failed || fail "own is $(jget "$OWN" "j['state']"): $("$LOOM" show "$OWN")"
[ "$(jget "$OWN" "j['restart_count']")" = 0 ] || fail "own exit 3 ran again: $("$LOOM" show "$OWN")"
echo "ok: a plain job whose node died was requeued (not restarted) elsewhere; one that exited 3 failed"
kill -0 "$SERVER" || fail "server died"
echo "PASS"
