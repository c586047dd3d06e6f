#!/usr/bin/env bash
# Inference services end to end (docs/services.md): a server, two emulated
# nodes and `loom gateway` (a real HAProxy) on loopback; replicas are
# tests/services/replica.py, loaded with wrk for a bounded time.
#  0. A gateway run directory another user made, of mode 0755 or a
#     symlink is refused; as root the default is /run/loom-gateway/NAME.
#  1. 3 replicas under steady load: one killed (loom chaos kill-task) costs
#     at most the requests in flight at it, and 3 are ready again; a rolling
#     update under load fails no request; a broken version (readiness never
#     passes) stops the rollout with its reason, fails no request, and
#     applying the old spec again ends it.
#  2. Autoscaling from 1 to 4 replicas on requests in flight, and back to 1
#     once the load stops, each step in the events with its measurement.
#  3. Bad input: a malformed spec, a port clash, a port outside the
#     cluster's service ports, a service larger than any node: clear errors,
#     nothing created.
# Usage: tests/e2e_service_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
command -v haproxy > /dev/null || fail "haproxy is not installed (scripts/setup.sh)"
command -v wrk > /dev/null || fail "wrk is not installed (scripts/setup.sh --test)"
PY=python3
REPLICA="$PWD/tests/services/replica.py"
GWPORT=$((PORT + 60))
AUTOPORT=$((PORT + 61))
write_cluster 2
# The services' gateway ports: this test's block, not the default
# 30000-32767 (docs/cluster-spec.md, `services`).
echo "services: {port_range: $GWPORT-$((PORT + 63))}" >> "$W/cluster.yaml"
start_server
AGENT_FLAGS=(--service-ports "$((PORT + 20))-$((PORT + 59))")
start_agents 2

# 0. The gateway's run directory (docs/services.md, "The run directory"):
# one another user made, one others may read, or a symlink is refused
# (exit 2) before anything is written in it; the default as root is
# /run/loom-gateway/NAME, 0700 under a 0700 parent.
refused_run_dir() { # DIR WANT
  "$LOOM" gateway --listen-host 127.0.0.1 --run-dir "$1" --name gw-refused > "$W/refused.out" 2>&1
  local rc=$?
  [ "$rc" = 2 ] || fail "run dir $1: exit $rc, not 2: $(cat "$W/refused.out")"
  grep -q "$2" "$W/refused.out" || fail "run dir $1: $(cat "$W/refused.out")"
}
mkdir -m 0755 "$W/wide"
refused_run_dir "$W/wide" "has mode 0755; it must be 0700"
mkdir -m 0700 "$W/real"
ln -s "$W/real" "$W/link"
refused_run_dir "$W/link" "is a symlink; not following it"
if [ "$(id -u)" = 0 ]; then
  mkdir -m 0700 "$W/planted"
  chown 65534 "$W/planted"
  refused_run_dir "$W/planted" "is owned by uid 65534, not by this gateway's uid 0"
  [ -z "$(ls -A "$W/planted")" ] || fail "the gateway wrote into a planted run dir: $(ls -la "$W/planted")"
  DEFAULT_DIR="/run/loom-gateway/e2e-$PORT"
  timeout -s INT 3 "$LOOM" gateway --listen-host 127.0.0.1 --name "e2e-$PORT" >> "$W/gateway-default.log" 2>&1
  [ "$(stat -c '%a %u %F' /run/loom-gateway)" = "700 0 directory" ] || fail "/run/loom-gateway: $(stat -c '%a %u %F' /run/loom-gateway)"
  [ "$(stat -c '%a %u %F' "$DEFAULT_DIR")" = "700 0 directory" ] || fail "$DEFAULT_DIR: $(cat "$W/gateway-default.log")"
  rm -rf "$DEFAULT_DIR"
fi
echo "ok: a run dir of another user, of mode 0755 or a symlink is refused; the default is $([ "$(id -u)" = 0 ] && echo /run/loom-gateway/NAME, 0700)"

