#!/usr/bin/env bash
# Datasets end to end (docs/datasets.md): a cold store served by
# `rclone serve http` on loopback over a directory of a few small files, two
# emulated nodes, and jobs that read the dataset at /data/set.
# - a 2-node job: the cold store serves each file once (one node fills from
#   it, the other from its peer), both tasks see the same version and files;
# - a second job on those nodes: no cold-store requests at all;
# - a changed source: a new version;
# - a named dataset (`loom dataset add`): a spec names it; `loom dataset
#   list` and /metrics count its hits and fills;
# - a remote that gives checksums: each copied file's md5 is checked;
# - prefetch: a gang reserved behind a running job has its new version
#   filled on its nodes ahead of it (one cold read for the leaf), counted as
#   prefetches, and starts with hits;
# - the cold store stopped: the job waits, saying why, the nodes stay up.
# Needs root (host tasks see the cache through a read-only bind mount).
# Usage: tests/e2e_dataset_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
[ "$(id -u)" = 0 ] || { echo "SKIP: datasets in host tasks need root (bind mounts)"; exit 0; }
command -v rclone > /dev/null || fail "rclone is not installed (scripts/setup.sh)"

# The cold store: a few files, about 3 MB.
mkdir -p "$W/cold/set/sub"
head -c 1500000 /dev/urandom > "$W/cold/set/a.bin"
head -c 1000000 /dev/urandom > "$W/cold/set/sub/b.bin"
head -c 500000 /dev/urandom > "$W/cold/set/c.bin"
COLD_PORT=$((PORT + 50))
start_cold() {
  rclone serve http "$W/cold" --addr "127.0.0.1:$COLD_PORT" --dir-cache-time 0s -vv >> "$W/cold.log" 2>&1 &
  COLD=$!
  PIDS+=($COLD)
  for _ in $(seq 50); do curl -sf "http://127.0.0.1:$COLD_PORT/" > /dev/null && return 0; sleep 0.1; done
  fail "rclone serve did not start"
}
start_cold
printf '[cold]\ntype = http\nurl = http://127.0.0.1:%s/\n' "$COLD_PORT" > "$W/rclone.conf"
# Files the cold store has served so far (one "Open" per GET of a file).
served() { grep -c ': Open: flags=O_RDONLY' "$W/cold.log"; }
served_of() { grep -c "set/$1: Open: flags=O_RDONLY" "$W/cold.log"; }

write_cluster 2
start_server --rclone-config "$W/rclone.conf"
AGENT_FLAGS=(--rclone-config "$W/rclone.conf" --dataset-cache-bytes 64Mi)
start_agents 2

cat > "$W/job.yaml" <<'YAML'
name: reader
tasks: 2
resources: {gpus_per_task: 8}
data: [{source: "cold:set", mount: /data/set}]
command: ["/bin/sh", "-c", "cd /data/set && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16 && (touch /data/set/x 2>/dev/null && echo WRITABLE || echo read-only)"]
YAML
run_job() {
  local id
  id=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
  wait_for 60 state_is "$id" succeeded || fail "job $id: $("$LOOM" show "$id")"
  echo "$id"
}
job_out() {  # JOB TASK: the task's stdout
  "$LOOM" logs "$1" --task "$2" 2> /dev/null
}
version_of() { jget "$1" "j['events']" | grep -o 'version [0-9a-f]\{16\}' | head -1 | cut -d' ' -f2; }

ID=$(run_job)
V1=$(version_of "$ID")
[ -n "$V1" ] || fail "no version in the job's events: $("$LOOM" show "$ID")"
SUM0=$(job_out "$ID" 0 | head -1); SUM1=$(job_out "$ID" 1 | head -1)
WANT=$(cd "$W/cold/set" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)
[ "$SUM0" = "$WANT" ] && [ "$SUM1" = "$WANT" ] ||
  fail "tasks saw '$SUM0' and '$SUM1', the store has '$WANT'"
job_out "$ID" 0 | grep -q '^read-only$' || fail "the mount is writable: $(job_out "$ID" 0)"
for f in a.bin sub/b.bin c.bin; do
  [ "$(served_of "$f")" = 1 ] || fail "the cold store served $f $(served_of "$f") times, want 1"
done
echo "ok: job $ID: both tasks saw version $V1 ($SUM0); the cold store served each file once"

BEFORE=$(served)
ID2=$(run_job)
[ "$(version_of "$ID2")" = "$V1" ] || fail "second job's version: $(version_of "$ID2")"
[ "$(served)" = "$BEFORE" ] || fail "the second job made $(( $(served) - BEFORE )) cold-store file requests"
[ "$(job_out "$ID2" 1 | head -1)" = "$WANT" ] || fail "second job saw other files"
echo "ok: job $ID2 started from the cache: no cold-store requests"

