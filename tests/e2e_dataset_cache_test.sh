#!/usr/bin/env bash
# The dataset cache at scale, end to end (docs/datasets.md, "The node's
# cache" and "Peers"): a cold store served by `rclone serve http` on loopback
# over a 2 GiB dataset (16 files of 128 MiB) and two small ones (8 files of
# 4 MiB), four emulated nodes whose agents have a 2100Mi cache budget (the big
# set and one small one, not two small ones besides), and 4-task jobs that
# print a content hash of the dataset at /data/set.
# - a 4-node job on the big set: the cold store serves each file once, the
#   three other nodes fill from their peer, every task sees the store's hash;
#   a second job: no cold-store requests, the same hash;
# - eviction: after a small set the cache holds both; the big set used again,
#   then another small set: the least recently used version (the first small
#   one, not the bigger one) is deleted from every node, which is within its
#   budget (du);
# - a truncated file in one node's copy: the next job fetches that file again,
#   only that one, and every task sees the right hash.
# Needs root (host tasks see the cache through a read-only bind mount); about
# 11 GB of disk at its peak, deleted on exit.
# Usage: tests/e2e_dataset_cache_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
[ "$(id -u)" = 0 ] || { echo "SKIP: datasets in host tasks need root (bind mounts)"; exit 0; }
command -v rclone > /dev/null || fail "rclone is not installed (scripts/setup.sh)"
START=$SECONDS
NODES=4
BUDGET=2100Mi
BUDGET_BYTES=$((2100 * 1024 * 1024))

# The content hash of a directory, the same in the tasks and here: a hash of
# each file's hash, in path order (openssl's SHA-256 where there is one: it
# is four times sha256sum's speed, and the tasks hash 8 GiB per job).
cat > "$W/hash.sh" <<'SH'
cd "$1" || exit 1
H=sha256sum
command -v openssl > /dev/null && H="openssl dgst -sha256 -r"
find . -type f | sort | xargs $H | sha256sum | cut -c1-16
SH

# The cold store: big/ (2 GiB), small1/ and small2/ (32 MiB each), all with
# the modification time of 2020-01-01 (a cold copy keeps it: rclone copy).
mkdir -p "$W/cold/big" "$W/cold/small1" "$W/cold/small2"
for i in $(seq -w 1 16); do
  head -c 128M /dev/urandom > "$W/cold/big/f$i.bin" || fail "cannot write the dataset"
done
# (The small sets' files have names of their own: a version is derived from
# the listing's paths, sizes and times only, not the source's name.)
for i in $(seq 1 8); do
  head -c 4M /dev/urandom > "$W/cold/small1/a$i.bin"
  head -c 4M /dev/urandom > "$W/cold/small2/b$i.bin"
done
find "$W/cold" -type f -exec touch -d '2020-01-01 00:00:00' {} +
want_of() { bash "$W/hash.sh" "$W/cold/$1"; }
WANT_BIG=$(want_of big); WANT_S1=$(want_of small1); WANT_S2=$(want_of small2)

COLD_PORT=$((PORT + 50))
rclone serve http "$W/cold" --addr "127.0.0.1:$COLD_PORT" --dir-cache-time 0s -vv >> "$W/cold.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$COLD_PORT/" > /dev/null && break; sleep 0.1; done
curl -sf "http://127.0.0.1:$COLD_PORT/" > /dev/null || fail "rclone serve did not start"
printf '[cold]\ntype = http\nurl = http://127.0.0.1:%s/\n' "$COLD_PORT" > "$W/rclone.conf"
# Files the cold store has served (one "Open" per GET of a file): all of
# them, those of one set, one file of a set.
served() { grep -c ': Open: flags=O_RDONLY' "$W/cold.log"; }
served_set() { grep -c " $1/[^ ]*: Open: flags=O_RDONLY" "$W/cold.log"; }
served_of() { grep -c " $1: Open: flags=O_RDONLY" "$W/cold.log"; }

write_cluster $NODES
# The 4 nodes under one leaf switch, as 4 nodes of a real leaf (16 or 32
# nodes) are: the cold store serves each version once per leaf
# (controller_datasets_test has a gang over two leaves).
sed -i 's/nodes_per_leaf: 2/nodes_per_leaf: 4/' "$W/cluster.yaml"
start_server --rclone-config "$W/rclone.conf"
AGENT_FLAGS=(--rclone-config "$W/rclone.conf" --dataset-cache-bytes "$BUDGET")
start_agents $NODES
cache_of() { echo "$W/agent$1/datasets"; }  # node I's cache (its --data-dir)

