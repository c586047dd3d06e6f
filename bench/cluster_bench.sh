#!/usr/bin/env bash
# Benchmarks of a real loom server with emulated agents, all on loopback.
# Usage: bench/cluster_bench.sh [latency|heartbeat|slurm|store|all] [LOOM_BINARY]
#   latency    submit-to-running latency of 1,000 one-GPU jobs on 4 emulated nodes
#   heartbeat  2,000 emulated nodes heartbeating every second: server CPU, RSS,
#              heartbeat latency
#   slurm      the Slurm comparison workload (2,400 jobs, 14,480 GPUs) on 2,000
#              emulated 8-GPU nodes, "online" (4 CLI clients) and "burst"
#              (held, then released at once)
#   store      SQLite versus a three-member etcd (two servers, one leads):
#              submissions per second and submit-to-running latency
# Environment: BENCH_SECONDS (heartbeat window, default 60), BENCH_OUT (a
# directory to keep the JSON results in; default: a temporary one).
# See bench/README.md for what each measures and how.
set -u
what="${1:-all}"
cd "$(dirname "$0")/.."
LOOM="$(realpath "${2:-build/src/loom/cli/loom}")"
PY=/usr/bin/python3
[ -x "$LOOM" ] || { echo "no loom binary at $LOOM (build it first)"; exit 2; }
W=$(mktemp -d)
# The fleet emulator's data dir (task logs, leases) goes to memory where the
# machine has /dev/shm: it stands in for 2,000 machines' own disks, and on
# one shared ext4 disk creating its thousands of log files cost it as much
# CPU as the launches themselves. The server's store stays on disk ($W).
FLEET_ROOT=$W
if [ -d /dev/shm ] && [ -w /dev/shm ]; then FLEET_ROOT=$(mktemp -d /dev/shm/loom-bench.XXXXXX); fi
OUT="${BENCH_OUT:-$W/results}"
mkdir -p "$OUT"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  pkill -9 -f -- "$W/" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$W" "$FLEET_ROOT"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; tail -5 "$W"/*.log 2>/dev/null; exit 1; }
# Below the kernel's ephemeral range (32768-60999): an outgoing connection
# never holds one of these ports when a server (re)starts on it. PORT to
# PORT + 140 are used.
PORT=$((20000 + RANDOM % 12000))
export LOOM_SERVER="http://127.0.0.1:$PORT"
AGENT_PORT=$((PORT + 1))
# Each server writes its first admin token here; the fleet joins with a join
# token (docs/security.md).
export LOOM_TOKEN_FILE="$W/admin.token"
AUTH=()

# start_cluster NAME NODES: a fresh server and one fleet emulator of NODES
# 8-GPU nodes running fake tasks; waits until every node is up.
start_cluster() {
  local name=$1 nodes=$2
  stop_cluster
  rm -rf "$W/server" "$FLEET_ROOT/fleet"
  if [ "$nodes" = 2000 ]; then
    cluster=large
  else
    cluster="$W/cluster.yaml"
    cat > "$cluster" <<YAML
name: bench
pools:
  - {name: h200, nodes: $nodes, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 16, leaves_per_spine: 8}
YAML
  fi
  # STORE_FLAGS: extra server flags (the etcd store in `store`).
  # shellcheck disable=SC2086
  rm -f "$W/admin.token" "$W/join.token"
  "$LOOM" server --listen "127.0.0.1:$PORT" --data-dir "$W/server" \
    --cluster "$cluster" --admin-token-file "$W/admin.token" ${STORE_FLAGS:-} \
    > "$W/server-$name.log" 2>&1 &
  SERVER=$!
  PIDS+=($SERVER)
  for _ in $(seq 100); do [ -s "$W/admin.token" ] && break; sleep 0.1; done
  AUTH=(-H "Authorization: Bearer $(cat "$W/admin.token")")
  for _ in $(seq 100); do curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/whoami" > /dev/null && break; sleep 0.1; done
  # One token for every emulated node (join tokens are single-use by default).
  "$LOOM" token create --join --reusable > "$W/join.token" 2> /dev/null || fail "join token"
  "$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.2:$AGENT_PORT" \
    --emulate-nodes "$nodes" --emulate 8xH200 --name-prefix h200 --fake-tasks \
    --heartbeat-interval 1s --data-dir "$FLEET_ROOT/fleet" --join-token-file "$W/join.token" \
    > "$W/fleet-$name.log" 2>&1 &
  FLEET=$!
  PIDS+=($FLEET)
  for _ in $(seq 600); do
    up=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/nodes" | grep -o '"state":"up"' | wc -l)
    [ "$up" = "$nodes" ] && return 0
    sleep 0.1
  done
  fail "only $up of $nodes nodes came up"
}
stop_cluster() {
  [ -n "${SERVER:-}" ] && kill -9 "$SERVER" "$FLEET" 2>/dev/null
  [ -n "${SERVER:-}" ] && wait "$SERVER" "$FLEET" 2>/dev/null
  SERVER=""
}

