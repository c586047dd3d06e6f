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
t0=$(date +%s.%N)
curl -sf -X POST "http://$AGENT/v1/tasks" -d "{\"task_id\": \"big\", \"argv\": [\"true\"], \"container\": {\"image\": \"$REG/bench/big@$BIG\"}}" > /dev/null ||
  fail "launch in the big image: $(tail -3 "$W/agent.log")"
t1=$(date +%s.%N)
rm -rf "$W/ref"
t2=$(date +%s.%N)
skopeo copy -q --src-tls-verify=false "docker://$REG/bench/big:1" "oci:$W/ref:t" || fail "skopeo copy"
umoci unpack --image "$W/ref:t" "$W/ref.bundle" > /dev/null || fail "umoci unpack"
t3=$(date +%s.%N)
python3 -c "
size = $SIZE_MIB * 1.048576
a, b = $t1 - $t0, $t3 - $t2
print(f'cold pull + unpack of {size:.0f} MB: loom agent {a:.2f} s ({size / a:.0f} MB/s); skopeo copy + umoci unpack {b:.2f} s ({size / b:.0f} MB/s)')"
echo "bench done"
