#!/usr/bin/env bash
# Fault tolerance end to end: a two-node torch.distributed (gloo) job that
# checkpoints every 5 steps runs on three agents; once it has saved a
# checkpoint, the node of its rank 1 dies (its agent and its task processes
# get SIGKILL). The server notices the silent node (default heartbeat
# timeout), stops the gang and requeues it (a lost node is not the job's
# fault); when rank 0 fails first in its collective, the run ends as the
# job's own failure and its restart policy queues it again. Either way it runs
# again on the two healthy nodes, resuming from the checkpoint. Asserts that
# the step count continues from the checkpoint, that the dead node is not
# used, that the job finishes, and that recovery (node death to the first
# training step of the new run) takes at most 30 s; prints the parts.
# Needs Debian's python3-torch. Usage: tests/torch_recovery_test.sh LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/recovery.sh
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
wait_for_checkpoint "$ID" 10
VICTIM=$(task_node 1)
kill_node "${VICTIM#h200-}"
echo "killed node $VICTIM (rank 1) after checkpoint 10"
wait_for_rerun "$ID"
check_recovery "$ID" "$VICTIM" 60 2 10
echo "all checks passed"
