#!/usr/bin/env bash
# End to end on loopback: a server on the SQLite store, two agents emulating
# 8-GPU H200 nodes on 127.0.0.2 and 127.0.0.3, and the CLI. A 16-GPU job on
# two nodes runs real processes with the training contract set and finishes;
# bad input is refused; the server survives kill -9 without losing jobs.
# Usage: tests/e2e_cluster_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
write_cluster 2
start_server
start_agents 2
echo "ok: two agents registered"

# A two-node gang with the distributed-training contract.
"$LOOM" run -g 16 --nodes 2 --name contract --wait -- /bin/sh -c \
  'echo "rank=$RANK world=$WORLD_SIZE node_rank=$NODE_RANK master=$MASTER_ADDR:$MASTER_PORT gpus=$CUDA_VISIBLE_DEVICES job=$LOOM_JOB_ID"' \
  > "$W/run.out" 2>&1 || fail "loom run --wait failed: $(cat "$W/run.out")"
ID=$("$LOOM" queue --all -o json | grep -o '"id": *[0-9]*' | head -1 | grep -o '[0-9]*$')
"$LOOM" logs "$ID" --task 0 > "$W/t0.out" || fail "logs of task 0"
"$LOOM" logs "$ID" --task 1 > "$W/t1.out" || fail "logs of task 1"
grep -q "rank=0 world=2 node_rank=0 master=127.0.0.2:" "$W/t0.out" || fail "task 0 output: $(cat "$W/t0.out")"
grep -q "rank=1 world=2 node_rank=1 master=127.0.0.2:" "$W/t1.out" || fail "task 1 output: $(cat "$W/t1.out")"
grep -q "gpus=0,1,2,3,4,5,6,7" "$W/t1.out" || fail "CUDA_VISIBLE_DEVICES"
echo "ok: gang ran with the training contract"

# Exit codes come back through --wait.
"$LOOM" run -g 1 --wait -- /bin/sh -c 'exit 7' > /dev/null 2>&1
[ $? = 7 ] || fail "exit code of a failing job"
echo "ok: exit code 7 returned"

# The restart policy: fails on its first run, succeeds on the second.
cat > "$W/retry.yaml" <<'YAML'
name: retry
resources: {gpus: 2}
command: ["/bin/sh", "-c", "echo run $LOOM_RESTART_COUNT; [ \"$LOOM_RESTART_COUNT\" = 1 ]"]
restart: {max: 2, backoff: 0s}
YAML
RETRY=$("$LOOM" submit -f "$W/retry.yaml" | grep -o '[0-9]*$') || fail "submit retry"
for _ in $(seq 100); do
  "$LOOM" show "$RETRY" -o json | grep -q '"state": *"succeeded"' && break
  sleep 0.1
done
"$LOOM" show "$RETRY" -o json > "$W/retry.json"
grep -q '"state": *"succeeded"' "$W/retry.json" && grep -q '"restart_count": *1' "$W/retry.json" ||
  fail "restart policy: $(cat "$W/retry.json")"
"$LOOM" logs "$RETRY" | grep -q "run 1" || fail "logs of the second run"
# The failed run's output is still there, and `loom show` lists it.
[ "$("$LOOM" logs "$RETRY" --run 0)" = "run 0" ] || fail "logs of the first run: $("$LOOM" logs "$RETRY" --run 0 2>&1)"
"$LOOM" show "$RETRY" | grep -q "^Past runs: *0 on h200-[0-9]* (loom logs $RETRY --run N)" ||
  fail "show: $("$LOOM" show "$RETRY")"
"$LOOM" logs "$RETRY" --run 5 > "$W/run5.out" 2>&1 && fail "a run that never was has logs"
grep -q "job $RETRY has no run 5 whose logs are kept (runs kept: 0, 1)" "$W/run5.out" || fail "run 5: $(cat "$W/run5.out")"
echo "ok: a failed run was restarted with LOOM_RESTART_COUNT=1, and its output is still readable"

# Bad input: a 400 with the field, exit status 1; nothing created.
before=$("$LOOM" queue --all -o json | grep -c '"id"')
out=$("$LOOM" run -g 64 -- true 2>&1); rc=$?
[ $rc = 1 ] && grep -q "whole cluster holds 2" <<<"$out" || fail "infeasible job: rc=$rc $out"
out=$(curl -s "${AUTH[@]}" -X POST "$LOOM_SERVER/v1/jobs" -d '{"name": "x", "command": ["true"], "resources": {"gpus": "lots"}}')
grep -q '"field":"resources.gpus"' <<<"$out" || fail "bad field not named: $out"
after=$("$LOOM" queue --all -o json | grep -c '"id"')
[ "$before" = "$after" ] || fail "a refused job was stored"
echo "ok: bad input refused"

# kill -9 of the server while a job runs: after restart nothing is lost or
# doubled and the task keeps running.
"$LOOM" run -g 8 --name sleeper -- /bin/sh -c 'sleep 4; echo done' > /dev/null || fail "submit sleeper"
for _ in $(seq 50); do "$LOOM" queue | grep -q "sleeper.*running" && break; sleep 0.1; done
ids_before=$("$LOOM" queue --all -o json | grep -o '"id": *[0-9]*' | sort)
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null
start_server
ids_after=$("$LOOM" queue --all -o json | grep -o '"id": *[0-9]*' | sort)
[ "$ids_before" = "$ids_after" ] || fail "jobs changed across kill -9: $ids_before vs $ids_after"
SLEEPER=$("$LOOM" queue --all -o json | grep -B2 -A2 '"sleeper"' | grep -o '"id": *[0-9]*' | grep -o '[0-9]*$')
for _ in $(seq 100); do
  "$LOOM" show "$SLEEPER" -o json | grep -q '"state": *"succeeded"' && break
  sleep 0.1
done
"$LOOM" show "$SLEEPER" -o json | grep -q '"state": *"succeeded"' || fail "sleeper after restart: $("$LOOM" show "$SLEEPER")"
echo "ok: kill -9 of the server lost nothing"
echo "all checks passed"
