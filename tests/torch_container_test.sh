#!/usr/bin/env bash
# torch.distributed in a container image (docs/images.md): the image is made
# here from the host's own Python and torch (tests/torch/host_python_image.py,
# no network) over busybox, pushed to a loopback registry; a job of two
# nodes x two processes runs tests/torch/ddp_check.py in it (gloo, env://)
# and every rank checks the contract, an all-reduce and DDP, as
# tests/torch_distributed_test.sh does for host processes. Then the
# checkpoint-restart path of tests/torch_recovery_test.sh in the image: a
# job of two nodes x two processes runs tests/torch/ckpt_train.py, which
# reports its checkpoints with the server's HTTP API (the image has no loom
# binary); once it has saved one, the node of its task 1 dies (agent and
# task processes, the container's included); the job is requeued and runs
# again, in the image, on two other nodes that already hold it (no pull),
# from the checkpoint, and succeeds; recovery within 30 s.
# Usage: tests/torch_container_test.sh PATH_TO_LOOM   (root; python3-torch)
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/ddp.sh
source tests/lib/registry.sh
source tests/lib/recovery.sh
PY=/usr/bin/python3
[ "$(id -u)" = 0 ] || { echo "SKIP: container tasks need root (runc)"; exit 0; }
"$PY" -c "import torch.distributed as d; assert d.is_available()" 2>/dev/null ||
  fail "$PY has no torch.distributed: install python3-torch (scripts/setup.sh does)"

start_registry
t0=$(date +%s)
"$PY" tests/torch/host_python_image.py "$W/pyroot" > "$W/image.out" 2>&1 ||
  fail "host_python_image.py: $(cat "$W/image.out")"
mkdir -p "$W/pyroot/app"
cp tests/torch/ddp_check.py tests/torch/ckpt_train.py "$W/pyroot/app/"
DIGEST=$(push_busybox_image test/torch:1 "$W/pyroot") || fail "push the image"
echo "ok: test/torch:1 ($(cat "$W/image.out"), $DIGEST) built and pushed in $(($(date +%s) - t0)) s"

# Three nodes; the third agent joins for the recovery part. The job resumes
# on other nodes: a checkpoint root they all share (one host here).
write_cluster 3
start_server --insecure-registry "$REG" --checkpoint-root "$W/checkpoints"
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

# The checkpoint-restart path in the image. h200-1 is cordoned while the job
# starts, so that run 0 runs on h200-0 (which holds the image) and h200-2
# (which pulls it); once its task 1's node is killed, run 1 can only go to
# the other two, which both hold the image.
[ -e /app/ckpt_train.py ] && fail "the host has /app/ckpt_train.py: the test cannot tell the image's from it"
nodes_up() { [ "$("$LOOM" nodes -o json 2>/dev/null | grep -c '"up"')" = "$1" ]; }
launch_agent 2
wait_for 10 nodes_up 3 || fail "agent 2 did not register"
"$LOOM" cordon h200-1 > /dev/null || fail "cordon h200-1"
cat > "$W/ckpt.yaml" <<YAML
name: ddp-ckpt
resources: {gpus: 4, nodes: 2, processes_per_task: 2}
container: {image: $REG/test/torch:1}
command: [/usr/bin/python3, /app/ckpt_train.py, --steps, "30", --every, "5", --http]
env: {GLOO_SOCKET_IFNAME: lo}
restart: {max: 2, backoff: 1s}
time_limit: 5m
YAML
LAYERS=$(skopeo inspect --raw --tls-verify=false "docker://$REG/test/torch:1" | jq -r '.layers[].digest')
[ -n "$LAYERS" ] || fail "no layers in test/torch:1"
t0=$(date +%s)
BEFORE=$(wc -l < "$W/registry.log")
ID=$("$LOOM" submit -f "$W/ckpt.yaml" | grep -o '[0-9]*$') || fail "submit"
wait_for_checkpoint "$ID" 10
"$LOOM" uncordon h200-1 > /dev/null || fail "uncordon h200-1"
VICTIM=$(task_node 1)
AT_KILL=$(wc -l < "$W/registry.log")
kill_node "${VICTIM#h200-}"
echo "ok: run 0 on $(task_node 0) and $VICTIM reported checkpoint 10 over HTTP; killed $VICTIM (ranks 2, 3)"
wait_for_rerun "$ID"
check_recovery "$ID" "$VICTIM" 30 4 10
# Every rank of run 1 resumed from that checkpoint: the last one's too.
R=$(sed -n 's/^start run=1 rank=0 world=4 resumed_from=\([0-9]*\)$/\1/p' "$W/run1.out")
"$LOOM" logs "$ID" --task 1 --process 1 | grep -qx "start run=1 rank=3 world=4 resumed_from=$R" ||
  fail "rank 3 of run 1 did not resume from step $R: $("$LOOM" logs "$ID" --task 1 --process 1)"
ls "$W"/checkpoints/*/ckpt.pt > /dev/null 2>&1 ||
  fail "the container wrote no checkpoint into the checkpoint root: $(find "$W/checkpoints")"
# From the submission on, each layer was fetched once, by h200-2: run 0's
# h200-0 and both nodes of run 1 held the image.
sed -n "$((BEFORE + 1)),${AT_KILL}p" "$W/registry.log" > "$W/pulls0.log"
tail -n +"$((AT_KILL + 1))" "$W/registry.log" > "$W/pulls1.log"
for layer in $LAYERS; do
  n=$(grep -c "\"GET /v2/test/torch/blobs/$layer " "$W/pulls0.log")
  [ "$n" = 1 ] || fail "run 0: layer $layer fetched $n times (once: by h200-2 only)"
done
grep "/v2/test/torch/" "$W/pulls1.log" && fail "run 1 asked the registry again (both its nodes held the image)"
echo "ok: in the image, the job came back from its checkpoint on two other nodes, which did not pull it again, in $(($(date +%s) - t0)) s"
echo "all checks passed"