job_yaml() {  # SET: $W/SET.yaml, 4 tasks that hash cold:SET at /data/set
  cat > "$W/$1.yaml" <<YAML
name: hash-$1
tasks: $NODES
resources: {gpus_per_task: 8}
data: [{source: "cold:$1", mount: /data/set}]
command: ["/bin/sh", "$W/hash.sh", "/data/set"]
YAML
}
for s in big small1 small2; do job_yaml "$s"; done
run_job() {  # SET: sets JOB to the job's id once it succeeded
  JOB=$("$LOOM" submit -f "$W/$1.yaml" | grep -o '[0-9]*$') || fail "submit"
  wait_for 150 state_is "$JOB" succeeded || fail "job $JOB: $("$LOOM" show "$JOB")"
}
job_out() { "$LOOM" logs "$1" --task "$2" 2> /dev/null; }
version_of() { jget "$1" "j['events']" | grep -o 'version [0-9a-f]\{16\}' | head -1 | cut -d' ' -f2; }
# check_hashes JOB WANT: every task printed WANT.
check_hashes() {
  local t sum
  for t in $(seq 0 $((NODES - 1))); do
    sum=$(job_out "$1" "$t" | head -1)
    [ "$sum" = "$2" ] || fail "job $1 task $t saw '$sum', the store has '$2'"
  done
}
# The node each task of JOB ran on, task 0 first.
task_nodes() { jget "$1" "' '.join(t['node'] for t in j['placement']['tasks'])"; }
# complete_on I VERSION: node I has VERSION complete, every file its size.
complete_on() {
  local d
  d="$(cache_of "$1")/$2"
  [ -f "$d/complete" ] || return 1
  jq -r '.[] | "\(.path) \(.size)"' "$d/manifest.json" | while read -r p s; do
    [ "$(stat -c %s "$d/data/$p")" = "$s" ] || exit 1
  done
}
# Files of node I's copy of VERSION with the store's time (2020): cold copies.
store_times() { find "$(cache_of "$1")/$2/data" -type f ! -newermt 2020-01-02 | wc -l; }
cache_bytes() { du -sb "$(cache_of "$1")" | cut -f1; }
versions_on() { ls "$(cache_of "$1")" | tr '\n' ' '; }

# 1. The big set, twice.
run_job big; ID=$JOB
V_BIG=$(version_of "$ID")
[ -n "$V_BIG" ] || fail "no version in the job's events: $("$LOOM" show "$ID")"
check_hashes "$ID" "$WANT_BIG"
for i in $(seq -w 1 16); do
  [ "$(served_of "big/f$i.bin")" = 1 ] ||
    fail "the cold store served big/f$i.bin $(served_of "big/f$i.bin") times, want 1"