# jobs_json FILE: every job the server knows.
jobs_json() { curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs" > "$1" || fail "GET /v1/jobs"; }

# wait_running N: until N jobs have every task running (`running_time` set).
# Polls lightly (one pending job at a time, then the full list every 0.5 s)
# so as not to load the server it measures; the figures come from the
# server's timestamps, not from when the poll noticed.
wait_running() {
  for _ in $(seq 3000); do
    curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=pending,held&limit=1" | grep -q '"id"' || break
    sleep 0.2
  done
  for _ in $(seq 600); do
    n=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=running" | grep -o '"running_time":"' | wc -l)
    [ "$n" -ge "$1" ] && return 0
    sleep 0.5
  done
  fail "only $n of $1 jobs running after 300 s"
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

bench_latency() {
  echo "== submit-to-running latency: 1,000 one-GPU jobs, 4 emulated nodes (32 GPUs)"
  start_cluster latency 4
  # One client submits the jobs one after another with the CLI; each job
  # runs 0.2 s, so that the 32 GPUs are rarely all busy and the figure is
  # the path submit -> schedule -> launch -> agent confirms, not queueing.
  local t0=$(date +%s.%N)
  for i in $(seq 1000); do
    "$LOOM" run -g 1 -e LOOM_FAKE_SECONDS=0.2 --name "lat-$i" -- true > /dev/null ||
      fail "submit $i"
  done
  local t1=$(date +%s.%N)
  for _ in $(seq 600); do
    pending=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=pending,running" | grep -o '"id":' | wc -l)
    [ "$pending" = 0 ] && break
    sleep 0.1
  done
  jobs_json "$W/latency.json"
  "$PY" - "$W/latency.json" "$t0" "$t1" "$OUT/latency.json" <<'PYEOF'
import datetime, json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
run = sorted((ts(j["running_time"]) - ts(j["submit_time"])) * 1000 for j in jobs if j.get("running_time"))
sched = sorted((ts(j["start_time"]) - ts(j["submit_time"])) * 1000 for j in jobs if j.get("start_time"))
q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
res = {"jobs": len(jobs), "confirmed_running": len(run),
       "submit_rate_per_s": len(jobs) / (float(sys.argv[3]) - float(sys.argv[2])),
       "submit_to_running_ms": {"p50": q(run, .5), "p90": q(run, .9), "p99": q(run, .99), "max": run[-1]},
       "submit_to_placed_ms": {"p50": q(sched, .5), "p99": q(sched, .99), "max": sched[-1]}}
json.dump(res, open(sys.argv[4], "w"), indent=1)
r = res["submit_to_running_ms"]; s = res["submit_to_placed_ms"]
print(f"  {res['jobs']} jobs submitted by one CLI client at {res['submit_rate_per_s']:.0f}/s; "
      f"{res['confirmed_running']} confirmed running")
print(f"  submit -> running (agent confirmed): p50 {r['p50']:.1f} ms, p90 {r['p90']:.1f} ms, "
      f"p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms")
print(f"  submit -> placed (scheduler):        p50 {s['p50']:.1f} ms, p99 {s['p99']:.1f} ms")
PYEOF
  [ $? = 0 ] || fail "latency analysis"
}

bench_heartbeat() {
  local secs="${BENCH_SECONDS:-60}"
  echo "== 2,000 emulated nodes heartbeating every second, ${secs} s window"
  start_cluster heartbeat 2000
  sleep 5  # past the registration burst
  curl -sf "http://127.0.0.2:$AGENT_PORT/v1/stats?reset=1" > /dev/null || fail "agent stats"
  local hz=$(getconf CLK_TCK) c0=$(cpu_ticks "$SERVER") f0=$(cpu_ticks "$FLEET") t0=$(date +%s.%N)
  sleep "$secs"
  local c1=$(cpu_ticks "$SERVER") f1=$(cpu_ticks "$FLEET") t1=$(date +%s.%N)
  curl -sf "http://127.0.0.2:$AGENT_PORT/v1/stats" > "$W/stats.json" || fail "agent stats"
  grep -E "VmRSS|VmHWM" "/proc/$SERVER/status" > "$W/mem.txt"
  "$PY" - "$W/stats.json" "$W/mem.txt" "$hz" "$c0" "$c1" "$f0" "$f1" "$t0" "$t1" "$OUT/heartbeat.json" <<'PYEOF'
import json, sys
stats = json.load(open(sys.argv[1]))
mem = {l.split(":")[0]: int(l.split()[1]) / 1024 for l in open(sys.argv[2])}
hz = float(sys.argv[3]); wall = float(sys.argv[9]) - float(sys.argv[8])
server_cpu = (float(sys.argv[5]) - float(sys.argv[4])) / hz / wall * 100
fleet_cpu = (float(sys.argv[7]) - float(sys.argv[6])) / hz / wall * 100
hb = stats["heartbeats"]
res = {"window_s": wall, "server_cpu_percent_of_one_core": server_cpu,
       "fleet_emulator_cpu_percent": fleet_cpu, "server_rss_mib": mem["VmRSS"],
       "server_peak_rss_mib": mem["VmHWM"], "heartbeats": hb,
       "heartbeats_per_s": hb["answered"] / stats["window_s"]}
json.dump(res, open(sys.argv[10], "w"), indent=1)
l = hb["latency_ms"]
print(f"  server: {server_cpu:.1f}% of one core, RSS {mem['VmRSS']:.0f} MiB (peak {mem['VmHWM']:.0f} MiB)")
print(f"  heartbeats: {res['heartbeats_per_s']:.0f}/s answered, {hb['failed']} failed; "
      f"latency p50 {l['p50']:.2f} ms, p90 {l['p90']:.2f} ms, p99 {l['p99']:.2f} ms, max {l['max']:.1f} ms")
print(f"  (the fleet emulator itself used {fleet_cpu:.1f}% of one core on the same machine)")
PYEOF
  [ $? = 0 ] || fail "heartbeat analysis"
}

# The Slurm comparison workload: 2,400 jobs, deterministic order.
# 70% 1 GPU, 20% 8 GPUs (one node), 10% on 2, 4 or 8 whole nodes.
make_workload() {
  "$PY" - "$W/workload" <<'PYEOF'
import random, sys
sizes = [1] * 1680 + [8] * 480 + [16] * 80 + [32] * 80 + [64] * 80
random.Random(7).shuffle(sizes)
assert len(sizes) == 2400 and sum(sizes) == 14480
for c in range(4):
    with open(f"{sys.argv[1]}.{c}", "w") as f:
        for i, g in enumerate(sizes[c::4]):
            f.write(f"{g} s{c}-{i}\n")
PYEOF
}

# submit_all [--hold]: 4 parallel CLI clients, 600 `loom run` each.
submit_all() {
  local cpids=()
  for c in 0 1 2 3; do
    (while read -r g name; do
       "$LOOM" run -g "$g" "$@" -e LOOM_FAKE_SECONDS=3600 --name "$name" -- train > /dev/null ||
         echo "submit $name failed" >&2
     done < "$W/workload.$c") &
    cpids+=($!)
  done
  for p in "${cpids[@]}"; do wait "$p"; done
}

# make_spec_files: each client's 600 job specs as files (the users' job
# files exist before they submit: not timed).
make_spec_files() {
  for c in 0 1 2 3; do
    mkdir -p "$W/specs.$c"
    while read -r g name; do
      printf 'name: %s\nresources: {gpus: %s}\ncommand: [train]\nenv: {LOOM_FAKE_SECONDS: "3600"}\n' \
        "$name" "$g" > "$W/specs.$c/$name.yaml"
    done < "$W/workload.$c"
  done
}

# submit_files: 4 parallel CLI clients, one `loom submit -f` each with its
# 600 spec files (one process and connection per client).
submit_files() {
  local cpids=()
  for c in 0 1 2 3; do
    (cut -d' ' -f2 "$W/workload.$c" | sed "s|.*|$W/specs.$c/&.yaml|" | xargs "$LOOM" submit -f > /dev/null ||
       echo "client $c: some submissions failed" >&2) &
    cpids+=($!)
  done
  for p in "${cpids[@]}"; do wait "$p"; done
}

bench_slurm() {
  echo "== Slurm comparison: 2,400 jobs (14,480 GPUs) on 2,000 emulated 8-GPU nodes"
  make_workload
  start_cluster online 2000
  local t0=$(date +%s.%N)
  submit_all
  local t_submitted=$(date +%s.%N)
  wait_running 2400
  local t_online=$(date +%s.%N)
  jobs_json "$W/online.json"

  make_spec_files
  start_cluster stream 2000
  local sc0=$(cpu_ticks "$SERVER") fc0=$(cpu_ticks "$FLEET")
  # BENCH_PERF=1: profiles of the server and the emulator (perf record
  # ${BENCH_PERF_ARGS}) over this part, under $OUT; BENCH_PERF=all: one
  # profile of the whole machine.
  case "${BENCH_PERF:-}" in
    "") ;;
    all) perf record -q ${BENCH_PERF_ARGS:-} -a -o "$OUT/perf-all.data" & ;;
    *) perf record -q ${BENCH_PERF_ARGS:-} -o "$OUT/perf-server.data" -p "$SERVER" &
       perf record -q ${BENCH_PERF_ARGS:-} -o "$OUT/perf-fleet.data" -p "$FLEET" & ;;
  esac
  local s0=$(date +%s.%N)
  submit_files
  local s_sub=$(date +%s.%N)
  wait_running 2400
  [ -n "${BENCH_PERF:-}" ] && { pkill -INT -f "perf record -q.* -o $OUT/perf-"; sleep 1; }
  echo "  (stream: server $(( $(cpu_ticks "$SERVER") - sc0 )), fleet emulator $(( $(cpu_ticks "$FLEET") - fc0 )) CPU ticks of 10 ms)"
  jobs_json "$W/stream.json"

  start_cluster burst 2000
  local h0=$(date +%s.%N)
  submit_all --hold
  local h1=$(date +%s.%N)
  local r0=$(date +%s.%N)
  "$LOOM" release --all > /dev/null || fail "release --all"
  wait_running 2400
  local r1=$(date +%s.%N)
  jobs_json "$W/burst.json"
  "$PY" - "$W/online.json" "$W/burst.json" "$t0" "$t_submitted" "$t_online" "$h0" "$h1" "$r0" "$r1" "$OUT/slurm.json" "$W/stream.json" "$s0" "$s_sub" <<'PYEOF'
