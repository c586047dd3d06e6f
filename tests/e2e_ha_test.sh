#!/usr/bin/env bash
# A replicated controller on a three-member etcd (docs/ha.md): two loom
# servers, one leads. While four clients stream submissions and a job runs,
# the leader is killed with SIGKILL: the standby leads within a few seconds
# (the test prints the failover time), no acknowledged job is lost or stored
# twice, and the running task keeps running under the same pid. Then one
# etcd member of three is killed and loom keeps serving; the old leader comes
# back as a standby; a clean stop of the leader hands over at once.
# Usage: tests/e2e_ha_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PY=/usr/bin/python3
command -v etcd > /dev/null || fail "etcd not installed (scripts/setup.sh --test installs etcd-server)"
now() { date +%s.%N; }
elapsed() { $PY -c "print(f'{$2 - $1:.2f}')"; }

write_cluster 2
# Three etcd members on loopback, with the fast timings of COMPONENTS.md.
# Below the kernel's ephemeral ports (32768+) and the range of PORT, so that
# no other test's connection or server holds them.
EBASE=$((10000 + RANDOM % 9000))
INITIAL="" EP=""
for i in 1 2 3; do
  INITIAL="$INITIAL${INITIAL:+,}m$i=http://127.0.0.1:$((EBASE + 10 * i + 1))"
  EP="$EP${EP:+,}http://127.0.0.1:$((EBASE + 10 * i))"
done
ETCD_PIDS=()
for i in 1 2 3; do
  etcd --name "m$i" --data-dir "$W/etcd$i" --heartbeat-interval=50 --election-timeout=500 \
    --max-txn-ops=100000 --max-request-bytes=33554432 \
    --listen-client-urls "http://127.0.0.1:$((EBASE + 10 * i))" \
    --advertise-client-urls "http://127.0.0.1:$((EBASE + 10 * i))" \
    --listen-peer-urls "http://127.0.0.1:$((EBASE + 10 * i + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((EBASE + 10 * i + 1))" \
    --initial-cluster "$INITIAL" --initial-cluster-token "loom-ha-$$" \
    --initial-cluster-state new --logger zap --log-level warn > "$W/etcd$i.log" 2>&1 &
  ETCD_PIDS[$i]=$!
  PIDS+=($!)
done
for i in 1 2 3; do
  for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$((EBASE + 10 * i))/health" | grep -q true && break
    sleep 0.05
  done
  curl -sf "http://127.0.0.1:$((EBASE + 10 * i))/health" | grep -q true ||
    fail "etcd member $i did not start: $(tail -3 "$W/etcd$i.log")"
done
echo "ok: three etcd members up ($EP)"

URL_A="http://127.0.0.1:$PORT"
URL_B="http://127.0.0.1:$((PORT + 50))"
export LOOM_SERVER="$URL_A,$URL_B"
# start_ha_server NAME PORT: a loom server on the etcd store.
start_ha_server() {
  "$LOOM" server --store etcd --etcd-endpoints "$EP" --leader-lease 2 \
    --listen "127.0.0.1:$2" --data-dir "$W/server-$1" --cluster "$W/cluster.yaml" \
    --heartbeat-timeout 10 --admin-token-file "$W/admin.token" \
    --secret-key-file "$W/secret.key" >> "$W/server-$1.log" 2>&1 &
  eval "SERVER_$1=$!"
  PIDS+=($!)
}
role() {
  curl -sf --max-time 2 "$1/v1/leader" | $PY -c 'import json,sys; print(json.load(sys.stdin)["role"])' 2> /dev/null
}
# wait_role URL ROLE SECONDS
wait_role() {
  local deadline
  deadline=$($PY -c "import time; print(time.time() + $3)")
  while [ "$(role "$1")" != "$2" ]; do
    $PY -c "import sys, time; sys.exit(0 if time.time() < $deadline else 1)" || return 1
    sleep 0.05
  done
}

start_ha_server A "$PORT"
wait_role "$URL_A" leader 10 || fail "server A did not lead"
after_server_start
start_ha_server B "$((PORT + 50))"
wait_role "$URL_B" standby 10 || fail "server B did not start as a standby"
echo "ok: A leads, B stands by"
redirect=$(curl -s "${AUTH[@]}" -o /dev/null -w '%{http_code} %{redirect_url}' -X POST -d '{}' "$URL_B/v1/jobs")
[ "$redirect" = "307 $URL_A/v1/jobs" ] || fail "standby answered a submission with '$redirect', not a redirect to A"
curl -sf "${AUTH[@]}" "$URL_B/metrics" | grep -qx 'loom_leader 0' || fail "standby's loom_leader is not 0"
curl -sf "${AUTH[@]}" "$URL_A/metrics" | grep -qx 'loom_leader 1' || fail "leader's loom_leader is not 1"
echo "ok: the standby redirects writes to the leader (307) and says loom_leader 0"

