#!/usr/bin/env bash
# Fault tolerance end to end: a two-node torch.distributed (gloo) job that
# checkpoints every 5 steps runs on three agents; once it has saved a
# checkpoint, the node of its rank 1 dies (its agent and its task processes
# get SIGKILL). The server notices the silent node (default heartbeat
# timeout), stops the gang, requeues it by its restart policy, and it runs
# again on the two healthy nodes, resuming from the checkpoint. Asserts that
# the step count continues from the checkpoint, that the dead node is not
# used, that the job finishes, and that recovery (node death to the first
# training step of the new run) takes at most 30 s; prints the parts.
# Needs Debian's python3-torch. Usage: tests/torch_recovery_test.sh LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PY=/usr/bin/python3
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  fail "$PY has no torch.distributed: install python3-torch (scripts/setup.sh --test does)"
HEARTBEAT_TIMEOUT=10  # the server's default: the test shows the defaults meet the bar
write_cluster 3
# The job resumes on other nodes: a checkpoint root they all share (one
# host here; a shared filesystem in a real cluster).
start_server --checkpoint-root "$W/checkpoints"
start_agents 3
echo "ok: three agents registered"

cat > "$W/job.yaml" <<YAML
name: ddp-ckpt
resources: {gpus: 2, nodes: 2}
command: ["$PY", "$PWD/tests/torch/ckpt_train.py", "--steps", "60", "--every", "5", "--loom", "$LOOM"]
env: {GLOO_SOCKET_IFNAME: lo}
restart: {max: 2, backoff: 1s}
time_limit: 10m
YAML
ID=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
for _ in $(seq 600); do
  "$LOOM" logs "$ID" --task 0 2>/dev/null | grep -q "^checkpoint 10$" && break
  sleep 0.1
done
"$LOOM" logs "$ID" --task 0 | grep -q "^checkpoint 10$" || fail "no checkpoint 10: $("$LOOM" show "$ID")"
"$LOOM" show "$ID" -o json > "$W/before.json"
grep -q '"step": *1[05]' "$W/before.json" || fail "loom show has no reported checkpoint: $(cat "$W/before.json")"
VICTIM=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['placement']['tasks'][1]['node'])" "$W/before.json")
V=${VICTIM#h200-}
# The node dies: its agent and every task process it supervised.
T_KILL=$(date +%s.%N)
kill -9 "${AGENT_PIDS[$V]}"
for f in "$W/agent$V"/tasks/*.json; do
  [ -f "$f" ] || continue
  for key in pgid shim_pid; do
    pid=$(grep -o "\"$key\": *[0-9]*" "$f" | grep -o '[0-9]*$')
    [ -n "$pid" ] && { kill -9 -- "-$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null; }
  done
done
echo "killed node $VICTIM (rank 1) after checkpoint 10"

# Wait for the new run's first training step.
T_STEP=""
for _ in $(seq 900); do
  if "$LOOM" logs "$ID" --task 0 2>/dev/null | grep -q "^start run=1" &&
     "$LOOM" logs "$ID" --task 0 2>/dev/null | grep -A1 "^start run=1" | grep -q "^step"; then
    T_STEP=$(date +%s.%N)
    break
  fi
  sleep 0.1
done
[ -n "$T_STEP" ] || fail "the job did not run again: $("$LOOM" show "$ID")"
"$LOOM" show "$ID" -o json > "$W/after.json"
"$LOOM" logs "$ID" --task 0 > "$W/run1.out"
for _ in $(seq 600); do
  "$LOOM" show "$ID" -o json | grep -q '"state": *"succeeded"' && break
  sleep 0.1
done
"$LOOM" show "$ID" -o json > "$W/final.json"
"$LOOM" logs "$ID" --task 0 > "$W/final.out"
"$PY" - "$W/after.json" "$W/run1.out" "$W/final.json" "$W/final.out" "$VICTIM" "$T_KILL" "$T_STEP" <<'PYEOF' || fail "checks failed"
import datetime, json, re, sys
after, run1, final, final_out = (json.load(open(sys.argv[1])), open(sys.argv[2]).read(),
                                 json.load(open(sys.argv[3])), open(sys.argv[4]).read())
victim, t_kill, t_step = sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
errors = []
m = re.search(r"^start run=1 rank=0 world=2 resumed_from=(\d+)", run1, re.M)
resumed = int(m.group(1)) if m else -1
if resumed < 10:
    errors.append(f"run 1 resumed from step {resumed}, not from a checkpoint >= 10")
first = re.search(r"^start run=1.*\n(step \d+)", run1, re.M)
if not first or first.group(1) != f"step {resumed + 1}":
    errors.append(f"run 1 did not continue at step {resumed + 1}: {first and first.group(1)}")
nodes = {t["node"] for t in after["placement"]["tasks"]}
if victim in nodes:
    errors.append(f"run 1 placed on the dead node {victim}: {nodes}")
if final["state"] != "succeeded" or "done steps=60" not in final_out:
    errors.append(f"did not finish: {final['state']} {final.get('reason')}")
ck = after.get("checkpoint") or {}
if ck.get("step") != resumed or ck.get("run") != 0:
    errors.append(f"loom's last checkpoint {ck} is not the one run 1 resumed from ({resumed})")
if final["restart_count"] != 1:
    errors.append(f"restart_count {final['restart_count']}, expected 1")
ev = after["events"]
def when(pattern):
    for e in ev:
        if re.search(pattern, e["message"]) and ts(e["time"]) >= t_kill - 1:
            return ts(e["time"])
    return None
requeued, started, running = when(r"^restart 1 of"), when(r"^started on"), when(r"^running: all")
total = t_step - t_kill
parts = []
if requeued and started and running:
    parts = [("detection and gang stop (node declared down, job requeued)", requeued - t_kill),
             ("backoff and rescheduling", started - requeued),
             ("launch (agents confirmed every task)", running - started),
             ("torch start-up, init_process_group and checkpoint load", t_step - running)]
print(f"recovery: {total:.1f} s from node death to the first step of the new run "
      f"(resumed from step {resumed}, on {sorted(nodes)})")
for name, secs in parts:
    print(f"  {name}: {secs:.1f} s")
if total > 30:
    errors.append(f"recovery took {total:.1f} s, more than 30 s")
for e in errors:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF
echo "all checks passed"