"$LOOM" gateway --listen-host 127.0.0.1 --run-dir "$W/gw" --interval 0.2 \
  --threads 1 --name gw-test >> "$W/gateway.log" 2>&1 &
PIDS+=($!)

sjson() { "$LOOM" service show "$1" -o json 2> /dev/null; }
# sget SERVICE PYTHON_EXPR: the expression on the service's JSON (as j).
sget() {
  sjson "$1" | "$PY" -c "import json,sys; j=json.load(sys.stdin); print($2)" 2> /dev/null
}
ready_is() { [ "$(sget "$1" "j['ready']")" = "$2" ]; }
# settled SERVICE N: N replicas, all ready and of the current revision.
settled() {
  [ "$(sget "$1" "sum(1 for r in j['replicas'] if r['phase']=='ready' and r['current'])")" = "$2" ] &&
    [ "$(sget "$1" "len(j['replicas'])")" = "$2" ]
}
# load SECONDS CONNECTIONS PORT OUT: wrk in the background (WRK is its pid).
load() {
  wrk -t 2 -c "$2" -d "${1}s" --timeout 5s "http://127.0.0.1:$3/" > "$4" 2>&1 &
  WRK=$!
}
# failures OUT: non-2xx answers plus socket errors in a wrk report.
failures() {
  "$PY" - "$1" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
n = 0
m = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
if m: n += int(m.group(1))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
if m: n += sum(int(x) for x in m.groups())
print(n)
PY
}
requests() { grep -o '^ *[0-9]* requests in' "$1" | grep -o '[0-9]*' | head -1; }

cat > "$W/svc.yaml" <<YAML
kind: service
name: echo
replicas: 3
port: $GWPORT
resources: {gpus: 1}
command: [python3, "$REPLICA", --delay-ms, "20", --version, v1]
readiness: {http: /healthz, period: 500ms, timeout: 500ms, failures: 3}
update: {max_surge: 1, max_unavailable: 0}
stop: {grace: 5s}
YAML
"$LOOM" service apply -f "$W/svc.yaml" > "$W/apply.out" 2>&1 || fail "apply: $(cat "$W/apply.out")"
grep -q "echo" "$W/apply.out" || fail "apply said: $(cat "$W/apply.out")"
wait_for 60 settled echo 3 || fail "3 replicas not ready: $("$LOOM" service show echo)"
wait_for 20 curl -sf "http://127.0.0.1:$GWPORT/" -o /dev/null || fail "the gateway does not serve: $("$LOOM" service show echo)"
curl -s "http://127.0.0.1:$GWPORT/" | grep -q "^replica [0-9]* v1" || fail "answer: $(curl -s "http://127.0.0.1:$GWPORT/")"
"$LOOM" service list | grep -q "^echo " || fail "service list: $("$LOOM" service list)"
[ "$(sget echo "len(set(r['node'] for r in j['replicas']))")" = 2 ] ||
  fail "the replicas are not spread over both nodes: $("$LOOM" service show echo)"
echo "ok: 3 replicas behind the gateway on port $GWPORT, on both nodes"

# 1a. A replica killed under load: at most the requests in flight at it fail
# (8 connections: at most 8 in flight anywhere).
load 8 8 "$GWPORT" "$W/kill.wrk"
sleep 2
VICTIM=$(sget echo "j['replicas'][0]['job']")
"$LOOM" chaos kill-task "$VICTIM" > /dev/null || fail "chaos kill-task $VICTIM"
wait "$WRK"
F=$(failures "$W/kill.wrk")
[ "$F" -le 8 ] || fail "$F requests failed when one replica died (want at most 8): $(cat "$W/kill.wrk")"
wait_for 60 settled echo 3 || fail "not back to 3 ready replicas: $("$LOOM" service show echo)"
echo "ok: a replica killed under load cost $F request(s) of $(requests "$W/kill.wrk"); 3 ready again"

