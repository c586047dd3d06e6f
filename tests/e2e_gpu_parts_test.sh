#!/usr/bin/env bash
# GPU partitions and NICs end to end (docs/scheduling.md "GPU partitions"
# and "NICs", docs/agent.md "MIG" and "NICs"): a server whose pool keeps GPU
# 0 of each node in MIG mode (seven 1g.18gb, repartitioned on demand) and two
# emulated HGX H200 agents on loopback, each recording the NVML calls its
# emulated MIG control stands for.
#  1. Seven 1g.18gb jobs and one 7-GPU job run at once on one 8-GPU node;
#     each MIG task's CUDA_VISIBLE_DEVICES names its own instance (MIG-...);
#     GET /v1/nodes and /metrics show the instances taken.
#  2. Once they end, a 3g.71gb job repartitions the idle GPU: the agent
#     destroys the 1g instances and creates 3g.71gb ones (NVML profile 2).
#  3. A 2-node gang: each task's NCCL_IB_HCA is its GPUs' paired NICs.
#  4. Bad input: an unknown profile, more memory than a GPU has, both at once.
# Usage: tests/e2e_gpu_parts_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
cat > "$W/cluster.yaml" <<YAML
name: e2e
pools:
  - name: h200
    nodes: 2
    gpu: {model: h200, count: 8, memory: 141G}
    cpus: 192
    memory: 2Ti
    nics: 8
    mig: {gpus: 1, layout: [1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb, 1g.18gb], dynamic: true}
network: {nodes_per_leaf: 2, leaves_per_spine: 2}
YAML
start_server
for i in 0 1; do
  AGENT_FLAGS=(--emulate-mig-log "$W/mig$i.log" --health-interval 500ms)
  launch_agent "$i"
done
AGENT_FLAGS=()
wait_for 10 bash -c "[ \"\$('$LOOM' nodes -o json | grep -c '\"up\"')\" = 2 ]" ||
  fail "agents did not register: $(tail -5 "$W/agent0.log")"

job_id() { grep -o 'job [0-9]*' | head -1 | grep -o '[0-9]*$'; }
logs_of() { "$LOOM" logs "$1" 2>/dev/null; }