# A changed source is a new version.
head -c 1000 /dev/urandom > "$W/cold/set/d.bin"
ID3=$(run_job)
V3=$(version_of "$ID3")
[ -n "$V3" ] && [ "$V3" != "$V1" ] || fail "changed source: version $V3, first $V1"
[ "$(served_of d.bin)" = 1 ] || fail "the new file was served $(served_of d.bin) times"
echo "ok: the changed source is version $V3"

# A named dataset: a spec names it, the source comes from the server.
"$LOOM" dataset add set cold:set --description "three files" > /dev/null || fail "dataset add"
"$LOOM" dataset add set cold:other > /dev/null 2>&1 && fail "a second 'set' was accepted"
cat > "$W/named.yaml" <<'YAML'
name: named
tasks: 2
resources: {gpus_per_task: 8}
data: [{dataset: set}]
command: ["/bin/sh", "-c", "cd /data/set && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16"]
YAML
sed 's/dataset: set/dataset: nope/' "$W/named.yaml" > "$W/nope.yaml"
"$LOOM" submit -f "$W/nope.yaml" > "$W/nope.out" 2>&1 && fail "a job naming an unknown dataset was accepted"
grep -q "data\[0\].dataset: no dataset named 'nope'" "$W/nope.out" || fail "unknown dataset: $(cat "$W/nope.out")"
BEFORE=$(served)
ID5=$("$LOOM" submit -f "$W/named.yaml" | grep -o '[0-9]*$') || fail "submit named"
wait_for 60 state_is "$ID5" succeeded || fail "job $ID5: $("$LOOM" show "$ID5")"
[ "$(version_of "$ID5")" = "$V3" ] || fail "named job's version $(version_of "$ID5"), want $V3"
[ "$(served)" = "$BEFORE" ] || fail "the named job read the cold store"
WANT3=$(cd "$W/cold/set" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)
[ "$(job_out "$ID5" 0 | head -1)" = "$WANT3" ] || fail "named job saw $(job_out "$ID5" 0)"
# What the fills took: per dataset in `loom dataset list` and /metrics.
LIST=$("$LOOM" dataset list -o json)
use_of() { echo "$LIST" | python3 -c "import json,sys; d=[x for x in json.load(sys.stdin)['datasets'] if x['$1']=='$2' and ('$1'=='name' or not x['name'])][0]['use']; print(d['$3'])"; }
[ "$(use_of name set starts)" = 2 ] || fail "set: $(echo "$LIST")"
[ "$(use_of name set hit_ratio)" = 1.0 ] || fail "set's hit ratio: $(echo "$LIST")"
[ "$(use_of source cold:set cold_bytes)" -gt 0 ] || fail "cold:set cold bytes: $(echo "$LIST")"
[ "$(use_of source cold:set peer_bytes)" -gt 0 ] || fail "cold:set peer bytes: $(echo "$LIST")"
"$LOOM" datasets | grep -E '^set +cold:set +[0-9a-f]{16} +2 +2 +100%' > /dev/null || fail "loom datasets: $("$LOOM" datasets)"
METRICS=$(curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics")
echo "$METRICS" | grep -q '^loom_dataset_read_bytes_total{dataset="set",from="cache"} [1-9]' ||
  fail "metrics: $(echo "$METRICS" | grep loom_dataset)"
echo "$METRICS" | grep -q '^loom_dataset_task_starts_total{dataset="cold:set",result="fill"} [1-9]' ||
  fail "metrics: $(echo "$METRICS" | grep loom_dataset)"
"$LOOM" dataset rm set > /dev/null || fail "dataset rm"
# Its use stays listed under its name, marked removed.
"$LOOM" dataset list -o json | python3 -c "import json,sys; d=[x for x in json.load(sys.stdin)['datasets'] if x['name']=='set']; sys.exit(0 if len(d)==1 and d[0].get('removed') else 1)" ||
  fail "after rm: $("$LOOM" dataset list -o json)"
echo "ok: named dataset: job $ID5 from the cache; hit ratio 1.0 in loom dataset list and /metrics"

# A remote that gives checksums (an rclone alias of a local directory: md5
# and sha1): every copied file is checked.
printf '[sums]\ntype = alias\nremote = %s\n' "$W/cold" >> "$W/rclone.conf"
sed 's/cold:set/sums:set/' "$W/job.yaml" > "$W/sums.yaml"
ID6=$("$LOOM" submit -f "$W/sums.yaml" | grep -o '[0-9]*$') || fail "submit sums"
wait_for 60 state_is "$ID6" succeeded || fail "job $ID6: $("$LOOM" show "$ID6")"
[ "$(job_out "$ID6" 1 | head -1)" = "$WANT3" ] || fail "sums job saw $(job_out "$ID6" 1)"
CHECKED=$(cat "$W"/agent*.log | grep "dataset sums:set" | grep -c "4 checksums checked")
[ "$CHECKED" = 2 ] || fail "nodes that checked 4 checksums: $CHECKED: $(grep -h 'dataset sums:set' "$W"/agent*.log)"
echo "ok: job $ID6: both nodes checked the md5 of the 4 files they copied"

# Prefetch: a new version; a job holds one node, so the 2-node reader gets
# a reservation on both, and the nodes fill the version ahead of it. What
# they copied is counted as prefetches; the reader's tasks then start with
# the version whole (hits).
head -c 300000 /dev/urandom > "$W/cold/set/e.bin"
cat > "$W/hold.yaml" <<'YAML'
name: hold
tasks: 1
resources: {gpus_per_task: 8}
time_limit: 120s
command: ["sleep", "120"]
YAML
IDH=$("$LOOM" submit -f "$W/hold.yaml" | grep -o '[0-9]*$') || fail "submit hold"
wait_for 30 state_is "$IDH" running || fail "job $IDH: $("$LOOM" show "$IDH")"
ID7=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
dataset_use() { "$LOOM" dataset list -o json | python3 -c "import json,sys; print([x for x in json.load(sys.stdin)['datasets'] if x['source']=='cold:set' and not x['name']][0]['use'].get('$1', 0))"; }
STARTS=$(dataset_use starts); HITS=$(dataset_use hits)
prefetched() { [ "$(dataset_use prefetches)" = 2 ]; }
wait_for 30 prefetched || fail "prefetches: $("$LOOM" dataset list -o json); job $ID7: $("$LOOM" show "$ID7")"
"$LOOM" show "$ID7" | grep -q "prefetching dataset cold:set" || fail "no prefetch event: $("$LOOM" show "$ID7")"
[ "$(dataset_use prefetch_cold_bytes)" -gt 0 ] || fail "prefetch cold bytes: $("$LOOM" dataset list -o json)"
[ "$(dataset_use prefetch_peer_bytes)" -gt 0 ] || fail "prefetch peer bytes: $("$LOOM" dataset list -o json)"
# One cold read for the leaf: one node filled from the store, the other from it.
[ "$(served_of e.bin)" = 1 ] || fail "the cold store served e.bin $(served_of e.bin) times for the prefetches"
"$LOOM" cancel "$IDH" > /dev/null || fail "cancel $IDH"
wait_for 60 state_is "$ID7" succeeded || fail "job $ID7: $("$LOOM" show "$ID7")"
[ "$(dataset_use starts)" = $((STARTS + 2)) ] && [ "$(dataset_use hits)" = $((HITS + 2)) ] ||
  fail "job $ID7's starts were not hits: $("$LOOM" dataset list -o json)"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" | grep -q '^loom_dataset_prefetches_total{dataset="cold:set"} 2' ||
  fail "metrics: $(curl -sf "${AUTH[@]}" "$LOOM_SERVER/metrics" | grep loom_dataset_prefetch)"
echo "ok: prefetch: both reserved nodes filled the new version ahead of job $ID7 (one from the cold store, one from it; 2 prefetches counted), whose tasks then found it whole"

# The cold store down: the job waits with that reason; the nodes stay up.
kill "$COLD"; wait "$COLD" 2> /dev/null
ID4=$("$LOOM" submit -f "$W/job.yaml" | grep -o '[0-9]*$') || fail "submit"
unreachable() { "$LOOM" show "$ID4" | grep -q "dataset cold:set: cold store unreachable"; }
wait_for 20 unreachable || fail "reason: $("$LOOM" show "$ID4")"
state_is "$ID4" pending || fail "job $ID4 is not pending: $("$LOOM" show "$ID4")"
[ "$("$LOOM" nodes -o json | grep -c '"up"')" = 2 ] || fail "nodes: $("$LOOM" nodes)"
echo "ok: cold store down: job $ID4 pending: $("$LOOM" show "$ID4" | grep -m1 'cold store unreachable')"
# Back: it runs.
start_cold
wait_for 60 state_is "$ID4" succeeded || fail "job $ID4 after the store came back: $("$LOOM" show "$ID4")"
"$LOOM" cancel "$ID4" > /dev/null 2>&1
echo "PASS"
