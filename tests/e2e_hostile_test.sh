#!/usr/bin/env bash
# Hostile and sloppy clients against a running cluster (loopback only;
# docs/server.md): slowloris, idle connections, one user's many log
# streams, a frozen agent behind log reads, framing tricks (smuggling,
# pipelining, bad lengths), and one request naming a job 5,000 times. While
# each runs, an honest caller is answered quickly, the agents' heartbeats
# are answered well within the fence margin (--fence-after, 4 s here) and a
# running job survives: same task, no restart. Prints the worst heartbeat
# round trip seen. Usage: tests/e2e_hostile_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
HOSTILE=(python3 tests/hostile/hostile_client.py)
write_cluster 2
start_server
start_agents 2
ADMIN=$(cat "$W/admin.token")
"$LOOM" token create --user nobody --project default > "$W/mallory.token" 2> /dev/null ||
  fail "cannot make a user token"
MALLORY=$(cat "$W/mallory.token")

# The job that must survive: one GPU on h200-0, running until cancelled.
LONG=$(LOOM_TOKEN_FILE="$W/mallory.token" "$LOOM" run -g 1 --name long -- sh -c 'echo started; sleep 600' |
  grep -o '[0-9]*$') || fail "submit the long job"
wait_for 10 state_is "$LONG" running || fail "the long job did not start"
TASK0=$("$LOOM" show "$LONG" -o json | grep -o '"task_id": *"[^"]*"' | head -1)
NODE0=$("$LOOM" show "$LONG" -o json | grep -o '"node": *"h200-[01]"' | head -1 | grep -o 'h200-[01]')
echo "ok: job $LONG runs on $NODE0 ($TASK0)"

# Heartbeat round trips as each agent measures them, from now on.
for i in 0 1; do
  curl -sf "http://127.0.0.$((i + 2)):$((PORT + 1 + i))/v1/stats?reset=1" > /dev/null ||
    fail "agent $i stats"
done

run_phase() {
  "${HOSTILE[@]}" "$@" --port "$PORT" --token "$ADMIN" --user-token "$MALLORY" \
    --job "$LONG" > "$W/phase.out" 2>&1
  local rc=$?
  cat "$W/phase.out"
  [ $rc = 0 ] || fail "phase $1"
}

run_phase slowloris --count 60 --seconds 12 --bound 1.5
run_phase idle --count 200 --seconds 4 --bound 1.5
run_phase follow --count 10 --seconds 3 --bound 1.5
run_phase framing
run_phase release --bound 2

# A frozen agent (SIGSTOP) behind log reads: each read gives up after the
# proxy's short deadline with a 503, and other callers are not held.
# A whole node: the other one (the long job holds a GPU of its own node).
# Not requeued when the frozen node is declared down (5 s, while the reads
# go on): it keeps its task there, and so its log source.
cat > "$W/second.yaml" <<'YAML'
name: second
resources: {gpus: 8}
command: [sh, -c, "echo hi; sleep 600"]
requeue: {max: 0}
YAML
SECOND=$(LOOM_TOKEN_FILE="$W/mallory.token" "$LOOM" submit -f "$W/second.yaml" |
  grep -o '[0-9]*$') || fail "submit the second job"
wait_for 10 state_is "$SECOND" running || fail "the second job did not start"
NODE1=$("$LOOM" show "$SECOND" -o json | grep -o '"node": *"h200-[01]"' | head -1 | grep -o 'h200-[01]')
[ "$NODE1" != "$NODE0" ] || fail "the second job shares the long job's node"
FROZEN=${AGENT_PIDS[${NODE1#h200-}]}
kill -STOP "$FROZEN"
start=$(date +%s%N)
READERS=()
for k in $(seq 8); do
  (curl -s -m 60 -o "$W/frozen.$k" -w '%{http_code}' -H "Authorization: Bearer $MALLORY" \
    "$LOOM_SERVER/v1/jobs/$SECOND/logs" > "$W/frozen.code.$k") &
  READERS+=($!)
done
sleep 0.5
t0=$(date +%s%N)
curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/whoami" > /dev/null || fail "whoami while an agent is frozen"
honest=$((($(date +%s%N) - t0) / 1000000))
wait "${READERS[@]}"
took=$((($(date +%s%N) - start) / 1000000))
kill -CONT "$FROZEN"
codes=$(cat "$W"/frozen.code.* | tr '\n' ' ')
echo "frozen agent: 8 log reads answered [$codes] in ${took} ms; an honest call took ${honest} ms"
for k in $(seq 8); do
  [ "$(cat "$W/frozen.code.$k")" = 503 ] || fail "a log read of a frozen agent's task got $(cat "$W/frozen.code.$k"): $(cat "$W/frozen.$k")"
done
# The reader waits for its own reads only (four at a time, each up to the
# proxy's 5 s read deadline): bounded, never the old 24 h.
[ "$took" -lt 30000 ] || fail "log reads of a frozen agent took ${took} ms"
[ "$honest" -lt 1500 ] || fail "an honest call waited ${honest} ms behind a frozen agent"
# A failed log read is an error, not log text: the CLI exits non-zero.
kill -STOP "$FROZEN"
LOOM_TOKEN_FILE="$W/mallory.token" timeout 60 "$LOOM" logs "$SECOND" > "$W/cli.out" 2>&1 &&
  fail "loom logs of a frozen agent's task exited 0: $(cat "$W/cli.out")"
kill -CONT "$FROZEN"
echo "ok: a frozen agent costs a log reader a 503, nobody else anything"

# The long job survived everything: still running, same task, no restart.
J=$("$LOOM" show "$LONG" -o json)
grep -q '"state": *"running"' <<< "$J" || fail "the long job is no longer running: $J"
grep -q "$TASK0" <<< "$J" || fail "the long job's task changed: $J"
grep -q '"restart_count": *0' <<< "$J" || fail "the long job restarted: $J"
echo "ok: job $LONG still runs its first task"

# Heartbeats: none failed on the long job's node, and the worst round trip
# stayed far below the fence margin (4 s).
S=$(curl -sf "http://127.0.0.$((${NODE0#h200-} + 2)):$((PORT + 1 + ${NODE0#h200-}))/v1/stats") ||
  fail "agent stats"
echo "heartbeats of $NODE0 during the attacks: $S"
python3 - "$S" <<'PY' || fail "heartbeats were late or failed"
import json, sys
s = json.loads(sys.argv[1])["heartbeats"]
print("worst heartbeat round trip: %.1f ms over %d heartbeats, %d failed" %
      (s["latency_ms"]["max"], s["answered"], s["failed"]))
sys.exit(0 if s["failed"] == 0 and s["latency_ms"]["max"] < 2000 and
         s["answered"] > 10 else 1)
PY
echo "ok: hostile clients never delayed a heartbeat past the fence margin"
