#!/usr/bin/env bash
# Job history across retention and kill -9 (docs/accounting.md). N one-GPU
# jobs (arrays of up to 1,000 elements, default N=600) run on NODES (default
# 2) emulated 8-GPU nodes under a server that keeps finished jobs for an
# hour; it is killed with SIGKILL when half have run, and started again.
# Then it is killed again and started with a 3 s retention: it purges them
# all to the accounting store, and is killed a third time once the purge has
# begun (in its middle when N > 2,000, a pass's size) and restarted.
# Checked: every job is in `loom sacct` once, succeeded; `sacct`'s
# GPU-seconds, `loom report usage` and `loom_gpu_seconds_total` agree; the
# counter, scraped all along, never went down; GET /v1/jobs is empty at the
# end; a new job can depend on a purged one. The server's memory (VmRSS) is
# printed at the start, with the N jobs in memory, and after the purge; with
# N >= 10000 (bench/retention.sh) the last must be back within 25% (plus 8
# MiB) of the first.
# With STORE etcd the server runs on a one-member etcd (Debian's etcd-server),
# so the accounting store is keys under /accounting/ (docs/accounting.md).
# Usage: tests/e2e_retention_test.sh PATH_TO_LOOM [N] [sqlite|etcd]
set -u
LOOM="$(realpath "$1")"
N="${2:-600}"
STORE="${3:-sqlite}"
NODES="${NODES:-2}"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
SERVER_FLAGS=()
if [ "$STORE" = etcd ]; then
  command -v etcd > /dev/null || fail "etcd not installed (scripts/setup.sh --test installs etcd-server)"
  EPORT=$((PORT + 40))
  etcd --name m1 --data-dir "$W/etcd" --heartbeat-interval=50 --election-timeout=500 \
    --listen-client-urls "http://127.0.0.1:$EPORT" --advertise-client-urls "http://127.0.0.1:$EPORT" \
    --listen-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
    --initial-cluster "m1=http://127.0.0.1:$((EPORT + 1))" --logger zap --log-level warn \
    --max-txn-ops=100000 --max-request-bytes=33554432 \
    > "$W/etcd.log" 2>&1 &
  PIDS+=($!)
  wait_for 10 sh -c "curl -sf http://127.0.0.1:$EPORT/health | grep -q true" ||
    fail "etcd did not start: $(tail -3 "$W/etcd.log")"
  SERVER_FLAGS=(--store etcd --etcd-endpoints "http://127.0.0.1:$EPORT" --leader-lease 2)
fi
# restart_server RETENTION: kill -9, then start again (on etcd: until it leads).
leads() { curl -sf "$LOOM_SERVER/v1/leader" | grep -q '"role": *"leader"'; }
restart_server() {
  kill -9 "$SERVER"
  wait "$SERVER" 2> /dev/null
  start_server "${SERVER_FLAGS[@]}" --job-retention "$1"
  wait_for 30 leads || fail "the restarted server does not lead: $(curl -s "$LOOM_SERVER/v1/leader")"
}
write_cluster "$NODES"
start_server "${SERVER_FLAGS[@]}" --job-retention 1h
wait_for 30 leads || fail "the server does not lead: $(curl -s "$LOOM_SERVER/v1/leader")"
start_agents "$NODES"

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER/status"; }
RSS_START=$(rss_kib)
T0=$(date -u +%Y-%m-%dT%H:%M:%SZ)
T_START=$(date +%s)

# The counter, scraped every 0.3 s whatever happens to the server.
(
  while :; do
    v=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" 2>/dev/null |
      awk '/^loom_gpu_seconds_total\{/ {s += $2; n++} END {if (n) printf "%.6f\n", s}')
    [ -n "$v" ] && echo "$v" >> "$W/counter.txt"
    sleep 0.3
  done
) &
PIDS+=($!)

# The jobs: arrays of up to 1,000 one-GPU elements.
ARRAYS=()
left=$N
while [ "$left" -gt 0 ]; do
  n=$((left > 1000 ? 1000 : left))
  out=$("$LOOM" run -g 1 --name "hist" --array "0-$((n - 1))" -- true 2>&1) ||
    fail "submit an array of $n: $out"
  ARRAYS+=("$(grep -o 'job [0-9]*' <<< "$out" | head -1 | grep -o '[0-9]*$')")
  left=$((left - n))
