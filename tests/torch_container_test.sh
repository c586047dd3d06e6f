#!/usr/bin/env bash
# torch.distributed in a container image (docs/images.md): the image is made
# here from the host's own Python and torch (tests/torch/host_python_image.py,
# no network) over busybox, pushed to a loopback registry; a job of two
# nodes x two processes runs tests/torch/ddp_check.py in it (gloo, env://)
# and every rank checks the contract, an all-reduce and DDP, as
# tests/torch_distributed_test.sh does for host processes.
# Usage: tests/torch_container_test.sh PATH_TO_LOOM   (root; python3-torch)
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/ddp.sh
source tests/lib/registry.sh
PY=/usr/bin/python3
[ "$(id -u)" = 0 ] || { echo "SKIP: container tasks need root (runc)"; exit 0; }
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  fail "$PY has no torch.distributed: install python3-torch (scripts/setup.sh does)"

start_registry
t0=$(date +%s)
"$PY" tests/torch/host_python_image.py "$W/pyroot" > "$W/image.out" 2>&1 ||
  fail "host_python_image.py: $(cat "$W/image.out")"
mkdir -p "$W/pyroot/app"
cp tests/torch/ddp_check.py "$W/pyroot/app/"
DIGEST=$(push_busybox_image test/torch:1 "$W/pyroot") || fail "push the image"
echo "ok: test/torch:1 ($(cat "$W/image.out"), $DIGEST) built and pushed in $(($(date +%s) - t0)) s"

write_cluster 2
start_server --insecure-registry "$REG"
AGENT_FLAGS=(--insecure-registry "$REG")
start_agents 2

t0=$(date +%s)
"$LOOM" run -g 2 --nodes 2 --procs-per-node 2 --name ddp --time-limit 5m \
  --image "$REG/test/torch:1" -e GLOO_SOCKET_IFNAME=lo --wait -- \
  /usr/bin/python3 /app/ddp_check.py > "$W/run.out" 2>&1
rc=$?
check_ddp_run "$rc"
"$LOOM" show "$ID" | grep -q "$DIGEST" || fail "loom show has no digest"
echo "ok: 2 nodes x 2 processes of torch.distributed (gloo) in the image, pulls and run in $(($(date +%s) - t0)) s"
echo "all checks passed"
