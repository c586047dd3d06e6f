#!/usr/bin/env bash
# Metrics end to end (docs/metrics.md): a real Prometheus (Debian's) scrapes a
# loom server and two agents of a local cluster every second. A job holds 8
# GPUs of one node and a 16-GPU job waits; the test asserts through
# Prometheus' HTTP query API that the loom and DCGM-named series are there
# with the values the cluster has: allocated GPUs equal the running job's,
# the waiting job counted by its reason, the GPUs of the running job labelled
# with its id and busy, the others idle. Prometheus keeps the exporter's `job`
# label (the job holding a GPU) as `exported_job`, since `job` is its own.
# Usage: tests/prometheus_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PROM=/usr/bin/prometheus
[ -x "$PROM" ] || fail "no $PROM: install Debian's prometheus (scripts/setup.sh --test does)"
PY=python3

write_cluster 2
echo "services: {port_range: $((PORT + 55))-$((PORT + 59))}" >> "$W/cluster.yaml"
start_server
start_agents 2
echo "ok: two agents registered"

PROM_PORT=$((PORT + 50))
cat > "$W/prometheus.yml" <<YAML
global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: loom-server
    authorization: {credentials_file: "$W/admin.token"}
    static_configs: [{targets: ["127.0.0.1:$PORT"]}]
  - job_name: loom-agent
    static_configs: [{targets: ["127.0.0.2:$((PORT + 1))", "127.0.0.3:$((PORT + 2))"]}]
YAML
"$PROM" --config.file="$W/prometheus.yml" --storage.tsdb.path="$W/prom-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn > "$W/prometheus.log" 2>&1 &
PIDS+=($!)

RUN=$("$LOOM" run -g 8 --name busy -- sleep 600 | grep -o '[0-9]*$') || fail "submit busy"
WAIT=$("$LOOM" run -g 16 --nodes 2 --name waiting -- sleep 1 | grep -o '[0-9]*$') || fail "submit waiting"

# q EXPR: the query's result as "labels=value" lines (sorted), via the HTTP API.
q() {
  curl -s --get "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1" |
    "$PY" -c '
import json, sys
r = json.load(sys.stdin)
assert r["status"] == "success", r
for s in sorted(r["data"]["result"], key=lambda s: sorted(s["metric"].items())):
    m = {k: v for k, v in s["metric"].items() if k not in ("__name__", "instance", "job")}
    print(",".join(f"{k}={v}" for k, v in sorted(m.items())) + "=" + s["value"][1])
' 2>/dev/null
}
# expect EXPR WANT: waits (up to 30 s: Prometheus' first scrape takes ~5 s)
# until the query gives exactly WANT.
expect() {
  local got=""
  for _ in $(seq 300); do
    got=$(q "$1")
    [ "$got" = "$2" ] && return 0
    sleep 0.1
  done
  fail "query $1: got [$got], want [$2]"
}

expect 'loom_gpus{state="allocated"}' "gpu_model=h200,pool=h200,state=allocated=8"
expect 'loom_gpus{state="total"}' "gpu_model=h200,pool=h200,state=total=16"
expect 'loom_gpus{state="free"}' "gpu_model=h200,pool=h200,state=free=8"
expect 'loom_jobs{state="running"}' "project=default,state=running=1"
expect 'loom_nodes{state="up"}' "state=up=2"
expect 'sum(loom_pending_jobs)' "=1"
echo "ok: loom series: 8 of 16 GPUs allocated, 1 running job, 1 pending, 2 nodes up"
expect "count(DCGM_FI_DEV_GPU_UTIL{exported_job=\"$RUN\",emulated=\"true\",modelName=\"emulated h200\"})" "=8"
expect 'count(DCGM_FI_DEV_GPU_UTIL{exported_job=""})' "=8"
expect "min(DCGM_FI_DEV_GPU_UTIL{exported_job=\"$RUN\"}) > bool 80" "=1"
expect 'max(DCGM_FI_DEV_GPU_UTIL{exported_job=""})' "=0"
for m in DCGM_FI_DEV_FB_USED DCGM_FI_DEV_FB_FREE DCGM_FI_DEV_GPU_TEMP DCGM_FI_DEV_POWER_USAGE DCGM_FI_DEV_SM_CLOCK DCGM_FI_DEV_XID_ERRORS; do
  expect "count($m)" "=16"