import datetime, json, sys
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
a = [float(x) for x in sys.argv[3:10]]
t0, t_sub, t_on, h0, h1, r0, r1 = a
res = {}
s0, s_sub = float(sys.argv[12]), float(sys.argv[13])
for name, path, start in (("online", sys.argv[1], t0), ("burst", sys.argv[2], r0),
                          ("online_one_process_per_client", sys.argv[11], s0)):
    jobs = json.load(open(path))["jobs"]
    assert len(jobs) == 2400, len(jobs)
    last = max(ts(j["running_time"]) for j in jobs)
    gpus = sum(j["gpus"] for j in jobs)
    res[name] = {"jobs": len(jobs), "gpus": gpus, "seconds_to_all_running": last - start}
res["online"]["seconds_submitting"] = t_sub - t0
res["burst"]["seconds_submitting_held"] = h1 - h0
res["online_one_process_per_client"]["seconds_submitting"] = s_sub - s0
res["online_one_process_per_client"]["slurm_seconds"] = 68
res["online"]["slurm_seconds"] = 68
res["burst"]["slurm_seconds"] = 140
for k in ("online", "burst", "online_one_process_per_client"):
    res[k]["speedup_vs_slurm"] = res[k]["slurm_seconds"] / res[k]["seconds_to_all_running"]
