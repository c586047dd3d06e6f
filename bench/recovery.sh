#!/usr/bin/env bash
# Recovery from a node's death, measured (issue 20; bench/README.md,
# "Recovery"): RECOVERY_TRIALS (default 10) trials of the torch recovery
# scenario on a real server with three emulated nodes on loopback. Each
# trial submits a two-node torch.distributed (gloo) job that checkpoints
# every 5 steps (tests/torch/ckpt_train.py), waits for its checkpoint of
# step 10, kills the node of rank 1 (its agent and every process of its
# task, SIGKILL), and times node death -> the first training step of the
# new run, resumed from that checkpoint (rank 0's log line); then reads
# loom's own phases of the recovery (`loom show -o json`, "recovery"),
# cancels the job and brings the node back for the next trial. Prints each
# trial, then p50 and p95 (nearest rank: of 10 trials, the slowest) of the
# total and of each phase, and writes them as JSON to
# $BENCH_OUT/recovery.json.
#
# Detection settings (the same as bench/liveness.sh, which shows they give
# no false alarms on a saturated machine): RECOVERY_INTERVAL (heartbeat
# interval, default 500ms), RECOVERY_SUSPECT (seconds, 1.5),
# RECOVERY_TIMEOUT (seconds, 5). RECOVERY_SERVER_FLAGS: more server flags.
#
# Hot spares (must-show 2 of issue 20): RECOVERY_SPARES=1 gives the job
# `spares: 1`. Then, and with RECOVERY_SPOT=1 (the same scene without
# spares, for comparison), the cluster has four nodes, the job takes two
# whole nodes (2 tasks x 8 GPUs), and two preemptible jobs fill the other
# two (they trap the checkpoint signal and take their 10 s of grace, as a
# spot training job that checkpoints would). With the spare, a trial also
# checks that the new run's rank 1 is on the spare and that the spot job
# there was killed without grace.
#
# Needs Debian's python3-torch (scripts/setup.sh --test) and a release
# build. Usage: bench/recovery.sh [LOOM_BINARY]
set -u
LOOM="$(realpath "${1:-build/src/loom/cli/loom}")"
cd "$(dirname "$0")/.."
[ -x "$LOOM" ] || { echo "no loom binary at $LOOM (build it first)"; exit 2; }
source tests/lib/cluster.sh
source tests/lib/recovery.sh
PY=/usr/bin/python3
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null || {
  echo "$PY has no torch.distributed: install python3-torch (scripts/setup.sh --test)"
  exit 2
}
TRIALS=${RECOVERY_TRIALS:-10}
INTERVAL=${RECOVERY_INTERVAL:-500ms}
SUSPECT=${RECOVERY_SUSPECT:-1.5}
HEARTBEAT_TIMEOUT=${RECOVERY_TIMEOUT:-5}
SPARES=${RECOVERY_SPARES:-0}
SPOT=${RECOVERY_SPOT:-0}
[ "$SPARES" -gt 0 ] && SPOT=1
NODES=3
SHAPE="resources: {gpus: 2, nodes: 2}"
if [ "$SPOT" = 1 ]; then
  NODES=4
  SHAPE="tasks: 2
resources: {gpus_per_task: 8}
spares: $SPARES"
fi
OUT="${BENCH_OUT:-$(mktemp -d /tmp/loom-recovery.XXXXXX)}"
mkdir -p "$OUT"
echo "settings: heartbeat interval $INTERVAL, suspect after ${SUSPECT}s, down after ${HEARTBEAT_TIMEOUT}s; $TRIALS trials; $NODES nodes, spares $SPARES, spot jobs $((SPOT * 2))"

# spot_jobs: two preemptible jobs of a whole node each, running.
spot_jobs() {
  SPOT_IDS=()
  for k in 1 2; do
    cat > "$W/spot.yaml" <<YAML
name: spot-$k
preemptible: true
priority: low
resources: {gpus_per_task: 8}
command: ["/bin/sh", "-c", "trap 'echo checkpoint; sleep 10' USR1; while :; do sleep 0.2; done"]
checkpoint: {grace: 10s}
YAML
    SPOT_IDS+=("$("$LOOM" submit -f "$W/spot.yaml" | grep -o '[0-9]*$')") || fail "submit spot"
  done
  for s in "${SPOT_IDS[@]}"; do
    wait_for 30 state_is "$s" running || fail "spot job $s did not run: $("$LOOM" show "$s")"
  done
}

write_cluster "$NODES"
# shellcheck disable=SC2086
start_server --checkpoint-root "$W/checkpoints" --heartbeat-interval "$INTERVAL" \
  --suspect-after "$SUSPECT" ${RECOVERY_SERVER_FLAGS:-}
start_agents "$NODES"

: > "$OUT/trials.jsonl"
for trial in $(seq "$TRIALS"); do
  cat > "$W/job.yaml" <<YAML
