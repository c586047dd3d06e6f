#!/usr/bin/env bash
# kill -9 of the server while four clients stream submissions into it: after
# a restart every acknowledged job is there under its id and name, no job is
# stored twice, nothing appears that no client sent, and every job still runs
# to completion. Usage: tests/e2e_kill9_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
PY=/usr/bin/python3
write_cluster 2
start_server
start_agents 2
echo "ok: two agents registered"

CLIENTS=4
PER_CLIENT=60
# Each client submits its jobs one after another, each under a name of its
# own (tests/lib/cluster.sh).
submit_streams "$CLIENTS" "$PER_CLIENT"
# Kill the server once a quarter of the jobs are in, while the rest stream.
for _ in $(seq 300); do
  [ "$(ack_count)" -ge $((CLIENTS * PER_CLIENT / 4)) ] && break
  sleep 0.02
done
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null
acked_at_kill=$(ack_count)
sleep 0.5
start_server
for p in "${CPIDS[@]}"; do wait "$p"; done
acked=$(ack_count)
failed=$(cat "$W"/fails.* 2>/dev/null | wc -l)
echo "killed after $acked_at_kill acks; $acked acknowledged, $failed refused while down"
[ "$acked_at_kill" -lt $((CLIENTS * PER_CLIENT)) ] || fail "the kill came after all submissions"
[ "$acked" -gt "$acked_at_kill" ] || fail "no submission was acknowledged after the restart"

# Every job reaches the end (the agents' tasks are `true`).
for _ in $(seq 600); do
  "$LOOM" queue --all -o json > "$W/queue.json" || fail "queue after restart"
  "$PY" - "$W/queue.json" <<'PYEOF' && break
import json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
sys.exit(0 if all(j["state"] in ("succeeded", "failed", "cancelled") for j in jobs) else 1)
PYEOF
  sleep 0.1
done
cat "$W"/acks.* > "$W/acks"
cat "$W"/fails.* > "$W/fails" 2>/dev/null || : > "$W/fails"
"$PY" - "$W/queue.json" "$W/acks" "$W/fails" <<'PYEOF' || fail "check failed"
import collections, json, sys
jobs = json.load(open(sys.argv[1]))["jobs"]
acks = [l.split() for l in open(sys.argv[2]) if l.strip()]
fails = {l.strip() for l in open(sys.argv[3]) if l.strip()}
by_id = collections.Counter(j["id"] for j in jobs)
by_name = collections.Counter(j["name"] for j in jobs)
errors = []
errors += [f"job {i} listed {n} times" for i, n in by_id.items() if n > 1]
errors += [f"name {m} stored {n} times" for m, n in by_name.items() if n > 1]
names = {j["id"]: j["name"] for j in jobs}
for i, name, _ in acks:
    if names.get(int(i)) != name:
        errors.append(f"acknowledged job {i} ({name}) is {names.get(int(i), 'missing')}")
acked_names = {name for _, name, _ in acks}
for j in jobs:
    if j["name"] not in acked_names and j["name"] not in fails:
        errors.append(f"job {j['id']} ({j['name']}) was never submitted")
stuck = [j["id"] for j in jobs if j["state"] != "succeeded"]
if stuck:
    errors.append(f"jobs not succeeded: {stuck[:10]}")
    for j in jobs:
        if j["state"] != "succeeded" and len(errors) < 30:
            errors.append(f"  job {j['id']}: {j['state']} ({j.get('reason', '')})")
print(f"{len(jobs)} jobs stored: {len(acks)} acknowledged, "
      f"{len(jobs) - len(acks)} of {len(fails)} unacknowledged attempts")
for e in errors[:20]:
    print("  " + e)
sys.exit(1 if errors else 0)
PYEOF
echo "ok: kill -9 during a submission stream lost and doubled nothing"
echo "all checks passed"