done
[ "$(served)" = 16 ] || fail "the cold store served $(served) files, want 16"
# Each file was read from the store once, yet four nodes hold it complete:
# three filled from a peer. The one that read the store is the first task's
# (fill_from_store): its copies have the store's times (rclone copy keeps
# them).
read -r -a NODES_OF <<< "$(task_nodes "$ID")"
[ "${#NODES_OF[@]}" = $NODES ] || fail "job $ID's task nodes: '${NODES_OF[*]}'"
FILLER=${NODES_OF[0]#h200-}
for i in $(seq 0 $((NODES - 1))); do
  complete_on "$i" "$V_BIG" || fail "node h200-$i has no complete copy of $V_BIG: $(versions_on "$i")"
  grep -q "dataset cold:big version $V_BIG ready" "$W/agent$i.log" ||
    fail "agent $i logged no ready dataset: $(grep -i dataset "$W/agent$i.log")"
done
[ "$(store_times "$FILLER" "$V_BIG")" = 16 ] ||
  fail "the first task's node h200-$FILLER has $(store_times "$FILLER" "$V_BIG") of 16 files with the store's times"
echo "ok: job $ID: 4 tasks saw version $V_BIG ($WANT_BIG); the cold store served each of 16 files once (to h200-$FILLER, the first task's node); the other 3 nodes filled from it"
grep -h "dataset cold:big version $V_BIG ready" "$W"/agent*.log | sed 's/^/    /'

run_job big; ID2=$JOB
[ "$(version_of "$ID2")" = "$V_BIG" ] || fail "second job's version: $(version_of "$ID2")"
check_hashes "$ID2" "$WANT_BIG"
[ "$(served)" = 16 ] || fail "the second job made $(( $(served) - 16 )) cold-store file requests"
echo "ok: job $ID2 started from the caches: no cold-store requests, the same hash"

# 2. Eviction. small1 fits beside the big set (2080Mi of 2100Mi): both kept.
run_job small1; ID3=$JOB
V_S1=$(version_of "$ID3")
check_hashes "$ID3" "$WANT_S1"
[ "$(served_set small1)" = 8 ] || fail "the cold store served $(served_set small1) small1 files, want 8"
for i in $(seq 0 $((NODES - 1))); do
  complete_on "$i" "$V_BIG" && complete_on "$i" "$V_S1" ||
    fail "node h200-$i does not hold both $V_BIG and $V_S1: $(versions_on "$i")"
done
echo "ok: job $ID3: small1 ($V_S1) beside the big set on every node, $(cache_bytes 0) bytes on h200-0"
# The big set again: it is now the most recently used; small1 the least.
run_job big; ID4=$JOB
check_hashes "$ID4" "$WANT_BIG"
[ "$(served)" = 24 ] || fail "the big set's third job made cold-store requests"
# small2 does not fit beside both: small1 goes, the big set stays.
run_job small2; ID5=$JOB
V_S2=$(version_of "$ID5")
check_hashes "$ID5" "$WANT_S2"
for i in $(seq 0 $((NODES - 1))); do
  [ ! -e "$(cache_of "$i")/$V_S1" ] ||
    fail "node h200-$i kept small1 ($V_S1), the least recently used: $(versions_on "$i")"
  complete_on "$i" "$V_BIG" || fail "node h200-$i lost the big set ($V_BIG), used after small1"
  complete_on "$i" "$V_S2" || fail "node h200-$i has no complete small2 ($V_S2)"
  b=$(cache_bytes "$i")
  [ "$b" -le "$BUDGET_BYTES" ] || fail "node h200-$i's cache is $b bytes, over its budget $BUDGET_BYTES"
  echo "    h200-$i: $(versions_on "$i")($b bytes of $BUDGET_BYTES)"
done
echo "ok: job $ID5: small2 ($V_S2) filled; small1 ($V_S1), the least recently used, deleted from every node; the big set kept; every cache within $BUDGET"

# 3. A truncated file in node h200-2's copy of small2: fetched again, only it.
T=2
DATA="$(cache_of $T)/$V_S2/data"
truncate -s 1000 "$DATA/b5.bin"
snapshot() { (cd "$DATA" && find . -type f | sort | xargs stat -c '%n %i %s %z'); }
snapshot > "$W/before.txt"
COLD_BEFORE=$(served); B5_BEFORE=$(served_of small2/b5.bin)
run_job small2; ID6=$JOB
[ "$(version_of "$ID6")" = "$V_S2" ] || fail "job $ID6's version: $(version_of "$ID6")"
check_hashes "$ID6" "$WANT_S2"
complete_on $T "$V_S2" || fail "h200-$T's small2 is not complete again"
snapshot > "$W/after.txt"
CHANGED=$(diff "$W/before.txt" "$W/after.txt" | grep '^>' | cut -d' ' -f2 | tr '\n' ' ')
[ "$CHANGED" = "./b5.bin " ] ||
  fail "files of h200-$T's copy changed by job $ID6: '$CHANGED' (want ./b5.bin): $(diff "$W/before.txt" "$W/after.txt")"
NEW_COLD=$(( $(served) - COLD_BEFORE )); NEW_B5=$(( $(served_of small2/b5.bin) - B5_BEFORE ))
[ "$NEW_COLD" = "$NEW_B5" ] && [ "$NEW_COLD" -le 1 ] ||
  fail "job $ID6 made $NEW_COLD cold-store requests ($NEW_B5 of b5.bin), want at most one, of b5.bin"
FROM="a peer"; [ "$NEW_COLD" = 1 ] && FROM="the cold store"
echo "ok: job $ID6: the truncated b5.bin on h200-$T was fetched again (from $FROM), no other file; every task saw $WANT_S2"

AT_END=$(du -sb "$W" | cut -f1)
echo "PASS ($((SECONDS - START)) s; $AT_END bytes in the scratch dir at the end)"
