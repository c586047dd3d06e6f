# Shared by the torch.distributed tests: the checks of a run of
# tests/torch/ddp_check.py on two nodes x two processes. Needs LOOM, W and
# `fail` (tests/lib/cluster.sh).

# check_ddp_run RC: the job whose id `loom run` wrote to $W/run.out ended
# with RC 0 and its four ranks printed the right contract, all-reduce and
# DDP line (ranks 0,1 on node 0 at 127.0.0.2, 2,3 on node 1). Sets ID.
check_ddp_run() {
  local rc=$1 t p r
  ID=$(grep -o 'submitted job [0-9]*' "$W/run.out" | grep -o '[0-9]*$')
  [ -n "$ID" ] || fail "no job id: $(cat "$W/run.out")"
  for t in 0 1; do
    for p in 0 1; do
      "$LOOM" logs "$ID" --task $t --process $p >> "$W/ranks.out" 2>&1
      "$LOOM" logs "$ID" --task $t --process $p --stderr >> "$W/stderr.out" 2>&1
    done
  done
  [ "$rc" = 0 ] || fail "job failed (rc=$rc): $(cat "$W/run.out" "$W/ranks.out" "$W/stderr.out")"
  cat "$W/ranks.out"
  for t in 0 1; do
    for p in 0 1; do
      r=$((t * 2 + p))
      grep -q "^rank=$r world=4 local_rank=$p local_world=2 node_rank=$t master=127.0.0.2 rank_sum=6 ddp_in_sync=True$" "$W/ranks.out" ||
        fail "rank $r line missing or wrong: $(cat "$W/ranks.out" "$W/stderr.out")"
    done
  done
}
