#!/usr/bin/env bash
# Job arrays end to end (docs/scheduling.md, "Arrays"): one `loom run
# --array 0-999%10` on two emulated 8-GPU nodes (16 GPUs, so only the %10
# holds the elements back). Every element records its index and how many
# elements were running when it started (each keeps a file in run/ while it
# runs): never more than 10, every index exactly once, all succeed. Pending
# elements show collapsed in `loom queue`; a second array has one element
# cancelled before it exists, then the rest, running ones included.
# Usage: tests/e2e_array_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
write_cluster 2
start_server
start_agents 2

job_id() { grep -o 'job [0-9]*' | head -1 | grep -o '[0-9]*$'; }
mkdir -p "$W/run" "$W/out"
chmod 777 "$W/run" "$W/out"

ELEMENT='i=$LOOM_ARRAY_TASK_ID; touch "$0/run/$i"; n=$(ls "$0/run" | wc -l);
echo "$i $n $LOOM_ARRAY_JOB_ID" > "$0/out/$i"; sleep 0.3; rm -f "$0/run/$i"'
A=$("$LOOM" run -g 1 --name sweep --array 0-999%10 -- sh -c "$ELEMENT" "$W" |
  job_id) || fail "submit the array"

# While it runs: the queue shows the pending elements as one line.
wait_for 20 sh -c "ls '$W/out' | grep -q ." || fail "no element started"
"$LOOM" queue > "$W/queue.out" || fail "loom queue"
grep -qE "^${A}_\[[0-9]+-999%10\] " "$W/queue.out" ||
  fail "loom queue does not collapse the pending elements: $(head -5 "$W/queue.out")"
rows=$(grep -c . "$W/queue.out")
[ "$rows" -le 12 ] || fail "loom queue has $rows lines for one array: $(head -20 "$W/queue.out")"
"$LOOM" show "$A" > "$W/show.out" || fail "loom show $A"
grep -q "Array: *0-999%10 (1000 elements)" "$W/show.out" || fail "loom show: $(cat "$W/show.out")"
echo "ok: one submission; the queue shows $(grep -E "^${A}_\[" "$W/queue.out" | awk '{print $1}') and $((rows - 2)) running elements"

wait_for 600 state_is "$A" succeeded ||
  fail "array $A is $(jget "$A" "j['state']"): $(jget "$A" "j['array']")"
n=$(ls "$W/out" | wc -l)
[ "$n" = 1000 ] || fail "$n elements recorded their index, not 1000"
for f in "$W"/out/*; do
  read -r i running array < "$f"
  [ "$i" = "$(basename "$f")" ] || fail "element $(basename "$f") saw index $i"
  [ "$array" = "$A" ] || fail "element $i saw LOOM_ARRAY_JOB_ID=$array"
  [ "$running" -le 10 ] || fail "element $i started with $running elements running (%10)"
done
most=$(cat "$W"/out/* | awk '$2 > m {m = $2} END {print m}')
[ "$(jget "$A" "j['array']['succeeded']")" = 1000 ] ||
  fail "array: $(jget "$A" "j['array']")"
echo "ok: 1000 elements succeeded, each with its own index; at most $most running at once (%10)"

# Cancel one element before it exists, then the array.
B=$("$LOOM" run -g 1 --name long --array 0-99%2 -- sleep 60 | job_id) ||
  fail "submit the second array"
wait_for 20 state_is "${B}_0" running || fail "element ${B}_0 did not start"
"$LOOM" cancel "${B}_50" > "$W/cancel1.out" || fail "cancel ${B}_50: $(cat "$W/cancel1.out")"
state_is "${B}_50" cancelled || fail "element ${B}_50 is $(jget "${B}_50" "j['state']")"
"$LOOM" queue > "$W/queue2.out"
grep -qE "^${B}_\[2-49,51-99%2\] " "$W/queue2.out" ||
  fail "after cancelling ${B}_50: $(cat "$W/queue2.out")"
"$LOOM" cancel "$B" > "$W/cancel2.out" || fail "cancel $B: $(cat "$W/cancel2.out")"
wait_for 40 state_is "$B" cancelled || fail "array $B is $(jget "$B" "j['state']")"
state_is "${B}_0" cancelled || fail "element ${B}_0 is $(jget "${B}_0" "j['state']")"
state_is "${B}_99" cancelled || fail "element ${B}_99 is $(jget "${B}_99" "j['state']")"
[ "$(jget "$B" "j['array']['cancelled']")" = 100 ] || fail "array: $(jget "$B" "j['array']")"
echo "ok: one element cancelled, then the rest (running ones stopped)"

# Bad arrays are the CLI's (exit 2); an element that is not there is not found.
"$LOOM" run -g 1 --array 9-1 -- true > "$W/bad.out" 2>&1
[ $? = 2 ] || fail "--array 9-1: $(cat "$W/bad.out")"
grep -q -- "--array: array: '9-1': the range is reversed" "$W/bad.out" || fail "$(cat "$W/bad.out")"
"$LOOM" show "${B}_100" > "$W/missing.out" 2>&1 && fail "show ${B}_100 succeeded"
grep -q "has no index 100" "$W/missing.out" || fail "$(cat "$W/missing.out")"
echo "PASS"