for i in 0 1; do
  "$LOOM" agent --server "$URL_A,$URL_B" --listen "127.0.0.$((i + 2)):$((PORT + 1 + i))" \
    --name "h200-$i" --data-dir "$W/agent$i" --emulate 8xH200 \
    --join-token-file "$W/join.token" > "$W/agent$i.log" 2>&1 &
  PIDS+=($!)
done
for _ in $(seq 100); do
  [ "$("$LOOM" nodes -o json 2> /dev/null | grep -c '"up"')" = 2 ] && break
  sleep 0.1
done
[ "$("$LOOM" nodes -o json | grep -c '"up"')" = 2 ] || fail "agents did not register"
echo "ok: two agents registered through the server list"

# A long job: its task appends "PID TIME" to a file every 0.2 s.
"$LOOM" run -g 8 --name long -- bash -c \
  "while true; do echo \"\$\$ \$(date +%s.%N)\" >> $W/long.ticks; sleep 0.2; done" > /dev/null ||
  fail "submit long"
for _ in $(seq 100); do [ -s "$W/long.ticks" ] && break; sleep 0.1; done
[ -s "$W/long.ticks" ] || fail "the long job did not start"
LONG_PID=$(head -1 "$W/long.ticks" | cut -d' ' -f1)

CLIENTS=4
PER_CLIENT=40
# Each client streams its submissions (tests/lib/cluster.sh).
submit_streams "$CLIENTS" "$PER_CLIENT"
for _ in $(seq 600); do
  [ "$(ack_count)" -ge $((CLIENTS * PER_CLIENT / 4)) ] && break
  sleep 0.02
done
KILLED=$(now)
kill -9 "$SERVER_A"
wait "$SERVER_A" 2> /dev/null
acked_at_kill=$(ack_count)
wait_role "$URL_B" leader 15 || fail "B did not take over within 15 s"
LED=$(now)
echo "failover: B leads $(elapsed "$KILLED" "$LED") s after kill -9 of the leader A ($acked_at_kill submissions acknowledged before)"
for p in "${CPIDS[@]}"; do wait "$p"; done
# What the clients saw: the longest wait between two acknowledgements.
gap=$(cat "$W"/acks.* | awk '{print $3}' | sort -n |
  awk -v t="$KILLED" 'NR > 1 && $1 > t && $1 - prev > max {max = $1 - prev} {prev = $1} END {printf "%.2f", max}')
after=$(cat "$W"/acks.* | awk -v t="$LED" '$3 > t' | wc -l)
[ "$after" -gt 0 ] || fail "no submission was acknowledged after the failover"
echo "failover: the clients' longest wait between two acknowledgements was $gap s; $after acknowledged after it"
acked=$(ack_count)
failed=$(cat "$W"/fails.* 2> /dev/null | wc -l)
echo "submissions: $acked acknowledged, $failed refused"
[ "$failed" = 0 ] || { cat "$W/client-errors.log"; fail "$failed submissions were refused during the failover"; }

check_jobs() {
  for _ in $(seq 600); do
    "$LOOM" queue --all -o json > "$W/queue.json" || fail "queue"
    "$PY" - "$W/queue.json" << 'PYEOF' && break
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
sys.exit(0 if all(j["state"] in ("succeeded", "failed", "cancelled") or j["name"] == "long" for j in jobs) else 1)
PYEOF
    sleep 0.1
  done
  cat "$W"/acks.* > "$W/acks"
  "$PY" - "$W/queue.json" "$W/acks" "$1" << 'PYEOF' || fail "job check failed"
import collections, json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
acks = [l.split() for l in open(sys.argv[2]) if l.strip()]
expected = int(sys.argv[3])
errors = []
by_id = collections.Counter(j["id"] for j in jobs)
by_name = collections.Counter(j["name"] for j in jobs)
errors += [f"job {i} listed {n} times" for i, n in by_id.items() if n > 1]
errors += [f"name {m} stored {n} times" for m, n in by_name.items() if n > 1]
names = {j["id"]: j["name"] for j in jobs}
for i, name, _ in acks:
    if names.get(int(i)) != name:
        errors.append(f"acknowledged job {i} ({name}) is {names.get(int(i), 'missing')}")
if len(jobs) != expected:
    errors.append(f"{len(jobs)} jobs stored, expected {expected}")
for j in jobs:
    if j["name"] == "long":
        if j["state"] != "running" or j["restart_count"] != 0:
            errors.append(f"long job is {j['state']}, restart_count {j['restart_count']}")
    elif j["state"] != "succeeded" or j["restart_count"] != 0:
        errors.append(f"job {j['id']} ({j['name']}): {j['state']}, restarts {j['restart_count']}, {j.get('reason', '')}")
print(f"{len(jobs)} jobs stored, {len(acks)} acknowledged submissions")
for e in errors[:20]:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF
}
check_jobs $((CLIENTS * PER_CLIENT + 1))
echo "ok: no acknowledged job lost, none stored twice, every one ran once"