done
all_done() {
  local a
  for a in "${ARRAYS[@]}"; do state_is "$a" succeeded || return 1; done
}
succeeded_count() {
  curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=succeeded" |
    python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))'
}
half_done() { n=$(succeeded_count) && [ "$n" -ge $((N / 2)) ]; }
# kill -9 while elements run: the ones that end meanwhile are reported
# when the agents register again.
wait_for $((N / 8 + 60)) half_done || fail "half the jobs did not succeed in time"
restart_server 1h
echo "ok: killed the server (SIGKILL) with half the jobs done, and started it again"
wait_for $((N / 4 + 120)) all_done || fail "the arrays did not all succeed in time"
RSS_FULL=$(rss_kib)
RUN_S=$(($(date +%s) - T_START))
echo "ok: $N jobs succeeded in ${RUN_S} s (${#ARRAYS[@]} arrays)"

# Before the purge: the numbers to keep.
gpu_seconds_of_sacct() {
  "$LOOM" sacct -S "$T0" -o json | python3 -c '
import json, sys
jobs = json.load(sys.stdin)["jobs"]
states = {}
for j in jobs:
    states[j["state"]] = states.get(j["state"], 0) + 1
print(len(jobs), len({j["id"] for j in jobs}), "%.6f" % sum(j["gpu_seconds"] for j in jobs),
      sum(1 for j in jobs if j["live"]), ",".join("%s=%d" % kv for kv in sorted(states.items())))'
}
usage_total() {
  "$LOOM" report usage --by project,user -S "$T0" -o json |
    python3 -c 'import json,sys; print("%.6f" % json.load(sys.stdin)["total_gpu_seconds"])'
}
counter_now() {
  curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" |
    awk '/^loom_gpu_seconds_total\{/ {s += $2} END {printf "%.6f\n", s}'
}
read -r rows ids secs live states <<< "$(gpu_seconds_of_sacct)"
[ "$rows" = "$N" ] && [ "$ids" = "$N" ] || fail "sacct lists $rows rows ($ids ids), not $N"
[ "$states" = "succeeded=$N" ] || fail "sacct states: $states"
[ "$live" = "$N" ] || fail "$live of $N rows are live before any purge"
USAGE1=$(usage_total)
COUNTER1=$(counter_now)
python3 - "$secs" "$USAGE1" "$COUNTER1" <<'EOF' || fail "before the purge: sacct $secs, report $USAGE1, counter $COUNTER1 GPU-s"
import sys
a, b, c = map(float, sys.argv[1:])
assert a > 0 and abs(a - b) < 1e-3 * max(1, a) and abs(a - c) < 1e-3 * max(1, a)
EOF
echo "ok: before the purge sacct, report usage and the counter agree: $secs GPU-s"