name: recovery-$trial
$SHAPE
command: ["$PY", "$PWD/tests/torch/ckpt_train.py", "--steps", "400", "--every", "5", "--loom", "$LOOM"]
env: {GLOO_SOCKET_IFNAME: lo}
time_limit: 10m
YAML
  ID=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
  SPOT_IDS=()
  [ "$SPOT" = 1 ] && spot_jobs
  wait_for_checkpoint "$ID" 10
  VICTIM=$(task_node 1)
  SPARE=$("$PY" -c "import json,sys; print(','.join(json.load(open(sys.argv[1])).get('spare_nodes') or []))" "$W/before.json")
  [ "$SPARES" -gt 0 ] && [ -z "$SPARE" ] && fail "trial $trial: the job holds no spare: $("$LOOM" show "$ID")"
  kill_node "${VICTIM#h200-}" > /dev/null
  wait_for_rerun "$ID"
  if [ "$SPARES" -gt 0 ]; then
    NEW1=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['placement']['tasks'][1]['node'])" "$W/after.json")
    [ "$NEW1" = "$SPARE" ] || fail "trial $trial: rank 1 runs on $NEW1, not on the spare $SPARE: $("$LOOM" show "$ID")"
    KILLED=""
    for s in "${SPOT_IDS[@]}"; do
      "$LOOM" show "$s" -o json | grep -q "restarts on its hot spare(s) where this preemptible job runs; SIGKILL now" && KILLED=$s
    done
    [ -n "$KILLED" ] || fail "trial $trial: no spot job was killed for the spare: $(for s in "${SPOT_IDS[@]}"; do "$LOOM" show "$s"; done)"
  fi
  # loom notes the first progress at the next heartbeat after the output.
  for _ in $(seq 50); do
    "$LOOM" show "$ID" -o json > "$W/trial.json"
    "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])).get('recovery') or {}; sys.exit(not r.get('progress'))" "$W/trial.json" && break
    sleep 0.1
  done
  "$PY" - "$W/trial.json" "$W/run1.out" "$T_KILL" "$T_STEP" "$trial" "$VICTIM" "${SPARE:-}" "${KILLED:-}" >> "$OUT/trials.jsonl" <<'PYEOF' || fail "trial $trial: $(cat "$W/trial.json")"
import datetime, json, re, sys
job, run1 = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
t_kill, t_step = float(sys.argv[3]), float(sys.argv[4])
ts = lambda s: datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
m = re.search(r"^start run=1 rank=0 world=2 resumed_from=(\d+)$", run1, re.M)
rec = job.get("recovery") or {}
if not m or int(m.group(1)) < 10:
    sys.exit(f"run 1 did not resume from checkpoint 10 or later: {m and m.group(0)}")
if rec.get("run") != 0 or job.get("node_losses") != 1:
    sys.exit(f"no node-loss recovery of run 0 recorded: {rec}")
print(json.dumps({"trial": int(sys.argv[5]), "victim": sys.argv[6],
                  "total_s": t_step - t_kill, "resumed_from": int(m.group(1)),
                  # loom's detection starts at the node's last sign of life
                  "loss_before_kill_s": t_kill - ts(rec["lost"]),
                  "phases": rec.get("phases") or {}, "cause": rec.get("cause"),
                  "spare": sys.argv[7] or None, "spot_killed": sys.argv[8] or None}))
PYEOF
  tail -1 "$OUT/trials.jsonl" | "$PY" -c "
import json,sys; t=json.loads(sys.stdin.read()); p=t['phases']
f=lambda v: '-' if v is None else f'{v:.2f}'
print(f\"trial {t['trial']:2d}: {t['total_s']:.2f} s (detection {f(p.get('detection'))}, gang stop {f(p.get('gang_stop'))}, placement {f(p.get('placement'))}, launch {f(p.get('launch'))}, first progress {f(p.get('first_progress'))})\")"
  for j in "$ID" "${SPOT_IDS[@]}"; do
    "$LOOM" cancel "$j" > /dev/null || fail "cancel $j"
  done
  for j in "$ID" "${SPOT_IDS[@]}"; do
    wait_for 60 state_is "$j" cancelled || fail "job $j did not end: $("$LOOM" show "$j")"
  done
  restart_agent "${VICTIM#h200-}"
done

"$PY" - "$OUT/trials.jsonl" "$INTERVAL" "$SUSPECT" "$HEARTBEAT_TIMEOUT" "$SPARES" "$SPOT" > "$OUT/recovery.json" <<'PYEOF'
import json, math, sys
trials = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def pct(xs, q):  # nearest rank
    xs = sorted(x for x in xs if x is not None)
    return xs[max(0, math.ceil(q * len(xs)) - 1)] if xs else None
out = {"trials": len(trials),
       "settings": {"heartbeat_interval": sys.argv[2], "suspect_after_s": float(sys.argv[3]),
                    "heartbeat_timeout_s": float(sys.argv[4]),
                    "spares": int(sys.argv[5]), "spot_jobs": 2 * int(sys.argv[6])},
       "total_s": {"p50": pct([t["total_s"] for t in trials], .5),
                   "p95": pct([t["total_s"] for t in trials], .95),
                   "max": max(t["total_s"] for t in trials)},
       "phases": {}}
for name in ("detection", "gang_stop", "placement", "launch", "first_progress"):
    xs = [t["phases"].get(name) for t in trials]
    out["phases"][name] = {"p50": pct(xs, .5), "p95": pct(xs, .95)}
json.dump(out, sys.stdout, indent=1)
PYEOF
"$PY" - "$OUT/recovery.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = r["total_s"]
print(f"node death -> first step of the new run, {r['trials']} trials: p50 {t['p50']:.2f} s, p95 {t['p95']:.2f} s, max {t['max']:.2f} s")
for name, p in r["phases"].items():
    f = lambda v: "-" if v is None else f"{v:.2f} s"
    print(f"  {name}: p50 {f(p['p50'])}, p95 {f(p['p95'])}")
PYEOF
echo "results: $OUT/recovery.json"