done
expect "count(DCGM_FI_DEV_GPU_UTIL{Hostname!=\"\",UUID=~\"GPU-.*\",device=~\"nvidia[0-7]\",gpu=~\"[0-7]\"})" "=16"
expect "min(DCGM_FI_DEV_FB_USED{exported_job=\"$RUN\"} + DCGM_FI_DEV_FB_FREE{exported_job=\"$RUN\"}) > bool 144000" "=1"
echo "ok: DCGM series for 16 GPUs; job $RUN's 8 GPUs busy and labelled, the rest idle"
expect "count(loom_task_memory_bytes{exported_job=\"$RUN\"} > 0)" "=1"
expect 'loom_scheduling_decisions_total' "=1"
expect 'loom_api_requests_total{route="/v1/jobs",method="POST",status="201"}' "method=POST,route=/v1/jobs,status=201=2"
expect 'loom_scheduling_pass_seconds_count > bool 0' "=1"
echo "ok: task memory, decisions, API requests by route, pass-duration histogram"

# A node failure shows in the failure counter.
"$LOOM" cancel "$WAIT" > /dev/null
"$LOOM" chaos fail-gpu h200-1 0 > /dev/null || fail "chaos"
expect 'loom_failures_detected_total{kind="unhealthy"}' "kind=unhealthy=1"
expect 'loom_nodes{state="drained"}' "state=drained=1"
expect 'max(DCGM_FI_DEV_XID_ERRORS)' "=79"
echo "ok: an unhealthy node is counted, drained, and its GPU reports Xid 79"
# A service behind a gateway (docs/services.md): its series, for the
# dashboard's Inference services row. h200-1 is drained; the replica takes
# a GPU of h200-0 once job $RUN is gone.
"$LOOM" cancel "$RUN" > /dev/null || fail "cancel $RUN"
SVC_PORT=$((PORT + 55))
"$LOOM" gateway --listen-host 127.0.0.1 --run-dir "$W/gw" --interval 0.2 --threads 1 >> "$W/gateway.log" 2>&1 &
PIDS+=($!)
printf 'kind: service\nname: web\nreplicas: 1\nport: %s\nresources: {gpus: 1}\ncommand: [python3, "%s"]\nreadiness: {http: /healthz, period: 200ms}\n' \
  "$SVC_PORT" "$PWD/tests/services/replica.py" > "$W/web.yaml"
"$LOOM" service apply -f "$W/web.yaml" > /dev/null || fail "service apply"
served() { curl -sf "http://127.0.0.1:$SVC_PORT/" -o /dev/null; }
wait_for 60 served || fail "the service is not served: $("$LOOM" service show web)"
for _ in $(seq 20); do served || fail "a request to the service failed"; done
expect 'loom_service_ready_replicas' "service=web=1"
expect 'loom_service_desired_replicas' "service=web=1"
expect 'loom_service_response_seconds_count >= bool 20' "service=web=1"
expect 'loom_service_requests_total >= bool 20' "service=web=1"
echo "ok: a service's replicas, requests and response times"

# The Grafana dashboard in the repo: every query parses and every series it
# names is one that loom exports.
"$PY" - "deploy/grafana/loom-dashboard.json" "http://127.0.0.1:$PROM_PORT" <<'PYEOF' || fail "dashboard queries"
import json, re, sys, urllib.parse, urllib.request
dash, prom = json.load(open(sys.argv[1])), sys.argv[2]
names = set(json.load(urllib.request.urlopen(prom + "/api/v1/label/__name__/values"))["data"])
exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
assert len(exprs) > 20, len(exprs)
for e in exprs:
    q = e.replace("$__range", "1h")
    r = json.load(urllib.request.urlopen(prom + "/api/v1/query?" + urllib.parse.urlencode({"query": q})))
    assert r["status"] == "success", (e, r)
    for name in re.findall(r"\b(?:loom|DCGM)_[A-Za-z0-9_]+", e):
        assert name in names, f"{name} (in {e}) is not exported"
print(f"{len(exprs)} dashboard queries run; every series they name is exported")
PYEOF
kill -0 "$SERVER" || fail "server died"
echo "PASS"
