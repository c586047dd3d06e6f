# Shared by the end-to-end tests: a loom server on the SQLite store and agents
# emulating 8-GPU nodes, each on its own loopback address (127.0.0.2, ...).
# Source it after setting LOOM to the loom binary (and `cd` to the
# repository root); it sets W (a scratch dir removed on exit), PORT,
# LOOM_SERVER and SERVER (the server's pid), and kills every process the
# test started when the script exits, whole trees (tests/lib/procs.sh). The server writes
# its first admin token to $W/admin.token: LOOM_TOKEN_FILE points the CLI at
# it, AUTH=(-H "Authorization: Bearer ...") is for curl, and agents join
# with the join token in $W/join.token (docs/security.md).
# The test runs under its own reaper: tests/lib/procs.sh.
source tests/lib/procs.sh
W=$(mktemp -d)
PIDS=()
# Returns 1 when processes of the test survive it (they are named).
cleanup() {
  local rc=0
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  # Whole trees: tasks (and their children) whose agent or shim was killed
  # outlive it, and do not name the scratch dir (tests/lib/procs.sh).
  kill_test_processes "$W/" || rc=1
  wait 2>/dev/null
  rm -rf "$W"
  return $rc
}
trap 'cleanup || exit 1' EXIT
fail() {
  echo "FAIL: $*"
  for f in "$W"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done
  exit 1
}

# PORT to PORT + 60 are used (tests/lib/ports.sh).
source tests/lib/ports.sh
export LOOM_SERVER="http://127.0.0.1:$PORT"
export LOOM_TOKEN_FILE="$W/admin.token"
AUTH=()

# after_server_start: once the first server answers, AUTH for curl and a
# join token for the agents.
after_server_start() {
  for _ in $(seq 50); do [ -s "$W/admin.token" ] && break; sleep 0.1; done
  [ -s "$W/admin.token" ] || fail "the server wrote no admin token"
  AUTH=(-H "Authorization: Bearer $(cat "$W/admin.token")")
  if [ ! -s "$W/join.token" ]; then
    "$LOOM" token create --join --reusable --description "test agents" > "$W/join.token" 2> /dev/null ||
      fail "cannot make a join token"
    chmod 600 "$W/join.token"
  fi
}

# write_cluster NODES: a cluster file of NODES 8-GPU H200 nodes.
write_cluster() {
  cat > "$W/cluster.yaml" <<YAML
name: e2e
pools:
  - {name: h200, nodes: $1, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 2, leaves_per_spine: 2}
YAML
}

# start_server [EXTRA FLAGS...]: starts it and waits until /healthz answers.
# HEARTBEAT_TIMEOUT (seconds, default 5) is passed as --heartbeat-timeout.
start_server() {
  "$LOOM" server --listen "127.0.0.1:$PORT" --data-dir "$W/server" \
    --cluster "$W/cluster.yaml" --heartbeat-timeout "${HEARTBEAT_TIMEOUT:-5}" \
    --admin-token-file "$W/admin.token" "$@" >> "$W/server.log" 2>&1 &
  SERVER=$!
  PIDS+=($SERVER)
  for _ in $(seq 100); do
    curl -sf "$LOOM_SERVER/healthz" > /dev/null && { after_server_start; return 0; }
    sleep 0.1
  done
  fail "server did not start"
}

# start_agents N: agents h200-0 .. h200-(N-1) on 127.0.0.2 ..., then waits
# until all N nodes are up. AGENT_PIDS[i] is agent i's pid; AGENT_FLAGS
# (an array) are added to each agent's command line.
AGENT_PIDS=()
AGENT_FLAGS=()
launch_agent() {
  local i=$1
  "$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.$((i + 2)):$((PORT + 1 + i))" \
    --name "h200-$i" --data-dir "$W/agent$i" --emulate 8xH200 \
    --join-token-file "$W/join.token" "${AGENT_FLAGS[@]}" >> "$W/agent$i.log" 2>&1 &
  PIDS+=($!)
  AGENT_PIDS[$i]=$!
}
start_agents() {
  for i in $(seq 0 $(($1 - 1))); do launch_agent "$i"; done
  for _ in $(seq 100); do
    [ "$("$LOOM" nodes -o json 2>/dev/null | grep -c '"up"')" = "$1" ] && return 0
    sleep 0.1
  done
  fail "agents did not register"
}

# restart_agent I: agent I again (after the test killed it), with the same
# flags and data dir; waits until its node h200-I is up.
restart_agent() {
  launch_agent "$1"
  for _ in $(seq 100); do
    "$LOOM" nodes -o json 2>/dev/null | jq -e --arg n "h200-$1" \
      '[.. | objects | select(.name? == $n and .state? == "up")] | length > 0' > /dev/null &&
      return 0
    sleep 0.1
  done
  fail "agent $1 did not come back"
}

# submit_streams CLIENTS PER_CLIENT: starts CLIENTS clients in the
# background, each submitting PER_CLIENT one-GPU `true` jobs one after
# another with `loom run` (client C names its jobs cC-1, cC-2, ...). "ID NAME
# TIME" of every acknowledged submission goes to $W/acks.C, the name of every
# refused one to $W/fails.C and what the CLI said to $W/client-errors.log.
# Sets CPIDS to the clients' pids.
submit_streams() {
  local clients=$1 per_client=$2 c
  CPIDS=()
  for c in $(seq "$clients"); do
    (
      local k out
      for k in $(seq "$per_client"); do
        if out=$("$LOOM" run -g 1 --name "c$c-$k" -- true 2>&1); then
          echo "$(grep -o 'job [0-9]*' <<< "$out" | grep -o '[0-9]*$') c$c-$k $(date +%s.%N)" >> "$W/acks.$c"
        else
          echo "c$c-$k" >> "$W/fails.$c"
          echo "$out" >> "$W/client-errors.log"
          sleep 0.05
        fi
      done
    ) &
    CPIDS+=($!)
  done
}

# ack_count: how many submissions have been acknowledged so far.
ack_count() { cat "$W"/acks.* 2> /dev/null | wc -l; }

# jget JOB EXPR: EXPR (Python, over the job's JSON as `j`) of `loom show JOB`.
jget() {
  "$LOOM" show "$1" -o json 2>/dev/null |
    "${PY:-python3}" -c "import json,sys; j=json.load(sys.stdin); print($2)" 2>/dev/null
}
# wait_for SECONDS COMMAND...: polls every 0.1 s until COMMAND succeeds.
wait_for() {
  local n=$(($1 * 10))
  shift
  for _ in $(seq "$n"); do
    "$@" && return 0
    sleep 0.1
  done
  return 1
}
# state_is JOB STATE: whether the job is in STATE now.
state_is() { [ "$(jget "$1" "j['state']")" = "$2" ]; }
