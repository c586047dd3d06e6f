#!/usr/bin/env bash
# No false alarms under load (issue 20): 2,000 emulated nodes heartbeating
# to a real loom server while stress-ng saturates every CPU of the machine
# for LIVENESS_SECONDS (default 600). The bench fails (exit 1) if any node
# was declared down, or any emulated agent fenced its tasks, during the run;
# it reports how many nodes went suspect (silent past --suspect-after: no
# new work, not down), the heartbeat round trip, and the CPU of the server,
# the emulator and stress-ng.
# Usage: bench/liveness.sh [LOOM_BINARY]
# Environment (defaults in brackets):
#   LIVENESS_SECONDS   stress window in seconds [600]
#   LIVENESS_INTERVAL  heartbeat interval, agents' --heartbeat-interval (and
#                      the server's, where it has the flag) [500ms]
#   LIVENESS_SUSPECT   server --suspect-after, seconds [1.5]
#   LIVENESS_TIMEOUT   server --heartbeat-timeout, seconds [5]
#   LIVENESS_FENCE     server --fence-after, seconds [unset: the server's
#                      default, 80% of the timeout]
#   LIVENESS_NODES     emulated 8xH200 nodes [2000: the `large` preset]
#   LIVENESS_JOBS      one-GPU fake jobs running through the window [500]
#   LIVENESS_CPUS      stress-ng --cpu workers [nproc]
#   LIVENESS_SAMPLE    seconds between samples of /metrics [0.5]
#   BENCH_OUT          directory for liveness.json, the samples and the logs
#                      [a new /tmp/loom-liveness.XXXXXX, kept]
# Exit: 0 no false alarm; 1 a node declared down, an agent fenced, or the
# CPUs not saturated; 2 a missing prerequisite. The whole command is bounded
# by `timeout` at LIVENESS_SECONDS + 180 s. Needs stress-ng
# (scripts/setup.sh --bench), /usr/bin/python3 and curl. See bench/README.md.
set -u
SECS="${LIVENESS_SECONDS:-600}"
case "$SECS" in ''|*[!0-9]*) echo "LIVENESS_SECONDS: a whole number of seconds, not '$SECS'"; exit 2 ;; esac
SELF="$(realpath "$0")"
if [ -z "${LIVENESS_BOUNDED:-}" ]; then
  # Everything below runs under one `timeout`, which signals its whole
  # process group (the server, the emulator, stress-ng, the sampler) when
  # the bound is reached, and SIGKILLs it 15 s later.
  LIVENESS_BOUNDED=1 exec timeout --kill-after=15 $((SECS + 180)) "$SELF" "$@"
fi
cd "$(dirname "$SELF")/.." || exit 2
LOOM="$(realpath "${1:-build/src/loom/cli/loom}")"
PY=/usr/bin/python3
[ -x "$LOOM" ] || { echo "no loom binary at $LOOM (build it first)"; exit 2; }
STRESS="$(command -v stress-ng || true)"
[ -n "$STRESS" ] || { echo "stress-ng is not installed: run scripts/setup.sh --bench (Debian's stress-ng)"; exit 2; }
[ -x "$PY" ] || { echo "no $PY"; exit 2; }
command -v curl > /dev/null || { echo "no curl (scripts/setup.sh)"; exit 2; }

INTERVAL="${LIVENESS_INTERVAL:-500ms}"
SUSPECT="${LIVENESS_SUSPECT:-1.5}"
TIMEOUT="${LIVENESS_TIMEOUT:-5}"
FENCE="${LIVENESS_FENCE:-}"
NODES="${LIVENESS_NODES:-2000}"
JOBS="${LIVENESS_JOBS:-500}"
CPUS="${LIVENESS_CPUS:-$(nproc)}"
SAMPLE="${LIVENESS_SAMPLE:-0.5}"
INTERVAL_S=$("$PY" -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)(ms|s)?", sys.argv[1])
if not m: sys.exit("LIVENESS_INTERVAL: like 500ms or 1s")
print(float(m.group(1)) / (1000 if m.group(2) == "ms" else 1))' "$INTERVAL") || exit 2