# 1b. A rolling update under load: no request fails.
sed -i 's/--version, v1/--version, v2/' "$W/svc.yaml"
load 25 8 "$GWPORT" "$W/roll.wrk"
sleep 2
"$LOOM" service apply -f "$W/svc.yaml" > "$W/apply2.out" 2>&1 || fail "apply v2: $(cat "$W/apply2.out")"
rolled() { settled echo 3 && curl -s "http://127.0.0.1:$GWPORT/" | grep -q " v2"; }
wait_for 60 rolled || fail "the update did not finish: $("$LOOM" service show echo)"
kill -INT "$WRK" 2> /dev/null; wait "$WRK"
F=$(failures "$W/roll.wrk")
[ "$F" = 0 ] || fail "$F requests failed during the rolling update: $(cat "$W/roll.wrk")"
[ "$(requests "$W/roll.wrk")" -gt 100 ] || fail "too little load: $(cat "$W/roll.wrk")"
"$LOOM" service show echo -o json | grep -q "rolling update" || fail "no rollout event: $("$LOOM" service show echo)"
echo "ok: rolling update to v2 under load, 0 of $(requests "$W/roll.wrk") requests failed"

# 1c. A broken version: its replica never gets ready; the rollout stops with
# the reason; the old replicas keep serving; the old spec again ends it.
cp "$W/svc.yaml" "$W/good.yaml"
sed -i 's/--version, v2\]/--version, v3, --broken]/' "$W/svc.yaml"
grep -q -- "--broken" "$W/svc.yaml" || fail "sed: $(cat "$W/svc.yaml")"
load 8 8 "$GWPORT" "$W/broken.wrk"
"$LOOM" service apply -f "$W/svc.yaml" > /dev/null 2>&1 || fail "apply v3"
stuck() { sget echo "j['status']" | grep -q "not ready"; }
wait_for 30 stuck || fail "no reason for the stalled rollout: $("$LOOM" service show echo)"
wait "$WRK"
F=$(failures "$W/broken.wrk")
[ "$F" = 0 ] || fail "$F requests failed with a broken version: $(cat "$W/broken.wrk")"
[ "$(sget echo "sum(1 for r in j['replicas'] if r['phase']=='ready' and not r['current'])")" = 3 ] ||
  fail "the old replicas do not all serve: $("$LOOM" service show echo)"
"$LOOM" service show echo | grep -q "not ready for .*GET /healthz: answered 503" || fail "loom service show: $("$LOOM" service show echo)"
echo "ok: broken v3 stalls: $(sget echo "j['status']")"
"$LOOM" service apply -f "$W/good.yaml" > /dev/null 2>&1 || fail "apply v2 again"
wait_for 60 settled echo 3 || fail "v2 again did not settle: $("$LOOM" service show echo)"
echo "ok: applying v2 again ends the broken rollout"

# 3. Bad input.
printf 'kind: service\nname: bad\nreplicas: [1\n' > "$W/bad.yaml"
"$LOOM" service apply -f "$W/bad.yaml" > "$W/bad.out" 2>&1 && fail "a malformed spec was accepted"
grep -q "bad.yaml" "$W/bad.out" || fail "the error does not name the file: $(cat "$W/bad.out")"
sed "s/name: echo/name: clash/" "$W/good.yaml" > "$W/clash.yaml"
"$LOOM" service apply -f "$W/clash.yaml" > "$W/clash.out" 2>&1 && fail "a port clash was accepted"
grep -q "is the port of service echo" "$W/clash.out" || fail "clash: $(cat "$W/clash.out")"
for bad_port in 22 30000; do
  sed -e "s/name: echo/name: port$bad_port/" -e "s/^port: .*/port: $bad_port/" "$W/good.yaml" > "$W/port.yaml"
  "$LOOM" service apply -f "$W/port.yaml" > "$W/port.out" 2>&1 && fail "port $bad_port was accepted"
  grep -q "port: $bad_port is not a service port of this cluster (services.port_range: $GWPORT-$((PORT + 63))" "$W/port.out" ||
    fail "port $bad_port: $(cat "$W/port.out")"