json.dump(res, open(sys.argv[10], "w"), indent=1)
o, b = res["online"], res["burst"]
print(f"  online (4 CLI clients, {o['gpus']} GPUs): all running {o['seconds_to_all_running']:.2f} s after the "
      f"first submit (submitting took {o['seconds_submitting']:.2f} s); Slurm 68 s: {o['speedup_vs_slurm']:.1f}x")
s = res["online_one_process_per_client"]
print(f"  online, each client one `loom submit -f` of its 600 files: all running {s['seconds_to_all_running']:.2f} s "
      f"after the first submit (submitting took {s['seconds_submitting']:.2f} s); Slurm 68 s: {s['speedup_vs_slurm']:.1f}x")
print(f"  burst (held, then `loom release --all`): all running {b['seconds_to_all_running']:.2f} s after the "
      f"release (submitting held took {b['seconds_submitting_held']:.2f} s); Slurm 140 s: {b['speedup_vs_slurm']:.1f}x")
PYEOF
  [ $? = 0 ] || fail "slurm analysis"
}

# start_etcd3: three etcd members on loopback (fast election timings, as in
# tests/e2e_ha_test.sh); sets ETCD_ENDPOINTS.
start_etcd3() {
  local base=$((PORT + 100)) initial="" i
  ETCD_ENDPOINTS=""
  for i in 1 2 3; do
    initial="$initial${initial:+,}m$i=http://127.0.0.1:$((base + 10 * i + 1))"
    ETCD_ENDPOINTS="$ETCD_ENDPOINTS${ETCD_ENDPOINTS:+,}http://127.0.0.1:$((base + 10 * i))"
  done
  for i in 1 2 3; do
    rm -rf "$W/etcd$i"
    etcd --name "m$i" --data-dir "$W/etcd$i" --heartbeat-interval=50 --election-timeout=500 \
      --max-txn-ops=100000 --max-request-bytes=33554432 \
      --listen-client-urls "http://127.0.0.1:$((base + 10 * i))" \
      --advertise-client-urls "http://127.0.0.1:$((base + 10 * i))" \
      --listen-peer-urls "http://127.0.0.1:$((base + 10 * i + 1))" \
      --initial-advertise-peer-urls "http://127.0.0.1:$((base + 10 * i + 1))" \
      --initial-cluster "$initial" --initial-cluster-token "loom-bench-$$" \
      --initial-cluster-state new --logger zap --log-level warn > "$W/etcd$i.log" 2>&1 &
    PIDS+=($!)
  done
  for i in 1 2 3; do
    for _ in $(seq 200); do
      curl -sf "http://127.0.0.1:$((base + 10 * i))/health" | grep -q true && break
      sleep 0.05
    done
  done
}