# kill -9, then a 3 s retention: the purge starts; kill -9 again halfway.
restart_server 3s
live_jobs() { curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))'; }
some_purged() { n=$(live_jobs) && [ "$n" -lt "$((N + ${#ARRAYS[@]}))" ]; }
# A pass moves up to 2,000 jobs: with more, this kill lands in the middle
# of the purge; with fewer, right after it.
wait_for 60 some_purged || fail "nothing was purged after the restart"
restart_server 3s
echo "ok: killed the server (SIGKILL) once the purge had begun, and started it again"
all_purged() { [ "$(live_jobs)" = 0 ]; }
wait_for 120 all_purged || fail "$(live_jobs) jobs are still live after the purge"
sleep 1.5  # a scan after the last pass
RSS_END=$(rss_kib)
echo "ok: GET /v1/jobs is empty: every job moved to the accounting store"
if [ "$STORE" = etcd ]; then
  # There, the accounting store is etcd keys (jobs, arrays and their elements).
  keys=$(ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$EPORT" get --prefix --keys-only \
    /loom/data/accounting/jobs/ | grep -c .)
  [ "$keys" = $((N + ${#ARRAYS[@]})) ] || fail "$keys keys under /loom/data/accounting/jobs/, not $((N + ${#ARRAYS[@]}))"
  live_keys=$(ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$EPORT" get --prefix --keys-only \
    /loom/data/jobs/ | grep -c .)
  [ "$live_keys" = 0 ] || fail "$live_keys job records are still in etcd"
  echo "ok: etcd holds the $keys accounting rows under /accounting/jobs/ and no job record"
fi

read -r rows ids secs2 live states <<< "$(gpu_seconds_of_sacct)"
[ "$rows" = "$N" ] && [ "$ids" = "$N" ] || fail "after the purge sacct lists $rows rows ($ids ids), not $N"
[ "$states" = "succeeded=$N" ] || fail "sacct states after the purge: $states"
[ "$live" = 0 ] || fail "$live rows are still live"
USAGE2=$(usage_total)
COUNTER2=$(counter_now)
python3 - "$secs" "$secs2" "$USAGE2" "$COUNTER2" <<'EOF' || fail "after the purge: sacct $secs2 (was $secs), report $USAGE2, counter $COUNTER2"
import sys
a, b, c, d = map(float, sys.argv[1:])
tol = 1e-3 * max(1, a)
assert abs(a - b) < tol and abs(a - c) < tol and abs(a - d) < tol
EOF
echo "ok: after the purge and three kill -9, sacct, report usage and the counter still agree: $secs2 GPU-s"
python3 - "$W/counter.txt" <<'EOF' || fail "loom_gpu_seconds_total went down: $(cat "$W/counter.txt" | tr '\n' ' ' | tail -c 400)"
import sys
v = [float(x) for x in open(sys.argv[1])]
assert len(v) > 10, "too few scrapes: %d" % len(v)
bad = [(i, a, b) for i, (a, b) in enumerate(zip(v, v[1:])) if b < a - 1e-6]
assert not bad, bad[:5]
print("ok: %d scrapes of loom_gpu_seconds_total, never down (last %.3f)" % (len(v), v[-1]))
EOF

# The history still answers: one job, a purged array by its ID and one of
# its elements as A_I, a dependency on a purged one.
first=$((ARRAYS[0] + 1))
"$LOOM" sacct -j "$first" -o json | grep -q '"live": *false' ||
  fail "loom sacct -j $first: $("$LOOM" sacct -j "$first" -o json)"
n0=$(( N < 1000 ? N : 1000 ))
[ "$("$LOOM" sacct -j "${ARRAYS[0]}" -o json | grep -c '"ref"')" = "$n0" ] ||
  fail "loom sacct -j ${ARRAYS[0]} lists $("$LOOM" sacct -j "${ARRAYS[0]}" -o json | grep -c '"ref"') elements, not $n0"
"$LOOM" sacct -j "${ARRAYS[0]}_7" -o json | grep -q "\"ref\": *\"${ARRAYS[0]}_7\"" ||
  fail "loom sacct -j ${ARRAYS[0]}_7: $("$LOOM" sacct -j "${ARRAYS[0]}_7" -o json)"
"$LOOM" show "${ARRAYS[0]}" > "$W/show.out" 2>&1 && fail "loom show of a purged job succeeded"
grep -q "left the live state" "$W/show.out" || fail "loom show of a purged job: $(cat "$W/show.out")"
out=$("$LOOM" run -g 1 --dependency "afterok:${ARRAYS[0]}" -- true 2>&1) ||
  fail "a dependency on a purged job: $out"
dep=$(grep -o 'job [0-9]*' <<< "$out" | head -1 | grep -o '[0-9]*$')
wait_for 30 state_is "$dep" succeeded || fail "job $dep (afterok on a purged array) is $(jget "$dep" "j['state']")"
echo "ok: a job that depends on a purged array ran"

echo "memory (VmRSS): ${RSS_START} KiB at start, ${RSS_FULL} KiB with $N finished jobs, ${RSS_END} KiB after the purge"
if [ "$N" -ge 10000 ]; then
  [ "$RSS_END" -le $((RSS_START * 5 / 4 + 8192)) ] ||
    fail "the server holds ${RSS_END} KiB after the purge, against ${RSS_START} KiB at start"
  echo "ok: the server's memory is back near where it started"
fi
echo "PASS"
