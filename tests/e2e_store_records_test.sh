#!/usr/bin/env bash
# Records that cannot be read never stop the server (issue 14.1): a spec
# just under the 1 MiB input limit, whose stored canonical form is longer,
# and a garbage record written into state.db both load; the server starts,
# says so in one structured line per unreadable record, and shows the
# garbage as a failed job whose bytes are kept under /quarantine/.
# Usage: tests/e2e_store_records_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
command -v python3 > /dev/null || fail "python3 not installed"

write_cluster 1
start_server
python3 -c '
import json
print(json.dumps({"name": "big", "command": ["true"], "env": {"A": "a" * 1048445}}))
' > "$W/big.json"
code=$(curl -s -o "$W/big.out" -w '%{http_code}' "${AUTH[@]}" -H 'Content-Type: application/json' \
  --data-binary @"$W/big.json" "$LOOM_SERVER/v1/jobs")
[ "$code" = 201 ] || fail "the 1 MiB spec was not accepted: $code $(head -c 300 "$W/big.out")"
kill "$SERVER"
wait "$SERVER" 2> /dev/null

# Garbage under the next job's key, as a bad disk or a hand edit would leave.
python3 - "$W/server/state.db" <<'PY' || fail "cannot write the garbage record"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
size = db.execute("select length(value) from kv where key = ?", (b"/jobs/00000000000000000001",)).fetchone()[0]
assert size > 1 << 20, size  # the stored form is over the input limit
db.execute("insert into kv (key, value, version) values (?, ?, 99)",
           (b"/jobs/00000000000000000002", b"{\"id\": 2, garbage"))
db.commit()
PY

start_server
grep -q '"event":"unreadable_record"' "$W/server.log" || fail "no log line for the unreadable record"
[ "$(grep -c '"event":"unreadable_record"' "$W/server.log")" = 1 ] || fail "not one line per record"
"$LOOM" show 1 -o json > "$W/job1.json" || fail "job 1 is not readable"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["state"] == "pending", j["state"]' \
  "$W/job1.json" || fail "the 1 MiB job did not load as it was"
"$LOOM" show 2 -o json > "$W/job2.json" || fail "job 2 is not shown"
python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["state"] == "failed", j["state"]
assert j["reason"].startswith("unreadable record: "), j["reason"]
' "$W/job2.json" || fail "job 2 is not a failed job with the reason: $(head -c 300 "$W/job2.json")"
echo "ok: the server starts with a 1 MiB record and a garbage one; job 2 is failed (unreadable record)"

# A new job gets a new id, and the next start is quiet.
"$LOOM" submit -f /dev/stdin > "$W/submit.out" 2>&1 <<'YAML' || fail "submit after the restart: $(cat "$W/submit.out")"
name: next
command: ["true"]
YAML
"$LOOM" show 3 > /dev/null 2>&1 || fail "the new job did not get id 3: $(cat "$W/submit.out")"
kill "$SERVER"
wait "$SERVER" 2> /dev/null
: > "$W/server.log"
start_server
if grep -q unreadable_record "$W/server.log"; then fail "the quarantined record is read again"; fi
echo "ok: ids are not reused and the quarantined record reads back quietly"
