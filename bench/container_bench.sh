#!/usr/bin/env bash
# How much a container image adds to a task's start (bench/README.md,
# "Container tasks"): one agent (no server: its API on loopback with
# --insecure) emulating one 8-GPU node; a loopback registry holds a busybox
# image. RUNS one-GPU tasks, one at a time, as host processes and in the
# cached image, each printing the boot-time clock first thing (/proc/uptime,
# to 10 ms); the figure is that less the moment its launch was sent. Then the cold pull of a large
# image (SIZE_MIB of random data in one layer) through the agent, in MB/s,
# beside `skopeo copy` + `umoci unpack` of the same image.
# Usage: bench/container_bench.sh PATH_TO_LOOM [RUNS] [SIZE_MIB]   (root)
set -u
LOOM="$(realpath "$1")"
RUNS=${2:-30}
SIZE_MIB=${3:-1024}
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/registry.sh
[ "$(id -u)" = 0 ] || fail "container tasks need root (runc)"
start_registry
DIGEST=$(push_busybox_image bench/busybox:1) || fail "push"
AGENT="127.0.0.2:$((PORT + 1))"
"$LOOM" agent --server "http://127.0.0.1:1" --listen "$AGENT" --name n0 \
  --emulate 8xH200 --data-dir "$W/agent" --insecure --insecure-registry "$REG" \
  --health-interval 0 --run-as-user=false > "$W/agent.log" 2>&1 &
PIDS+=($!)
wait_for 10 curl -sf "http://$AGENT/healthz" > /dev/null || fail "agent did not start"

python3 - "$AGENT" "$W/agent/logs" "$REG/bench/busybox@$DIGEST" "$RUNS" <<'PY'
import json, os, statistics, sys, time, urllib.request
agent, logs, image, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
def post(body):
    req = urllib.request.Request(f"http://{agent}/v1/tasks", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=120))
def start_ms(task_id, container):
    body = {"task_id": task_id, "job_id": 1, "argv": ["/bin/sh", "-c", "cat /proc/uptime"], "gpus": [0]}
    if container:
        body["container"] = {"image": image}
    # /proc/uptime: the boot-time clock, to 10 ms, read the same way in a
    # container (busybox's date has no nanoseconds).
    t0 = time.clock_gettime(time.CLOCK_BOOTTIME)
    post(body)
    out = os.path.join(logs, task_id + ".out")
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            text = open(out).read().strip()
            if text:
                return (float(text.split()[0]) - t0) * 1000
        except FileNotFoundError:
            pass
        time.sleep(0.002)
    raise SystemExit(f"task {task_id} printed nothing: {open(out.replace('.out', '.err')).read()}")
# The first container task pulls the image: not timed.
start_ms("warm.c", True)
start_ms("warm.h", False)
res = {"host": [], "container": []}
for i in range(runs):
    res["host"].append(start_ms(f"{i}.h", False))
    res["container"].append(start_ms(f"{i}.c", True))
for kind, xs in res.items():
    xs.sort()
    print(f"{kind:9s} start: p50 {statistics.median(xs):6.1f} ms  p90 {xs[int(len(xs)*0.9)]:6.1f} ms  "
          f"min {xs[0]:6.1f}  max {xs[-1]:6.1f}  ({len(xs)} runs)")
d = statistics.median(res["container"]) - statistics.median(res["host"])
print(f"container adds {d:.1f} ms at p50")
PY
[ $? = 0 ] || fail "start benchmark"

# A cold pull: one layer of SIZE_MIB random bytes (incompressible).
mkdir -p "$W/big"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$W/big/blob"
BIG=$(push_busybox_image bench/big:1 "$W/big") || fail "push big"
# The launch is answered at once (202, pulling); the pull is over when the
# task leaves `pulling`.
t0=$(date +%s.%N)
curl -sf -X POST "http://$AGENT/v1/tasks" -d "{\"task_id\": \"big\", \"argv\": [\"true\"], \"container\": {\"image\": \"$REG/bench/big@$BIG\"}}" > /dev/null ||
  fail "launch in the big image: $(tail -3 "$W/agent.log")"
while curl -sf "http://$AGENT/v1/tasks/big" | grep -q '"state":"pulling"'; do sleep 0.01; done
t1=$(date +%s.%N)
curl -sf "http://$AGENT/v1/tasks/big" | grep -q '"state":"lost"' && fail "the big pull failed: $(tail -3 "$W/agent.log")"
rm -rf "$W/ref"
t2=$(date +%s.%N)
skopeo copy -q --src-tls-verify=false "docker://$REG/bench/big:1" "oci:$W/ref:t" || fail "skopeo copy"
umoci unpack --image "$W/ref:t" "$W/ref.bundle" > /dev/null || fail "umoci unpack"
t3=$(date +%s.%N)
python3 -c "
size = $SIZE_MIB * 1.048576
a, b = $t1 - $t0, $t3 - $t2
print(f'cold pull + unpack of {size:.0f} MB: loom agent {a:.2f} s ({size / a:.0f} MB/s); skopeo copy + umoci unpack {b:.2f} s ({size / b:.0f} MB/s)')"

# Eight one-GPU tasks of one image not on the node yet, launched at once:
# one pull (each layer fetched once), and the time until all eight ran.
mkdir -p "$W/eight"
echo eight > "$W/eight/marker"
EIGHT=$(push_busybox_image bench/eight:1 "$W/eight") || fail "push eight"
BEFORE=$(wc -l < "$W/registry.log")
python3 - "$AGENT" "$W/agent/logs" "$REG/bench/eight@$EIGHT" <<'PY' || fail "eight tasks"
import json, os, sys, threading, time, urllib.request
agent, logs, image = sys.argv[1:4]
def post(k):
    body = {"task_id": f"eight.{k}", "job_id": 8, "argv": ["/bin/sh", "-c", "cat /marker"],
            "gpus": [k], "container": {"image": image}}
    req = urllib.request.Request(f"http://{agent}/v1/tasks", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()
t0 = time.time()
threads = [threading.Thread(target=post, args=(k,)) for k in range(8)]
for t in threads: t.start()
for t in threads: t.join()
answered = time.time() - t0
while time.time() - t0 < 60:
    done = sum(1 for k in range(8) if os.path.exists(f"{logs}/eight.{k}.out") and
               open(f"{logs}/eight.{k}.out").read().strip() == "eight")
    if done == 8: break
    time.sleep(0.005)
else:
    raise SystemExit(f"only {done} of 8 tasks ran")
print(f"eight tasks, one image not on the node: all launches answered in {answered * 1000:.0f} ms, all 8 ran after {(time.time() - t0) * 1000:.0f} ms")
PY
layers=$(skopeo inspect --raw --tls-verify=false "docker://$REG/bench/eight:1" | jq -r '.layers[].digest')
fetched=0
for layer in $layers; do
  n=$(tail -n +"$((BEFORE + 1))" "$W/registry.log" | grep -c "\"GET /v2/bench/eight/blobs/$layer ")
  fetched=$((fetched + n))
done
echo "eight tasks: $(wc -w <<< "$layers") layer(s) fetched $fetched time(s) in all (one pull)"
[ "$fetched" = "$(wc -w <<< "$layers")" ] || fail "eight tasks fetched the layers $fetched times"
echo "bench done"
