#!/usr/bin/env bash
# Datasets, measured (issue 23 must-show 3; bench/README.md, "Datasets"): a
# job's start with a cold fill against a warm cache, and the fill's
# throughput against `rclone copy` of the same data as the reference. A cold
# store served by `rclone serve http` on loopback over DATA_FILES (default
# 16) files of DATA_MB MB in all (default 1024), a real server and
# DATA_NODES (default 2) emulated nodes under one leaf switch. DATA_TRIALS
# (default 3) times: a fresh version of the dataset (one file rewritten), a
# job of one task per node that reads it (the first node fills from the
# cold store, the others from it: the cold fill), then
# the same job again (both caches warm). Times are submit -> the job
# succeeded, as `loom` polls it (0.1 s). The reference: `rclone copy` of the
# whole dataset into an empty directory with the agent's settings
# (--transfers 8). Needs root (host tasks see the cache through a bind
# mount). Usage: bench/datasets.sh [LOOM_BINARY]
set -u
LOOM="$(realpath "${1:-build/src/loom/cli/loom}")"
cd "$(dirname "$0")/.."
[ -x "$LOOM" ] || { echo "no loom binary at $LOOM (build it first)"; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root (bind mounts of the cache)"; exit 2; }
command -v rclone > /dev/null || { echo "rclone is not installed (scripts/setup.sh)"; exit 2; }
source tests/lib/cluster.sh
DATA_MB=${DATA_MB:-1024}
DATA_FILES=${DATA_FILES:-16}
DATA_TRIALS=${DATA_TRIALS:-3}
DATA_NODES=${DATA_NODES:-2}

mkdir -p "$W/cold/set"
per=$((DATA_MB * 1000000 / DATA_FILES))
for i in $(seq "$DATA_FILES"); do
  head -c "$per" /dev/urandom > "$W/cold/set/part-$i.bin"
done
COLD_PORT=$((PORT + 50))
rclone serve http "$W/cold" --addr "127.0.0.1:$COLD_PORT" --dir-cache-time 0s >> "$W/cold.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$COLD_PORT/" > /dev/null && break; sleep 0.1; done
printf '[cold]\ntype = http\nurl = http://127.0.0.1:%s/\n' "$COLD_PORT" > "$W/rclone.conf"

write_cluster "$DATA_NODES"
sed -i "s/nodes_per_leaf: 2/nodes_per_leaf: $DATA_NODES/" "$W/cluster.yaml"
start_server --rclone-config "$W/rclone.conf"
AGENT_FLAGS=(--rclone-config "$W/rclone.conf" --dataset-cache-bytes $((DATA_MB * 4))Mi)
start_agents "$DATA_NODES"

cat > "$W/job.yaml" <<YAML
name: reader
tasks: $DATA_NODES
resources: {gpus_per_task: 8}
data: [{source: "cold:set", mount: /data/set}]
command: ["/bin/sh", "-c", "ls /data/set > /dev/null"]
YAML
calc() { python3 -c "print($1)"; }
# run_job: seconds from submit to succeeded.
run_job() {
  local t0 id
  t0=$(date +%s.%N)
  id=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
  wait_for 600 state_is "$id" succeeded || fail "job $id: $("$LOOM" show "$id")"
  calc "$(date +%s.%N) - $t0"
}

echo "dataset: $DATA_FILES files, $DATA_MB MB; $DATA_NODES nodes; $DATA_TRIALS trials"
printf '%-6s %10s %10s %10s %14s\n' trial cold_s warm_s fill_s fill_MB/s
COLD=() WARM=()
for trial in $(seq "$DATA_TRIALS"); do
  # A new version: one file rewritten (the others are cached already only
  # under the old version: a version is filled whole).
  head -c "$per" /dev/urandom > "$W/cold/set/part-1.bin"
  c=$(run_job)
  w=$(run_job)
  COLD+=("$c"); WARM+=("$w")
  fill=$(calc "$c - $w")
  printf '%-6s %10.2f %10.2f %10.2f %14.1f\n' "$trial" "$c" "$w" "$fill" \
    "$(calc "$DATA_MB / $fill")"
done
t0=$(date +%s.%N)
rclone copy --config "$W/rclone.conf" --transfers 8 cold:set "$W/reference" 2>> "$W/rclone-copy.log" ||
  fail "rclone copy: $(tail -3 "$W/rclone-copy.log")"
ref=$(calc "$(date +%s.%N) - $t0")
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mc=$(median "${COLD[@]}"); mw=$(median "${WARM[@]}")
printf 'median: cold start %.2f s, warm start %.2f s, fill %.2f s (%.1f MB/s for %d nodes)\n' \
  "$mc" "$mw" "$(calc "$mc - $mw")" "$(calc "$DATA_MB / ($mc - $mw)")" "$DATA_NODES"
printf 'reference: rclone copy --transfers 8 of the same %d MB: %.2f s (%.1f MB/s)\n' \
  "$DATA_MB" "$ref" "$(calc "$DATA_MB / $ref")"
echo "all ok"