# check_long SINCE: the long job's task is the same process and still ticks.
check_long() {
  local last_pid last_t
  sleep 1
  read -r last_pid last_t < <(tail -1 "$W/long.ticks")
  [ "$last_pid" = "$LONG_PID" ] || fail "the long job's task changed: pid $last_pid, was $LONG_PID"
  $PY -c "import sys; sys.exit(0 if $last_t > $1 + 0.5 else 1)" || fail "the long job's task stopped ticking"
  [ "$(cut -d' ' -f1 "$W/long.ticks" | sort -u | wc -l)" = 1 ] || fail "the long job ran more than one task"
}
check_long "$LED"
echo "ok: the running task kept running through the failover (pid $LONG_PID)"

# One etcd member of three dies: loom keeps serving.
kill -9 "${ETCD_PIDS[1]}"
wait "${ETCD_PIDS[1]}" 2> /dev/null
ETCD_KILLED=$(now)
# The survivors elect a new etcd leader if the dead member led (~1 s, more
# on a loaded machine): wait until both say they are healthy (have a
# leader), as an operator would see in `etcdctl endpoint health`.
for i in 2 3; do
  for _ in $(seq 200); do
    curl -sf --max-time 1 "http://127.0.0.1:$((EBASE + 10 * i))/health" | grep -q true && break
    sleep 0.05
  done
done
echo "etcd: the two survivors are healthy $(elapsed "$ETCD_KILLED" "$(now)") s after the kill"
for k in $(seq 10); do
  out=$("$LOOM" run -g 1 --name "after-etcd-$k" -- true 2>&1) || fail "submission after the etcd kill: $out"
  echo "$(grep -o 'job [0-9]*' <<< "$out" | grep -o '[0-9]*$') after-etcd-$k $(now)" >> "$W/acks.etcd"
done
[ "$(role "$URL_B")" = leader ] || fail "B lost leadership when an etcd member died"
check_jobs $((CLIENTS * PER_CLIENT + 11))
check_long "$ETCD_KILLED"
echo "ok: with one etcd member of three dead, loom kept serving (10 more jobs ran; B still leads)"

# The old leader comes back as a standby; a clean stop of the leader hands
# over at once (it revokes its lease).
start_ha_server A "$PORT"
wait_role "$URL_A" standby 10 || fail "A did not come back as a standby"
leader=$(curl -sf "$URL_A/v1/leader" | $PY -c 'import json,sys; print(json.load(sys.stdin)["leader"])')
[ "$leader" = "$URL_B" ] || fail "A says the leader is $leader, not $URL_B"
# The standby answers job reads itself, from the store: the same jobs.
curl -sf "${AUTH[@]}" -D "$W/standby.headers" "$URL_A/v1/jobs" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))' > "$W/standby.count"
grep -qi '^X-Loom-Served-By: standby' "$W/standby.headers" || fail "the standby did not serve the job list itself"
[ "$(cat "$W/standby.count")" = $((CLIENTS * PER_CLIENT + 11)) ] || fail "the standby lists $(cat "$W/standby.count") jobs"
echo "ok: the standby serves job reads from the store ($(cat "$W/standby.count") jobs)"
STOPPED=$(now)
kill -TERM "$SERVER_B"
wait_role "$URL_A" leader 10 || fail "A did not take over after B stopped"
echo "handover: A leads $(elapsed "$STOPPED" "$(now)") s after SIGTERM of the leader B"
wait "$SERVER_B" 2> /dev/null
rc=$?
[ "$rc" = 0 ] || fail "B exited with $rc on SIGTERM"
"$LOOM" run -g 1 --name "last" -- true > /dev/null || fail "submission after the handover"
echo "x last $(now)" > /dev/null
check_long "$(now)"
echo "ok: the old leader came back as a standby and took over on a clean stop"
echo "all checks passed"
