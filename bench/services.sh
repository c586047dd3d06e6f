#!/usr/bin/env bash
# Services, measured (issue 21; bench/README.md, "Services"): a server, one
# emulated node and `loom gateway` (HAProxy) on loopback; the replica is
# bench's http_load in serve mode (answers at once: what is measured is the
# path to it).
#  1. The latency the loom endpoint adds: open-loop load of SERVICES_RATE
#     (default 2000) requests/s for SERVICES_SECONDS (10) over 16 keep-alive
#     connections, straight to the replica, then through the gateway; p50
#     and p99 of each (timed from each request's planned send time).
#  2. Scale-up to traffic: SERVICES_TRIALS (5) times, `loom service scale`
#     from 1 to 2 replicas; the time from the call to the gateway adding the
#     new replica to HAProxy's backend, and the same less the replica's own
#     start-up (its agent's launch to its readiness passing).
# Prints the figures and writes them as JSON to $BENCH_OUT/services.json.
# Usage: bench/services.sh [LOOM_BINARY [HTTP_LOAD_BINARY]]
set -u
cd "$(dirname "$0")/.."
LOOM="$(realpath "${1:-build/src/loom/cli/loom}")"
LOAD="$(realpath "${2:-build/bench/http_load}")"
[ -x "$LOOM" ] && [ -x "$LOAD" ] || { echo "build loom and bench/http_load first"; exit 2; }
source tests/lib/cluster.sh
RATE=${SERVICES_RATE:-2000}
SECONDS_EACH=${SERVICES_SECONDS:-10}
TRIALS=${SERVICES_TRIALS:-5}
OUT="${BENCH_OUT:-$(mktemp -d /tmp/loom-services.XXXXXX)}"
mkdir -p "$OUT"
GWPORT=$((PORT + 60))
write_cluster 1
start_server
AGENT_FLAGS=(--service-ports "$((PORT + 20))-$((PORT + 59))")
start_agents 1
"$LOOM" gateway --listen-host 127.0.0.1 --run-dir "$W/gw" --interval 0.2 \
  --name bench >> "$W/gateway.log" 2>&1 &
PIDS+=($!)
cat > "$W/svc.yaml" <<YAML
kind: service
name: bench
replicas: 1
port: $GWPORT
resources: {gpus: 1}
command: ["$LOAD", serve, "\$LOOM_HOST", "\$PORT"]
readiness: {http: /, period: 100ms, timeout: 100ms, failures: 1}
stop: {grace: 2s}
YAML
# The command is run as argv: $LOOM_HOST and $PORT need a shell.
sed -i "s|^command: .*|command: [/bin/sh, -c, 'exec $LOAD serve \$LOOM_HOST \$PORT']|" "$W/svc.yaml"
"$LOOM" service apply -f "$W/svc.yaml" > /dev/null || fail "apply"
sget() { "$LOOM" service show bench -o json 2> /dev/null | python3 -c "import json,sys; j=json.load(sys.stdin); print($1)" 2> /dev/null; }
ready_n() { [ "$(sget "sum(1 for r in j['replicas'] if r['phase']=='ready')")" = "$1" ] && [ "$(sget "len(j['replicas'])")" = "$1" ]; }
wait_for 60 ready_n 1 || fail "no ready replica: $("$LOOM" service show bench)"
wait_for 20 curl -sf "http://127.0.0.1:$GWPORT/" -o /dev/null || fail "the gateway does not serve"
ADDR=$(sget "j['replicas'][0]['address']")
HOST=${ADDR%:*}
RPORT=${ADDR##*:}
echo "replica at $ADDR, gateway at 127.0.0.1:$GWPORT; $RATE requests/s for ${SECONDS_EACH}s each"
"$LOAD" load "$HOST" "$RPORT" "$RATE" "$SECONDS_EACH" 16 > "$OUT/direct.json" || fail "direct load: $(cat "$OUT/direct.json")"
"$LOAD" load 127.0.0.1 "$GWPORT" "$RATE" "$SECONDS_EACH" 16 > "$OUT/gateway.json" || fail "gateway load: $(cat "$OUT/gateway.json")"
echo "direct:  $(cat "$OUT/direct.json")"
echo "gateway: $(cat "$OUT/gateway.json")"

# Scale-up trials.
ms() { date -d "$1" +%s%3N; }
: > "$OUT/scale.txt"
for t in $(seq "$TRIALS"); do
  lines=$(wc -l < "$W/gateway.log")
  t0=$(date +%s%3N)
  "$LOOM" service scale bench 2 > /dev/null || fail "scale 2"
  added() { tail -n +$((lines + 1)) "$W/gateway.log" | grep -q "bench: add j"; }
  wait_for 30 added || fail "no new server in the gateway: $("$LOOM" service show bench)"
  line=$(tail -n +$((lines + 1)) "$W/gateway.log" | grep "bench: add j" | head -1)
  new=$(echo "$line" | grep -o "add j[0-9]*" | grep -o "[0-9]*")
  t_add=$(ms "$(echo "$line" | cut -d' ' -f1)")
  t_launch=$(ms "$(grep "launched task $new.0.0 " "$W/agent0.log" | head -1 | cut -d' ' -f1)")
  t_ready=$(ms "$(grep "task $new.0.0 is ready" "$W/agent0.log" | head -1 | cut -d' ' -f1)")
  total=$((t_add - t0)); own=$((t_ready - t_launch))
  echo "trial $t: scale call -> in HAProxy's backend ${total} ms; replica's own start-up ${own} ms; loom's part $((total - own)) ms"
  echo "$total $own" >> "$OUT/scale.txt"
  "$LOOM" service scale bench 1 > /dev/null || fail "scale 1"
  wait_for 60 ready_n 1 || fail "not back to 1: $("$LOOM" service show bench)"
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
d = json.load(open(out + "/direct.json")); g = json.load(open(out + "/gateway.json"))
rows = [tuple(map(int, l.split())) for l in open(out + "/scale.txt") if l.strip()]
tot = sorted(r[0] for r in rows); loom = sorted(r[0] - r[1] for r in rows)
med = lambda v: v[len(v) // 2]
res = {"direct": d, "gateway": g,
       "added_p50_us": g["p50_us"] - d["p50_us"], "added_p99_us": g["p99_us"] - d["p99_us"],
       "scale_to_traffic_ms": {"median": med(tot), "max": tot[-1]},
       "scale_to_traffic_less_startup_ms": {"median": med(loom), "max": loom[-1]}}
json.dump(res, open(out + "/services.json", "w"), indent=1)
print("added by the gateway: p50 %d us, p99 %d us" % (res["added_p50_us"], res["added_p99_us"]))
print("scale-up to traffic: median %d ms (max %d); less the replica's start-up: median %d ms (max %d)"
      % (med(tot), tot[-1], med(loom), loom[-1]))
PY
echo "figures in $OUT/services.json"
