#!/usr/bin/env bash
# `loom sbatch` (docs/sbatch.md): a Slurm batch script on two nodes that
# finds its head node with `scontrol show hostnames`, as Slurm scripts do,
# and starts a 2-process-per-node torch.distributed program (gloo, env://)
# through `srun`; its output file is named with %j; the script's and the
# steps' environments are asserted; a failed step returns its exit code to
# the script; a script with an unknown directive is refused with its line
# and nothing is submitted.
# Needs Debian's python3-torch (scripts/setup.sh --test installs it).
# Usage: tests/e2e_sbatch_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
REPO=$PWD
source tests/lib/cluster.sh
PY=/usr/bin/python3
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  fail "$PY has no torch.distributed: install python3-torch (scripts/setup.sh does)"

write_cluster 2
start_server
start_agents 2

mkdir -p "$W/submit"
cat > "$W/submit/train.sh" <<'SCRIPT'
#!/bin/bash
#SBATCH -J ddp-check
#SBATCH -N 2 --ntasks-per-node 2
#SBATCH --gpus-per-node=8
#SBATCH -o out-%j.txt
#SBATCH --mail-type=END
set -u
echo "script: job=$SLURM_JOB_ID name=$SLURM_JOB_NAME nodelist=$SLURM_JOB_NODELIST" \
  "nnodes=$SLURM_NNODES ntasks=$SLURM_NTASKS tpn=$SLURM_TASKS_PER_NODE" \
  "gpus=$SLURM_GPUS_ON_NODE submit=$SLURM_SUBMIT_DIR procid=$SLURM_PROCID" \
  "node=$SLURMD_NODENAME args=$*"
echo "script: rank=${RANK:-unset} world=${WORLD_SIZE:-unset}"
# The usual Slurm idiom: the first host of the allocation is the master.
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)
export MASTER_PORT=$2
export GLOO_SOCKET_IFNAME=lo
srun -l sh -c 'echo "step $SLURM_STEP_ID: procid=$SLURM_PROCID localid=$SLURM_LOCALID nodeid=$SLURM_NODEID rank=$RANK local_rank=$LOCAL_RANK world=$WORLD_SIZE node=$LOOM_NODE master=$MASTER_ADDR:$MASTER_PORT"'
srun /usr/bin/python3 "$1"
echo "script: ddp step exited $?"
srun -N 1 -n 1 sh -c 'echo "one task on $SLURMD_NODENAME" >&2; exit 7'
echo "script: failing step exited $?"
SCRIPT
chmod +x "$W/submit/train.sh"

# Submitted from its own directory, as sbatch users do: -o is relative to
# it.
(cd "$W/submit" && "$LOOM" sbatch train.sh "$REPO/tests/torch/ddp_check.py" \
  "$((PORT + 50))") > "$W/sbatch.out" 2> "$W/sbatch.err" ||
  fail "sbatch failed: $(cat "$W/sbatch.err")"
grep -q "warning: .*mail-type" "$W/sbatch.err" ||
  fail "no warning for the ignored --mail-type: $(cat "$W/sbatch.err")"
ID=$(sed -n 's/^Submitted batch job \([0-9][0-9]*\)$/\1/p' "$W/sbatch.out")
[ -n "$ID" ] || fail "no 'Submitted batch job N': $(cat "$W/sbatch.out")"
echo "ok: submitted batch job $ID"

wait_for 120 state_is "$ID" succeeded ||
  fail "job $ID is $(jget "$ID" "j['state']"): $("$LOOM" logs "$ID" 2>&1 | tail -30)"
OUT="$W/submit/out-$ID.txt"
[ -f "$OUT" ] || fail "no $OUT (%j): $(ls "$W/submit")"
echo "ok: the job succeeded and wrote out-$ID.txt"

expect() { grep -q -- "$1" "$OUT" || fail "not in $OUT: $1"$'\n'"$(cat "$OUT")"; }
# The script: once, on the first node, with Slurm's variables.
[ "$(grep -c '^script: job=' "$OUT")" = 1 ] || fail "the script did not run once: $(cat "$OUT")"
expect "script: job=$ID name=ddp-check nodelist=127.0.0.\[2-3\] nnodes=2 ntasks=4 tpn=2(x2) gpus=8 submit=$W/submit procid=0 node=h200-0 args=$REPO/tests/torch/ddp_check.py"
expect "script: rank=unset world=unset"
# Step 0: four tasks, two per node, procids in node order.
for p in 0 1 2 3; do
  expect "^$p: step 0: procid=$p localid=$((p % 2)) nodeid=$((p / 2)) rank=$p local_rank=$((p % 2)) world=4 node=h200-$((p / 2)) master=127.0.0.2:$((PORT + 50))"
done
echo "ok: the script's and step 0's environments"
# Step 1: torch.distributed over the four tasks.
for r in 0 1 2 3; do
  expect "rank=$r world=4 local_rank=$((r % 2)) local_world=2 node_rank=$((r / 2)) master=127.0.0.2 rank_sum=6 ddp_in_sync=True"
done
expect "script: ddp step exited 0"
echo "ok: srun ran the torch.distributed program on 2 nodes x 2 processes"
# Step 2: one task; its exit code comes back to the script.
expect "one task on h200-0"
expect "script: failing step exited 7"
echo "ok: a failed step's exit code is srun's"

# srun outside a batch job says what to use instead.
"$LOOM" srun true > /dev/null 2> "$W/srun.err" && fail "srun outside a job succeeded"
grep -q "loom run --wait" "$W/srun.err" || fail "srun outside: $(cat "$W/srun.err")"

# An unknown directive: refused with its line, nothing submitted.
BEFORE=$("$LOOM" queue --all -o json | grep -c '"id"')
printf '#!/bin/sh\n#SBATCH -N 1\n#SBATCH --frobnicate=3\nsrun true\n' > "$W/submit/bad.sh"
(cd "$W/submit" && "$LOOM" sbatch bad.sh) > "$W/bad.out" 2> "$W/bad.err"
RC=$?
[ "$RC" = 2 ] || fail "sbatch of a bad script exited $RC, not 2: $(cat "$W/bad.err")"
grep -q 'bad.sh: line 3: unknown option "--frobnicate=3"' "$W/bad.err" ||
  fail "the error does not name the line: $(cat "$W/bad.err")"
[ "$("$LOOM" queue --all -o json | grep -c '"id"')" = "$BEFORE" ] ||
  fail "a job was submitted for the bad script"
echo "ok: an unknown directive is refused with its line"
echo "PASS"
