#!/usr/bin/env bash
# Job dependencies end to end (docs/scheduling.md, "Dependencies"): one
# emulated 8-GPU node and a chain A -> B (afterok:A) -> C (afternotok:B),
# with D (afterok:B, --kill-on-invalid-dep) cancelled once B fails. B waits,
# saying for what, while A runs on a node with room to spare, and starts only
# after A succeeded; the server is killed and started again while B and C
# wait, and they still do.
# Usage: tests/e2e_dependency_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
write_cluster 1
start_server
start_agents 1

job_id() { grep -o 'job [0-9]*' | head -1 | grep -o '[0-9]*$'; }
reason_has() { jget "$1" "j['reason']" | grep -qF "$2"; }

A=$("$LOOM" run -g 1 --name dep-a -- sleep 6 | job_id) || fail "submit A"
B=$("$LOOM" run -g 1 --name dep-b -d "afterok:$A" -- sh -c 'exit 4' | job_id) ||
  fail "submit B"
C=$("$LOOM" run -g 1 --name dep-c --dependency "afternotok:$B" -- true | job_id) ||
  fail "submit C"
D=$("$LOOM" run -g 1 --name dep-d -d "afterok:$B" --kill-on-invalid-dep -- true | job_id) ||
  fail "submit D"

wait_for 10 state_is "$A" running || fail "job $A did not start"
wait_for 10 reason_has "$B" "waiting for job $A (running) to succeed" ||
  fail "reason of job $B: $(jget "$B" "j['reason']")"
state_is "$B" pending || fail "job $B is $(jget "$B" "j['state']") while $A runs"
reason_has "$C" "waiting for job $B (pending) to fail" ||
  fail "reason of job $C: $(jget "$C" "j['reason']")"
[ "$(jget "$B" "j['dependency']")" = "afterok:$A" ] ||
  fail "job $B shows dependency '$(jget "$B" "j['dependency']")'"
"$LOOM" show "$B" > "$W/show.out" || fail "loom show"
grep -q "Dependency: *afterok:$A" "$W/show.out" || fail "loom show: $(cat "$W/show.out")"
"$LOOM" queue > "$W/queue.out" || fail "loom queue"
grep -q "waiting for job $A (running) to succeed" "$W/queue.out" ||
  fail "loom queue: $(cat "$W/queue.out")"
echo "ok: B waits for A: $(jget "$B" "j['reason']")"

# A restart of the server (kill -9) while B and C wait: they still wait.
kill -9 "$SERVER"
wait "$SERVER" 2>/dev/null
start_server
wait_for 10 reason_has "$B" "waiting for job $A (running) to succeed" ||
  fail "after the restart, reason of job $B: $(jget "$B" "j['reason']")"
state_is "$C" pending || fail "after the restart, job $C is $(jget "$C" "j['state']")"
echo "ok: after a server restart B still waits: $(jget "$B" "j['reason']")"

wait_for 20 state_is "$A" succeeded || fail "job $A is $(jget "$A" "j['state']")"
wait_for 20 state_is "$B" failed || fail "job $B is $(jget "$B" "j['state']")"
python3 - "$(jget "$A" "j['end_time']")" "$(jget "$B" "j['start_time']")" <<'PY' ||
import sys
a_end, b_start = sys.argv[1], sys.argv[2]
sys.exit(0 if b_start >= a_end else 1)
PY
  fail "job $B started before job $A ended"
echo "ok: B ran after A succeeded, and failed"

wait_for 20 state_is "$C" succeeded || fail "job $C is $(jget "$C" "j['state']"): $(jget "$C" "j['reason']")"
echo "ok: C (afternotok) ran after B failed"
wait_for 10 state_is "$D" cancelled || fail "job $D is $(jget "$D" "j['state']")"
reason_has "$D" "dependency never satisfied: job $B failed (afterok)" ||
  fail "reason of job $D: $(jget "$D" "j['reason']")"
echo "ok: D (afterok, --kill-on-invalid-dep) was cancelled: $(jget "$D" "j['reason']")"

# An unknown job is refused by the server (exit 1), bad syntax by the CLI (2).
"$LOOM" run -g 1 -d afterok:9999 -- true > "$W/unknown.out" 2>&1
[ $? = 1 ] || fail "a dependency on an unknown job: $(cat "$W/unknown.out")"
grep -q "there is no job 9999" "$W/unknown.out" || fail "unknown job: $(cat "$W/unknown.out")"
"$LOOM" run -g 1 -d afterok:x -- true > "$W/bad.out" 2>&1
[ $? = 2 ] || fail "a bad --dependency: $(cat "$W/bad.out")"
grep -q -- "--dependency: 'afterok:x': job ids are numbers" "$W/bad.out" ||
  fail "bad --dependency: $(cat "$W/bad.out")"
echo "ok: unknown jobs and bad syntax are refused"
echo "PASS"