done
sed -e "s/name: echo/name: huge/" -e "s/gpus: 1/gpus: 9/" -e "/^port:/d" "$W/good.yaml" > "$W/huge.yaml"
"$LOOM" service apply -f "$W/huge.yaml" > "$W/huge.out" 2>&1 && fail "a 9-GPU replica was accepted"
grep -q "9 h200 GPUs" "$W/huge.out" || fail "huge: $(cat "$W/huge.out")"
[ "$("$LOOM" service list -o json | "$PY" -c "import json,sys; print(len(json.load(sys.stdin)['services']))")" = 1 ] ||
  fail "a refused service was created: $("$LOOM" service list)"
echo "ok: a malformed spec, a port clash, ports 22 and 30000 (outside services.port_range) and a 9-GPU replica are refused, nothing created"

# 2. Autoscaling on requests in flight: 1 -> 4 under load, 1 after it.
cat > "$W/auto.yaml" <<YAML
kind: service
name: auto
replicas: {min: 1, max: 4}
port: $AUTOPORT
resources: {gpus: 1}
command: [python3, "$REPLICA", --delay-ms, "100"]
readiness: {http: /healthz, period: 200ms, timeout: 200ms, failures: 2}
autoscale: {metric: in_flight, target: 2, up_delay: 1s, down_delay: 3s}
stop: {grace: 5s}
YAML
"$LOOM" service apply -f "$W/auto.yaml" > /dev/null 2>&1 || fail "apply auto"
wait_for 60 settled auto 1 || fail "auto: 1 replica not ready: $("$LOOM" service show auto)"
wait_for 20 curl -sf "http://127.0.0.1:$AUTOPORT/" -o /dev/null || fail "auto is not served"
load 40 16 "$AUTOPORT" "$W/auto.wrk"
wait_for 40 settled auto 4 || fail "auto did not grow to 4: $("$LOOM" service show auto)"
kill -INT "$WRK" 2> /dev/null; wait "$WRK"
sjson auto | grep -q "autoscaled: in_flight .* (target 2): 1 -> " || fail "no scale-up event: $("$LOOM" service show auto)"
echo "ok: autoscaled up to 4: $(sjson auto | grep -o 'autoscaled: in_flight[^"]*' | head -3 | tr '\n' ';')"
wait_for 60 settled auto 1 || fail "auto did not shrink to 1: $("$LOOM" service show auto)"
sjson auto | grep -q "autoscaled: in_flight .* -> 1 replica" || fail "no scale-down event: $("$LOOM" service show auto)"
echo "ok: back to 1: $(sjson auto | grep -o 'autoscaled: in_flight[^"]*' | tail -1)"

# Metrics, logs and delete.
curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" > "$W/metrics.txt" || fail "/metrics"
grep -q '^loom_service_ready_replicas{service="echo"} 3' "$W/metrics.txt" || fail "metrics: $(grep loom_service "$W/metrics.txt")"
grep -q '^loom_service_response_seconds_count{service="echo"} [1-9]' "$W/metrics.txt" || fail "no response times: $(grep loom_service "$W/metrics.txt")"
"$LOOM" service logs echo > "$W/logs.out" 2>&1 || fail "service logs: $(cat "$W/logs.out")"
grep -q "listening on 127.0.0" "$W/logs.out" || fail "service logs: $(cat "$W/logs.out")"
"$LOOM" service delete auto > /dev/null || fail "delete auto"
gone() { ! "$LOOM" service show auto > /dev/null 2>&1; }
wait_for 30 gone || fail "auto was not deleted: $("$LOOM" service show auto)"
echo "PASS"