W=$(mktemp -d)
# The emulator's data dir (leases, written on every heartbeat) in memory, as
# in cluster_bench.sh: it stands in for 2,000 machines' own disks.
FLEET_ROOT=$W
if [ -d /dev/shm ] && [ -w /dev/shm ]; then FLEET_ROOT=$(mktemp -d /dev/shm/loom-liveness.XXXXXX); fi
OUT="${BENCH_OUT:-$(mktemp -d /tmp/loom-liveness.XXXXXX)}"
mkdir -p "$OUT"
PIDS=()
STRESS_PID=""
cleanup() {
  trap - EXIT TERM INT
  if [ -n "$STRESS_PID" ]; then
    # Its workers too, by their ids (they are stress-ng's children).
    local kids
    kids=$(cat "/proc/$STRESS_PID/task/$STRESS_PID/children" 2>/dev/null)
    kill -TERM "$STRESS_PID" 2>/dev/null
    sleep 0.3
    for p in $kids $STRESS_PID; do kill -9 "$p" 2>/dev/null; done
  fi
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for f in server.log fleet.log stress.log; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/" 2>/dev/null; done
  rm -rf "$W" "$FLEET_ROOT"
}
trap cleanup EXIT
trap 'echo "liveness: stopped by a signal (the bound of $((SECS + 180)) s?)"; exit 124' TERM INT
fail() { echo "FAIL: $*"; tail -5 "$W"/*.log 2>/dev/null; exit 1; }
PORT=$((20000 + RANDOM % 12000))
export LOOM_SERVER="http://127.0.0.1:$PORT"
AGENT_PORT=$((PORT + 1))
AGENT_URL="http://127.0.0.2:$AGENT_PORT"
export LOOM_TOKEN_FILE="$W/admin.token"

if [ "$NODES" = 2000 ]; then
  cluster=large
else
  cluster="$W/cluster.yaml"
  cat > "$cluster" <<YAML
name: liveness
pools:
  - {name: h200, nodes: $NODES, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 16, leaves_per_spine: 8}
YAML
fi

SERVER_FLAGS=(--heartbeat-timeout "$TIMEOUT" --suspect-after "$SUSPECT")
[ -n "$FENCE" ] && SERVER_FLAGS+=(--fence-after "$FENCE")
# The server's own --heartbeat-interval (what it tells agents at
# registration), where this binary has it: seconds if it takes a FLOAT,
# else the text as the agent takes it.
server_interval="not a flag of this server"
hb_help=$("$LOOM" server --help 2>&1 | grep -e '--heartbeat-interval ')
if [ -n "$hb_help" ]; then
  if grep -q FLOAT <<< "$hb_help"; then server_interval=$INTERVAL_S; else server_interval=$INTERVAL; fi
  SERVER_FLAGS+=(--heartbeat-interval "$server_interval")
fi
MODEL=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "== liveness under load: $NODES emulated nodes, stress-ng --cpu $CPUS for $SECS s"
echo "  machine: $(nproc) CPUs ($MODEL), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
echo "  settings: heartbeat interval $INTERVAL (agents --heartbeat-interval; server --heartbeat-interval: $server_interval),"
echo "            --suspect-after $SUSPECT s, --heartbeat-timeout $TIMEOUT s, --fence-after ${FENCE:-default (80% of the timeout)}"
echo "  load: $JOBS one-GPU fake jobs running through the window; samples every $SAMPLE s"
echo "  binary: $LOOM"

t_start=$(date +%s)
"$LOOM" server --listen "127.0.0.1:$PORT" --data-dir "$W/server" --cluster "$cluster" \
  --admin-token-file "$W/admin.token" "${SERVER_FLAGS[@]}" > "$W/server.log" 2>&1 &
SERVER=$!
PIDS+=("$SERVER")
for _ in $(seq 100); do [ -s "$W/admin.token" ] && break; sleep 0.1; done
[ -s "$W/admin.token" ] || fail "the server did not start"
AUTH=(-H "Authorization: Bearer $(cat "$W/admin.token")")
for _ in $(seq 100); do curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/whoami" > /dev/null && break; sleep 0.1; done
"$LOOM" token create --join --reusable > "$W/join.token" 2> /dev/null || fail "join token"
"$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.2:$AGENT_PORT" \
  --emulate-nodes "$NODES" --emulate 8xH200 --name-prefix h200 --fake-tasks \
  --heartbeat-interval "$INTERVAL" --data-dir "$FLEET_ROOT/fleet" --join-token-file "$W/join.token" \
  > "$W/fleet.log" 2>&1 &
FLEET=$!
PIDS+=("$FLEET")
up=0
for _ in $(seq 1200); do
  up=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/nodes" | grep -o '"state":"up"' | wc -l)
  [ "$up" = "$NODES" ] && break
  sleep 0.1
done
[ "$up" = "$NODES" ] || fail "only $up of $NODES nodes came up"
echo "  $NODES nodes up $(($(date +%s) - t_start)) s after the server's start"

# Fake tasks that outlast the window, so that heartbeats carry task statuses.
if [ "$JOBS" -gt 0 ]; then
  mkdir -p "$W/specs"
  for i in $(seq "$JOBS"); do
    printf 'name: live-%d\nresources: {gpus: 1}\ncommand: [serve]\nenv: {LOOM_FAKE_SECONDS: "%d"}\n' \
      "$i" $((SECS + 900)) > "$W/specs/live-$i.yaml"
  done
  find "$W/specs" -name "*.yaml" -print0 | xargs -0 "$LOOM" submit -f > /dev/null || fail "submitting the $JOBS jobs"
  n=0
  for _ in $(seq 600); do
    n=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs?state=running" | grep -o '"running_time":"' | wc -l)
    [ "$n" -ge "$JOBS" ] && break
    sleep 0.2
  done
  [ "$n" -ge "$JOBS" ] || fail "only $n of $JOBS jobs running"
  echo "  $JOBS jobs running"
fi
sleep 5  # past the registration and launch bursts

"$STRESS" --cpu "$CPUS" --timeout "${SECS}s" --metrics-brief > "$W/stress.log" 2>&1 &
STRESS_PID=$!
echo "  stress-ng started (pid $STRESS_PID); sampling for $SECS s"
# The sampler: /metrics every SAMPLE s (node states, the node_down counter);
# the non-up nodes' names when there are any; every 5 s the emulator's
# heartbeat round trips (GET /v1/stats?reset=1) and the CPU ticks of the
# server, the emulator, stress-ng's workers and the whole machine.
"$PY" - "$LOOM_SERVER" "$W/admin.token" "$AGENT_URL" "$SERVER" "$FLEET" "$STRESS_PID" \
  "$SECS" "$SAMPLE" "$OUT/samples.jsonl" <<'PYEOF' &
import json, os, sys, time, urllib.request
server, token_file, agent, spid, fpid, stress_pid, secs, every, out = sys.argv[1:]
secs, every = float(secs), float(every)
token = open(token_file).read().strip()
def get(url, auth=True, timeout=5):
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()
def ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except OSError:
        return None
def stress_ticks():
    try:
        kids = open(f"/proc/{stress_pid}/task/{stress_pid}/children").read().split()
    except OSError:
        return None, 0
    t = [ticks(k) for k in kids]
    t = [x for x in t if x is not None]
    return sum(t), len(t)
def machine():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f[:8]), f[3] + f[4]  # total, idle + iowait
def metrics():
    states, down_total = {}, None
    for line in get(server + "/metrics").decode().splitlines():
        if line.startswith("loom_nodes{"):
            st = line.split('state="', 1)[1].split('"', 1)[0]
            states[st] = int(float(line.rsplit(" ", 1)[1]))
        elif line.startswith('loom_failures_detected_total{kind="node_down"}'):
            down_total = int(float(line.rsplit(" ", 1)[1]))
    return states, down_total
o = open(out, "w")
t0 = time.time()
next_slow = t0
while True:
    now = time.time()
    if now - t0 >= secs:
        break
    rec = {"t": round(now - t0, 3)}
    if now == t0 or not o.tell():
        rec["t0_unix"] = t0
    try:
        a = time.time()
        states, down_total = metrics()
        rec["scrape_ms"] = round((time.time() - a) * 1000, 2)
        rec["states"] = states
        rec["node_down_total"] = down_total
        not_up = sum(n for s, n in states.items() if s != "up")
        if not_up:
            nodes = json.loads(get(server + "/v1/nodes"))
            nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
            rec["not_up"] = {n["name"]: [n["state"], n.get("reason", "")]
                             for n in nodes if n["state"] != "up"}
    except Exception as e:  # a scrape that failed or timed out is a figure too
        rec["error"] = f"metrics: {e}"
    if now >= next_slow:
        next_slow += 5
        try:
            rec["hb"] = json.loads(get(agent + "/v1/stats?reset=1", auth=False))
        except Exception as e:
            rec["hb_error"] = str(e)
        st, workers = stress_ticks()
        rec["cpu"] = {"t": time.time() - t0, "server": ticks(spid), "fleet": ticks(fpid), "stress": st,
                      "stress_workers": workers, "machine": machine(),
                      "loadavg": float(open("/proc/loadavg").read().split()[0])}
    o.write(json.dumps(rec) + "\n")
    o.flush()
    time.sleep(max(0.0, every - (time.time() - now)))
# One last slow record, closing the last round-trip window.
rec = {"t": round(time.time() - t0, 3), "final": True}
try:
    rec["hb"] = json.loads(get(agent + "/v1/stats?reset=1", auth=False))
except Exception as e:
    rec["hb_error"] = str(e)
st, workers = stress_ticks()
rec["cpu"] = {"t": time.time() - t0, "server": ticks(spid), "fleet": ticks(fpid), "stress": st,
              "stress_workers": workers, "machine": machine(),
              "loadavg": float(open("/proc/loadavg").read().split()[0])}
try:
    rec["states"], rec["node_down_total"] = metrics()
except Exception as e:
    rec["error"] = f"metrics: {e}"
o.write(json.dumps(rec) + "\n")
PYEOF
SAMPLER=$!
PIDS+=("$SAMPLER")
wait "$SAMPLER" || fail "the sampler failed"
# stress-ng ends at its own --timeout, about now.
for _ in $(seq 50); do kill -0 "$STRESS_PID" 2>/dev/null || break; sleep 0.2; done
curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/nodes" > "$W/nodes.json" || fail "GET /v1/nodes"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs" > "$W/jobs.json" || fail "GET /v1/jobs"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" > "$OUT/metrics-end.txt" || fail "GET /metrics"
grep -E "VmRSS|VmHWM" "/proc/$SERVER/status" > "$W/mem.txt"
cp "$W/server.log" "$W/fleet.log" "$W/stress.log" "$OUT/" 2>/dev/null

LV_INTERVAL=$INTERVAL LV_INTERVAL_S=$INTERVAL_S LV_SERVER_INTERVAL=$server_interval \
LV_SUSPECT=$SUSPECT LV_TIMEOUT=$TIMEOUT LV_FENCE=$FENCE LV_NODES=$NODES LV_JOBS=$JOBS \
LV_CPUS=$CPUS LV_SECS=$SECS LV_SAMPLE=$SAMPLE LV_NPROC=$(nproc) LV_MODEL=$MODEL \
"$PY" - "$OUT/samples.jsonl" "$W/nodes.json" "$W/jobs.json" "$W/mem.txt" "$W/fleet.log" \
  "$W/server.log" "$W/stress.log" "$(getconf CLK_TCK)" "$OUT/liveness.json" <<'PYEOF'
import json, os, re, sys
samples_f, nodes_f, jobs_f, mem_f, fleet_f, server_f, stress_f, hz, out = sys.argv[1:]
hz = float(hz)
E = os.environ
settings = {"heartbeat_interval": E["LV_INTERVAL"], "heartbeat_interval_s": float(E["LV_INTERVAL_S"]),
            "server_heartbeat_interval": E["LV_SERVER_INTERVAL"],
            "suspect_after_s": float(E["LV_SUSPECT"]), "heartbeat_timeout_s": float(E["LV_TIMEOUT"]),
            "fence_after_s": float(E["LV_FENCE"]) if E["LV_FENCE"] else 0.8 * float(E["LV_TIMEOUT"]),
            "fence_after_given": bool(E["LV_FENCE"]),
            "nodes": int(E["LV_NODES"]), "jobs": int(E["LV_JOBS"]), "stress_cpus": int(E["LV_CPUS"]),
            "seconds": int(E["LV_SECS"]), "sample_s": float(E["LV_SAMPLE"])}
machine = {"nproc": int(E["LV_NPROC"]), "cpu_model": E["LV_MODEL"]}
samples = [json.loads(l) for l in open(samples_f) if l.strip()]
metric = [s for s in samples if "states" in s]
errors = [s for s in samples if "error" in s]
# Nodes declared down: the server's counter (every down declaration, however
# short), then the names from the samples, the agents' log and the jobs.
down_totals = [s["node_down_total"] for s in metric if s.get("node_down_total") is not None]
down_declared = (down_totals[-1] - 0) if down_totals else None
down_in_window = (down_totals[-1] - down_totals[0]) if down_totals else None
max_down = max((s["states"].get("down", 0) for s in metric), default=0)
max_suspect = max((s["states"].get("suspect", 0) for s in metric), default=0)
max_not_up = max((sum(n for k, n in s["states"].items() if k != "up") for s in metric), default=0)
down_names, suspect_eps, suspect_nodes, prev = {}, 0, set(), set()
for s in samples:
    cur = set()
    for name, (state, reason) in s.get("not_up", {}).items():
        if state == "down":
            down_names.setdefault(name, {"first_seen_s": s["t"], "reason": reason})
        elif state == "suspect":
            cur.add(name)
    suspect_eps += len(cur - prev)
    suspect_nodes |= cur
    prev = cur
fleet = open(fleet_f, errors="replace").read().splitlines()
def lines_with(word):
    return [l for l in fleet if word in l]
fenced = [l for l in fleet if 'msg="fenced:' in l]
register_again = lines_with("asks this node to register again")
hb_failed = lines_with("heartbeat failed")
for l in register_again + fenced:
    m = re.search(r" node=(\S+)", l)
    if m:
        down_names.setdefault(m.group(1), {"agent_log": l})
jobs = json.load(open(jobs_f))["jobs"]
node_losses = sum(j.get("node_losses", 0) for j in jobs)
running_end = sum(j["state"] == "running" for j in jobs)
nodes = json.load(open(nodes_f))
nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
up_end = sum(n["state"] == "up" for n in nodes)
# Heartbeat round trips: the 5 s windows combined (each window's p50/p90/
# p99/max as a piecewise-linear CDF, weighted by its heartbeats); max exact.
wins = [s["hb"]["heartbeats"] for s in samples if "hb" in s]
wins = wins[1:] if len(wins) > 1 else wins  # the first read only opens the window
answered = sum(w["answered"] for w in wins)
failed = sum(w["failed"] for w in wins)
def cdf(w, v):
    l = w["latency_ms"]
    knots = [(0.0, 0.0), (l["p50"], .5), (l["p90"], .9), (l["p99"], .99), (l["max"], 1.0)]
    if v >= knots[-1][0]:
        return 1.0
    for (x0, q0), (x1, q1) in zip(knots, knots[1:]):
        if v < x1:
            return q0 + (q1 - q0) * (v - x0) / (x1 - x0) if x1 > x0 else q1
    return 1.0
def pct(q):
    live = [w for w in wins if w["answered"]]
    if not live:
        return 0.0
    lo, hi = 0.0, max(w["latency_ms"]["max"] for w in live)
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(w["answered"] * cdf(w, mid) for w in live) / answered < q:
            lo = mid
        else:
            hi = mid
    return hi
hb = {"answered": answered, "failed": failed,
      "per_s": answered / max(1e-9, (samples[-1]["t"] - samples[0]["t"])),
      "latency_ms": {"p50": pct(.5), "p90": pct(.9), "p99": pct(.99),
                     "max": max((w["latency_ms"]["max"] for w in wins), default=0.0)},
      "worst_window_p99_ms": max((w["latency_ms"]["p99"] for w in wins), default=0.0),
      "windows": len(wins)}
# CPU: first and last slow records; per 5 s window for the worst.
cpu = [s["cpu"] for s in samples if "cpu" in s]
t_cpu = [s["cpu"]["t"] for s in samples if "cpu" in s]
def share(key, a, b, ta, tb):
    if a.get(key) is None or b.get(key) is None or tb <= ta:
        return None
    return (b[key] - a[key]) / hz / (tb - ta) * 100
wall = t_cpu[-1] - t_cpu[0]
srv = share("server", cpu[0], cpu[-1], t_cpu[0], t_cpu[-1])
flt = share("fleet", cpu[0], cpu[-1], t_cpu[0], t_cpu[-1])
srv_w = [share("server", a, b, ta, tb) for a, b, ta, tb in zip(cpu, cpu[1:], t_cpu, t_cpu[1:])]
srv_w = [x for x in srv_w if x is not None]
# stress-ng: its workers' ticks from the second record (the first may come
# before they started) to the last one they were alive at.
st = [(t, c) for t, c in zip(t_cpu, cpu) if c.get("stress") is not None and c["stress_workers"]]
stress_pct = None
if len(st) >= 3:
    (ta, a), (tb, b) = st[1], st[-1]
    stress_pct = (b["stress"] - a["stress"]) / hz / (tb - ta) / settings["stress_cpus"] * 100
(tot0, idle0), (tot1, idle1) = cpu[0]["machine"], cpu[-1]["machine"]
busy = 100 * (1 - (idle1 - idle0) / max(1, tot1 - tot0))
loads = [c["loadavg"] for c in cpu]
mem = {l.split(":")[0]: int(l.split()[1]) / 1024 for l in open(mem_f)}
scrape = sorted(s["scrape_ms"] for s in metric if "scrape_ms" in s)
import datetime
t0_unix = samples[0].get("t0_unix", 0)
utc = lambda t: datetime.datetime.fromtimestamp(t0_unix + t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-4] + "Z"
for d in down_names.values():
    if "first_seen_s" in d:
        d["first_seen_utc"] = utc(d["first_seen_s"])
res = {"settings": settings, "machine": machine, "window_start_utc": utc(0), "window_s": samples[-1]["t"],
       "nodes_declared_down": down_declared, "nodes_declared_down_in_window": down_in_window,
       "down_nodes": down_names, "max_nodes_down_at_once": max_down,
       "max_nodes_suspect_at_once": max_suspect, "max_nodes_not_up_at_once": max_not_up,
       "suspect_episodes_seen": suspect_eps, "suspect_nodes_seen": sorted(suspect_nodes),
       "agents_fenced": len(fenced), "agent_register_again_lines": len(register_again),
       "agent_heartbeat_failed_lines": len(hb_failed),
       "nodes_up_at_end": up_end, "jobs_running_at_end": running_end,
       "job_node_losses": node_losses,
       "samples": len(metric), "samples_failed": len(errors),
       "metrics_scrape_ms": {"p50": scrape[len(scrape) // 2] if scrape else None,
                             "max": scrape[-1] if scrape else None},
       "heartbeats": hb,
       "server_cpu_percent_of_one_core": srv,
       "server_cpu_worst_5s_window_percent": max(srv_w, default=None),
       "fleet_emulator_cpu_percent_of_one_core": flt,
       "stress_ng_cpu_percent_of_its_cpus": stress_pct,
       "machine_busy_percent": busy, "loadavg_1min": {"mean": sum(loads) / len(loads), "max": max(loads)},
       "server_rss_mib": mem.get("VmRSS"), "server_peak_rss_mib": mem.get("VmHWM"),
       "stress_ng_log": open(stress_f, errors="replace").read().strip().splitlines()[-3:]}
ok_down = down_declared == 0 and max_down == 0 and not down_names
ok_fence = not fenced
saturated = busy >= 90 and (stress_pct is None or stress_pct >= 50)
res["saturated"] = saturated
res["pass"] = ok_down and ok_fence and saturated
json.dump(res, open(out, "w"), indent=1)
l = hb["latency_ms"]
print(f"  window {res['window_s']:.0f} s, {len(metric)} samples of /metrics ({len(errors)} failed; "
      f"scrape p50 {res['metrics_scrape_ms']['p50']} ms, max {res['metrics_scrape_ms']['max']} ms)")
print(f"  CPUs: machine {busy:.1f}% busy, load average mean {res['loadavg_1min']['mean']:.1f} max "
      f"{res['loadavg_1min']['max']:.1f}; stress-ng's {settings['stress_cpus']} workers "
      f"{'%.1f' % stress_pct if stress_pct is not None else '?'}% of their CPUs")
print(f"  server: {srv:.1f}% of one core (worst 5 s window {res['server_cpu_worst_5s_window_percent']:.1f}%), "
      f"RSS {mem.get('VmRSS', 0):.0f} MiB; emulator {flt:.1f}%")
print(f"  heartbeats: {hb['per_s']:.0f}/s answered ({answered}), {failed} failed; round trip "
      f"p50 {l['p50']:.2f} ms, p90 {l['p90']:.2f} ms, p99 {l['p99']:.2f} ms, max {l['max']:.1f} ms "
      f"(worst 5 s window p99 {hb['worst_window_p99_ms']:.2f} ms)")
print(f"  suspect: at most {max_suspect} nodes at once; {suspect_eps} episodes seen on "
      f"{len(suspect_nodes)} nodes (sampled every {settings['sample_s']} s)")
print(f"  agents: {len(fenced)} fenced, {len(register_again)} told to register again, "
      f"{len(hb_failed)} 'heartbeat failed' lines")
print(f"  at the end: {up_end} of {settings['nodes']} nodes up, {running_end} jobs running, "
      f"{node_losses} task node losses")
print(f"  nodes declared down: {down_declared} (server counter loom_failures_detected_total{{kind='node_down'}}); "
      f"at most {max_down} down at once in the samples")
# Each node declared down, with what the server and the agent said about it
# (the first 20 in full; every name is in the JSON). The server logs no line
# per node (its view is the node's reason and the jobs' events), so the
# server log lines are usually none.
server_log = open(server_f, errors="replace").read().splitlines()
for k, (name, d) in enumerate(sorted(down_names.items(), key=lambda x: (len(x[0]), x[0]))):
    if k == 20:
        print(f"    ... and {len(down_names) - 20} more: {', '.join(sorted(down_names)[20:])}")
        break
    print(f"    DOWN {name}: {d}")
    pat = re.compile(re.escape(name) + r"(?![0-9])")
    for line in [l for l in server_log if pat.search(l)][:5]:
        print(f"      server log: {line}")
    mine = [l for l in fleet if f" node={name} " in l and "launched task" not in l
            and "killed by SIGKILL" not in l]
    for line in mine[-8:]:
        print(f"      agent log: {line}")
lost = [(j["id"], j["name"], j["node_losses"], j["state"]) for j in jobs if j.get("node_losses")]
res["jobs_with_node_losses"] = lost
if lost:
    print(f"    {len(lost)} jobs lost tasks with their node: " +
          ", ".join(f"{i} ({n}, {s})" for i, _, n, s in lost[:20]) + (" ..." if len(lost) > 20 else ""))
    json.dump(res, open(out, "w"), indent=1)
if not saturated:
    print("  the CPUs were NOT saturated: the run does not show what it should")
print("  PASS: no node declared down, no agent fenced" if res["pass"] else "  FAIL")
sys.exit(0 if res["pass"] else 1)
PYEOF
rc=$?
echo "results: $OUT (liveness.json, samples.jsonl, the logs); $(($(date +%s) - t_start)) s in all"
exit $rc