bench_store() {
  command -v etcd > /dev/null || fail "etcd not installed (scripts/setup.sh --test)"
  local total=1000 clients=4 lat=300
  for i in $(seq "$total"); do
    printf 'name: s-%d\ncommand: ["true"]\nresources: {gpus: 1}\nhold: true\nenv: {LOOM_FAKE_SECONDS: "0.05"}\n' "$i" > "$W/s-$i.yaml"
  done
  for store in sqlite etcd; do
    if [ "$store" = etcd ]; then
      start_etcd3
      STORE_FLAGS="--store etcd --etcd-endpoints $ETCD_ENDPOINTS"
      echo "== etcd store (three members on loopback; a second, standby server): $total held submissions by $clients clients, then $lat jobs submit-to-running"
    else
      STORE_FLAGS=""
      echo "== SQLite store (synchronous=FULL): $total held submissions by $clients clients, then $lat jobs submit-to-running"
    fi
    start_cluster "store-$store" 4
    if [ "$store" = etcd ]; then
      "$LOOM" server --listen "127.0.0.1:$((PORT + 60))" --data-dir "$W/server-standby" \
        --admin-token-file "$W/standby-admin.token" \
        --cluster "$W/cluster.yaml" $STORE_FLAGS > "$W/server-standby.log" 2>&1 &
      PIDS+=($!)
    fi
    # Throughput: each client sends its files over one connection, one
    # after another; held jobs, so only the API and the store are measured.
    local t0 t1 c
    t0=$(date +%s.%N)
    local cpids=()
    for c in $(seq "$clients"); do
      files=()
      for i in $(seq "$c" "$clients" "$total"); do files+=("$W/s-$i.yaml"); done
      "$LOOM" submit -f "${files[@]}" > "$W/submit-$c.out" 2>&1 &
      cpids+=($!)
    done
    for p in "${cpids[@]}"; do wait "$p" || fail "submit client"; done
    t1=$(date +%s.%N)
    "$LOOM" release --all > /dev/null || fail "release"
    wait_running 0
    for _ in $(seq 600); do
      left=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=pending,running,held&limit=1" | grep -c '"id"')
      [ "$left" = 0 ] && break
      sleep 0.2
    done
    # Latency: one client, one job at a time, as `latency` does.
    local l0 l1
    l0=$(date +%s.%N)
    for i in $(seq "$lat"); do
      "$LOOM" run -g 1 -e LOOM_FAKE_SECONDS=0.2 --name "lat-$i" -- true > /dev/null || fail "submit lat-$i"
    done
    l1=$(date +%s.%N)
    for _ in $(seq 600); do
      left=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=pending,running&limit=1" | grep -c '"id"')
      [ "$left" = 0 ] && break
      sleep 0.1
    done
    jobs_json "$W/store-$store.json"
    "$PY" - "$W/store-$store.json" "$t0" "$t1" "$l0" "$l1" "$total" "$OUT/store-$store.json" "$store" <<'PYEOF'
import datetime, json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
t0, t1, l0, l1, n = map(float, sys.argv[2:7])
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
lat = [j for j in jobs if j["name"].startswith("lat-")]
run = sorted((ts(j["running_time"]) - ts(j["submit_time"])) * 1000 for j in lat if j.get("running_time"))
q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
held = [j for j in jobs if j["name"].startswith("s-")]
res = {"store": sys.argv[8], "submissions": len(held), "submit_seconds": t1 - t0,
       "submissions_per_s": len(held) / (t1 - t0),
       "latency_jobs": len(lat), "latency_submit_rate_per_s": len(lat) / (l1 - l0),
       "submit_to_running_ms": {"p50": q(run, .5), "p90": q(run, .9), "p99": q(run, .99), "max": run[-1]},
       "succeeded": sum(j["state"] == "succeeded" for j in jobs)}
json.dump(res, open(sys.argv[7], "w"), indent=1)
r = res["submit_to_running_ms"]
print(f"  {res['submissions']} submissions in {res['submit_seconds']:.2f} s: {res['submissions_per_s']:.0f}/s "
      f"(4 clients, one connection each)")
print(f"  submit -> running over {len(run)} jobs (one CLI client at {res['latency_submit_rate_per_s']:.0f}/s): "
      f"p50 {r['p50']:.1f} ms, p90 {r['p90']:.1f} ms, p99 {r['p99']:.1f} ms, max {r['max']:.1f} ms; "
      f"{res['succeeded']} of {len(jobs)} jobs succeeded")
if res["succeeded"] != len(jobs) or len(held) != int(n):
    print(f"  expected {int(n)} held submissions and every job succeeded; got {len(held)}, {res['succeeded']} of {len(jobs)}")
    sys.exit(1)
PYEOF
    [ $? = 0 ] || fail "store analysis ($store)"
  done
  STORE_FLAGS=""
}

case "$what" in
  latency) bench_latency ;;
  heartbeat) bench_heartbeat ;;
  slurm) bench_slurm ;;
  store) bench_store ;;
  all) bench_latency; bench_heartbeat; bench_slurm; bench_store ;;
  *) echo "usage: $0 [latency|heartbeat|slurm|store|all] [LOOM_BINARY]"; exit 2 ;;
esac
echo "results: $OUT"