# 0. A change of MIG mode that waits: another process holds GPU 0 (the MIG
#    GPU) of both nodes open. The MIG job's launch is answered 503 and the
#    job queued again without using a restart; both nodes take no new work
#    and say why; once the GPUs are reset, each agent's next health round
#    sees the mode made, the nodes take work again and the job runs.
for i in 0 1; do "$LOOM" chaos hold-gpu "h200-$i" 0 > /dev/null || fail "chaos hold-gpu h200-$i 0"; done
WAITS=$("$LOOM" run --mig 1g.18gb --name waits -- sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; exec sleep 300' | job_id) ||
  fail "loom run --mig"
mig_waiting() {
  [ "$("$LOOM" nodes -o json | jq '[.nodes[] | select(.state == "cordoned" and .mig_waits == [0])] | length')" = "$1" ]
}
# The job goes to one node, then (queued again) to the other.
wait_for 20 mig_waiting 2 || fail "nodes: $("$LOOM" nodes -o json | jq -c '.nodes[] | [.name, .state, .mig_waits, .reason]')"
"$LOOM" nodes | grep -q "GPU 0: a change of MIG mode waits until the GPU is idle or reset" ||
  fail "loom nodes: $("$LOOM" nodes)"
wait_for 10 state_is "$WAITS" pending || fail "job $WAITS: $("$LOOM" show "$WAITS")"
[ "$(jget "$WAITS" "j['requeues']")" = 0 ] || fail "a requeue was counted: $("$LOOM" show "$WAITS")"
"$LOOM" show "$WAITS" | grep -q "answered 503: .*GPU 0: MIG mode must be turned on for this task" ||
  fail "job events: $("$LOOM" show "$WAITS")"
grep -q "GPU 0: MIG mode must be turned on" "$W/agent0.log" "$W/agent1.log" || fail "no agent log line"
for i in 0 1; do "$LOOM" chaos reset-gpu "h200-$i" 0 > /dev/null || fail "chaos reset-gpu h200-$i 0"; done
wait_for 20 state_is "$WAITS" running || fail "job $WAITS after the resets: $("$LOOM" show "$WAITS")"
wait_for 10 mig_waiting 0 || fail "nodes after the resets: $("$LOOM" nodes)"
have_cvd() { logs_of "$1" | grep -q '^CVD='; }
wait_for 10 have_cvd "$WAITS" || fail "no output from job $WAITS"
logs_of "$WAITS" | grep -q '^CVD=MIG-' || fail "job $WAITS: $(logs_of "$WAITS")"
grep -q "MIG mode is on now; the node takes new work again" "$W/agent0.log" "$W/agent1.log" ||
  fail "no settle log line"
"$LOOM" cancel "$WAITS" > /dev/null
not_running() { ! state_is "$1" running; }
wait_for 20 not_running "$WAITS" || fail "job $WAITS did not end"
echo "ok: a MIG mode change that waits requeues the job (no restart used) and cordons the nodes until the GPUs are reset"

# 1. Seven slices and a 7-GPU job at once.
IDS=()
for k in 1 2 3 4 5 6 7; do
  IDS+=("$("$LOOM" run --mig 1g.18gb --name "eval$k" -- sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; exec sleep 300' | job_id)") ||
    fail "loom run --mig"
done
WHOLE=$("$LOOM" run -g 7 --name whole -- sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; exec sleep 300' | job_id) ||
  fail "loom run -g 7"
all_running() { for j in "${IDS[@]}" "$WHOLE"; do state_is "$j" running || return 1; done; }
wait_for 20 all_running || fail "not all running: $("$LOOM" queue)"
nodes=$(for j in "${IDS[@]}" "$WHOLE"; do jget "$j" "j['placement']['tasks'][0]['node']"; done | sort -u)
[ "$(echo "$nodes" | wc -l)" = 1 ] || fail "the 8 jobs run on several nodes: $nodes"
for j in "${IDS[@]}" "$WHOLE"; do wait_for 10 have_cvd "$j" || fail "no output from job $j"; done
uuids=$(for j in "${IDS[@]}"; do logs_of "$j" | grep -o '^CVD=.*' | cut -d= -f2; done)
[ "$(echo "$uuids" | grep -c '^MIG-')" = 7 ] || fail "MIG tasks' CUDA_VISIBLE_DEVICES: $uuids"
[ "$(echo "$uuids" | sort -u | wc -l)" = 7 ] || fail "an instance given twice: $uuids"
[ "$(logs_of "$WHOLE" | grep -o '^CVD=.*')" = "CVD=1,2,3,4,5,6,7" ] ||
  fail "whole job: $(logs_of "$WHOLE")"
NODE=$nodes
"$LOOM" nodes -o json | jq -e --arg n "$NODE" '.nodes[] | select(.name == $n) |
    .gpu_parts[0].mode == "mig" and ([.gpu_parts[0].instances[] | select(.job != 0)] | length == 7)' \
  > /dev/null || fail "gpu_parts of $NODE: $("$LOOM" nodes -o json)"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" |
  grep -q "^loom_gpu_slices{node=\"$NODE\",gpu=\"0\",GPU_I_PROFILE=\"1g.18gb\",state=\"used\"} 7$" ||
  fail "metrics: $(curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" | grep loom_gpu_slices)"
N=${NODE#h200-}
mig_lines=$(curl -sf "http://127.0.0.$((N + 2)):$((PORT + 1 + N))/metrics" |
  grep "^loom_agent_mig_instance_info{node=\"$NODE\"" | grep 'GPU_I_PROFILE="1g.18gb"' | grep -v 'job=""')
[ "$(echo "$mig_lines" | grep -c .)" = 7 ] || fail "agent metrics: $mig_lines"
for j in "${IDS[@]}"; do echo "$mig_lines" | grep -q "job=\"$j\"" || fail "no instance of job $j: $mig_lines"; done
echo "ok: 7 x 1g.18gb and a 7-GPU job on $NODE at once, each MIG task on its own instance"

# The dashboard draws the MIG GPU as seven stripes of the seven jobs.
CHROMIUM=$(command -v chromium || command -v chromium-browser) || fail "chromium is not installed (scripts/setup.sh --test)"
timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$W/chromium" \
  --virtual-time-budget=5000 --dump-dom "$LOOM_SERVER/#token=$(cat "$W/admin.token")" \
  > "$W/dom.html" 2> "$W/chromium.err" || fail "chromium: $(tail -3 "$W/chromium.err")"
cell=$(grep -o "<span class=\"gpu part mig\" style=\"[^\"]*\" data-node=\"$NODE\" data-gpu=\"0\"" "$W/dom.html") ||
  fail "no MIG cell for $NODE GPU 0: $(grep -o 'class="gpu[^"]*"' "$W/dom.html" | sort | uniq -c)"
[ "$(echo "$cell" | grep -o 'hsl(' | wc -l)" = 7 ] || fail "want 7 job stripes: $cell"
echo "ok: the dashboard draws $NODE's MIG GPU as seven job stripes"

for j in "${IDS[@]}" "$WHOLE"; do "$LOOM" cancel "$j" > /dev/null || fail "cancel $j"; done
ended() { for j in "${IDS[@]}" "$WHOLE"; do state_is "$j" running && return 1; done; return 0; }
wait_for 30 ended || fail "jobs did not end"

# 2. A 3g.71gb job: the idle MIG GPU is partitioned anew.
for i in 0 1; do cp "$W/mig$i.log" "$W/mig$i.log.before" 2> /dev/null || : > "$W/mig$i.log.before"; done
BIG=$("$LOOM" run --mig 3g.71gb -- sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES"; exec sleep 300' | job_id) ||
  fail "loom run --mig 3g.71gb"
wait_for 20 state_is "$BIG" running || fail "3g.71gb job: $("$LOOM" show "$BIG")"
wait_for 10 have_cvd "$BIG" || fail "no output from job $BIG"
logs_of "$BIG" | grep -q '^CVD=MIG-' || fail "3g job: $(logs_of "$BIG")"
BN=$(jget "$BIG" "j['placement']['tasks'][0]['node']"); BN=${BN#h200-}
new=$(diff "$W/mig$BN.log.before" "$W/mig$BN.log" | grep '^>')
echo "$new" | grep -q 'nvmlGpuInstanceDestroy gpu=0' || fail "no instance destroyed: $new"
echo "$new" | grep -q 'nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=2 start=0 size=4' ||
  fail "no 3g.71gb instance created: $new"
"$LOOM" cancel "$BIG" > /dev/null
echo "ok: a 3g.71gb job repartitioned the idle GPU (destroy, then create with profile 2)"

# 3. A 2-node gang: each task's NICs are its GPUs' paired ones.
GANG=$("$LOOM" run -g 4 --nodes 2 -- sh -c 'echo "CVD=$CUDA_VISIBLE_DEVICES HCA=$NCCL_IB_HCA"; exec sleep 300' | job_id) ||
  fail "loom run --nodes 2"
wait_for 20 state_is "$GANG" running || fail "gang: $("$LOOM" show "$GANG")"
gang_logs() { for t in 0 1; do "$LOOM" logs "$GANG" --task "$t" 2>/dev/null; done; }
two_lines() { [ "$(gang_logs | grep -c 'HCA=')" -ge 2 ]; }
wait_for 10 two_lines || fail "gang output: $(gang_logs)"
[ "$(jget "$GANG" "len(set(t['node'] for t in j['placement']['tasks']))")" = 2 ] ||
  fail "the gang is not on 2 nodes: $("$LOOM" show "$GANG")"
while read -r line; do
  cvd=$(echo "$line" | grep -o 'CVD=[0-9,]*' | cut -d= -f2)
  want="=$(echo "$cvd" | tr ',' '\n' | sed 's/^/mlx5_/' | paste -sd,)"
  hca=$(echo "$line" | grep -o 'HCA=.*' | cut -d= -f2-)
  [ "$hca" = "$want" ] || fail "task with GPUs $cvd got NCCL_IB_HCA '$hca', want '$want'"
done < <(gang_logs | grep -o 'CVD=.*')
"$LOOM" cancel "$GANG" > /dev/null
echo "ok: a 2-node gang's tasks get their GPUs' paired NICs in NCCL_IB_HCA"

# 4. Bad input: refused with the reason, nothing queued.
"$LOOM" run --mig 1g.10gb -- true > "$W/bad1.out" 2>&1 && fail "an A100 profile was accepted on H200s"
grep -q "has the MIG profile 1g.10gb" "$W/bad1.out" || fail "bad profile: $(cat "$W/bad1.out")"
"$LOOM" run --gpu-memory 200Gi -- true > "$W/bad2.out" 2>&1 && fail "200Gi of a 141G GPU was accepted"
grep -q "resources.gpu_share.memory: 200Gi is more than the memory of one GPU" "$W/bad2.out" || fail "too much memory: $(cat "$W/bad2.out")"
"$LOOM" run --mig 1g.18gb --gpu-memory 1Gi -- true > "$W/bad3.out" 2>&1 && fail "--mig with --gpu-memory was accepted"
grep -q "exclude each other" "$W/bad3.out" || fail "both: $(cat "$W/bad3.out")"
[ "$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs" | jq '[.jobs[] | select(.name == "true")] | length')" = 0 ] ||
  fail "a refused job was queued: $(curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs")"
echo "ok: an unknown profile, too much memory and both at once are refused"
echo "all ok"
