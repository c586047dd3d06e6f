#!/usr/bin/env bash
# `loom run --wait` as srun (docs/cli.md): a 2-node job's output, both
# tasks', streamed with their ranks under -l (stdout and stderr apart), the
# job's exit code as loom's; Ctrl-C cancels the job and waits for its end;
# `loom attach` follows a running job and Ctrl-C leaves it running.
# Usage: tests/e2e_srun_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
write_cluster 2
start_server
start_agents 2

"$LOOM" run -g 16 --nodes 2 --wait -l -- /bin/sh -c \
  'echo "hello from rank $RANK of $WORLD_SIZE"; sleep 0.5; echo "err $RANK" >&2; echo bye; exit 3' \
  > "$W/run.out" 2> "$W/run.err"
RC=$?
[ $RC = 3 ] || fail "loom run --wait exited $RC, not the job's 3: $(cat "$W/run.err")"
for r in 0 1; do
  grep -qx "$r: hello from rank $r of 2" "$W/run.out" || fail "no line of rank $r: $(cat "$W/run.out")"
  grep -qx "$r: bye" "$W/run.out" || fail "no last line of rank $r: $(cat "$W/run.out")"
  grep -qx "$r: err $r" "$W/run.err" || fail "no stderr of rank $r: $(cat "$W/run.err")"
done
grep -q "failed (exit status 3)" "$W/run.err" || fail "no end line: $(cat "$W/run.err")"
echo "ok: both tasks' output with their ranks; exit status 3 as the job's"

# Ctrl-C: the job is cancelled, and loom run returns once it has ended.
"$LOOM" run -g 8 --wait -- /bin/sh -c 'echo started; exec sleep 300' > "$W/c.out" 2> "$W/c.err" &
RUN=$!
PIDS+=($RUN)
wait_for 20 grep -qx started "$W/c.out" || fail "the job did not start: $(cat "$W/c.err")"
JOB=$(grep -o 'job [0-9]*' "$W/c.out" | head -1 | grep -o '[0-9]*$')
kill -INT "$RUN"
wait "$RUN"
RC=$?
[ "$RC" != 0 ] || fail "loom run exited 0 after Ctrl-C"
grep -q "cancelling job $JOB" "$W/c.err" || fail "no cancel: $(cat "$W/c.err")"
state_is "$JOB" cancelled || fail "job $JOB is $(jget "$JOB" "j['state']") after Ctrl-C"
echo "ok: Ctrl-C cancelled job $JOB and loom run returned $RC once it ended"

# attach: follows a running job; Ctrl-C leaves it running.
BG=$("$LOOM" run -g 8 -- /bin/sh -c 'i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done' |
  grep -o 'job [0-9]*' | grep -o '[0-9]*$')
wait_for 20 state_is "$BG" running || fail "job $BG did not start"
"$LOOM" attach "$BG" -l > "$W/a.out" 2> "$W/a.err" &
ATT=$!
PIDS+=($ATT)
wait_for 10 grep -q '^0: tick [0-9]' "$W/a.out" || fail "attach printed no output: $(cat "$W/a.err")"
kill -INT "$ATT"
wait "$ATT"
RC=$?
[ "$RC" = 130 ] || fail "attach exited $RC after Ctrl-C, not 130: $(cat "$W/a.err")"
state_is "$BG" running || fail "job $BG is $(jget "$BG" "j['state']") after leaving attach"
echo "ok: loom attach followed job $BG; Ctrl-C left it running"
"$LOOM" cancel "$BG" > /dev/null
echo "PASS"
