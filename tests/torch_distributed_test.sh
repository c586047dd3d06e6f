#!/usr/bin/env bash
# A two-node, two-processes-per-node torch.distributed job (gloo, env://)
# submitted with the CLI to two agents on 127.0.0.2 and 127.0.0.3. Asserts
# that the four ranks see the right rank, world size, local rank and node
# rank, that an all-reduce sums their ranks and that DDP keeps them in sync.
# Needs Debian's python3-torch (scripts/setup.sh installs it) and runs with
# /usr/bin/python3. Usage: tests/torch_distributed_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/ddp.sh
PY=/usr/bin/python3
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  fail "$PY has no torch.distributed: install python3-torch (scripts/setup.sh does)"

write_cluster 2
start_server
start_agents 2
echo "ok: two agents registered"

# GLOO_SOCKET_IFNAME=lo keeps gloo on loopback, whatever the host name
# resolves to.
"$LOOM" run -g 2 --nodes 2 --procs-per-node 2 --name ddp --time-limit 5m \
  -e GLOO_SOCKET_IFNAME=lo --wait -- "$PY" "$PWD/tests/torch/ddp_check.py" \
  > "$W/run.out" 2>&1
rc=$?
check_ddp_run "$rc"
# The two tasks ran on two different nodes.
"$LOOM" show "$ID" -o json > "$W/show.json"
grep -q '"h200-0"' "$W/show.json" && grep -q '"h200-1"' "$W/show.json" ||
  fail "not spread over both nodes: $(cat "$W/show.json")"
echo "all checks passed"
