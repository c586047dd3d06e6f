#!/usr/bin/env bash
# The tests' own cleanup (tests/lib/procs.sh, tests/lib/reaper.py): a test
# that leaves a process running fails and names it, and kill_test_processes
# kills whole trees, orphans and new sessions included, so that a test that
# uses it leaves nothing. Needs /usr/bin/python3. Usage:
# tests/test_cleanup_test.sh
set -u
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'pkill -9 -f "sleep 6[0-9][0-9][0-9]$$" 2>/dev/null; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3"; exit 0; }
# Unique command lines: sleep 6001<pid> ...
S1="sleep 6001$$" S2="sleep 6002$$" S3="sleep 6003$$" S4="sleep 6004$$"

# 1. A script that leaves an orphan and a new session behind fails.
cat > "$T/leaky.sh" <<SH
#!/bin/bash
( setsid $S1 & )
sh -c '$S2 & exit 0'
echo leaky done
SH
chmod +x "$T/leaky.sh"
/usr/bin/python3 tests/lib/reaper.py --grace 1 -- "$T/leaky.sh" > "$T/leaky.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "a leaky script passed (exit status $rc): $(cat "$T/leaky.out")"
grep -q "left running: pid [0-9]* ($S1)" "$T/leaky.out" || fail "the new session is not named: $(cat "$T/leaky.out")"
grep -q "left running: pid [0-9]* ($S2)" "$T/leaky.out" || fail "the orphan is not named: $(cat "$T/leaky.out")"
pgrep -f "$S1|$S2" > /dev/null && fail "the reaper did not kill what was left"
echo "ok: a script that leaves processes fails and names them ($(grep -c 'left running' "$T/leaky.out") left), and they are killed"

# 2. A test that sources procs.sh and starts trees (a child's child that
# outlives its parent, a new session, a stopped process) ends clean.
cat > "$T/tidy.sh" <<SH
#!/bin/bash
cd "$PWD"
source tests/lib/procs.sh
trap 'kill_test_processes || exit 1' EXIT
sh -c '$S3 & exit 0'
( setsid sh -c '$S4 & $S4' & )
$S3 &
kill -STOP \$!
sleep 0.2
echo "reaper=\$LOOM_TEST_REAPER ppid=\$PPID"
SH
chmod +x "$T/tidy.sh"
"$T/tidy.sh" > "$T/tidy.out" 2>&1
rc=$?
[ $rc = 0 ] || fail "a tidy test failed (exit status $rc): $(cat "$T/tidy.out")"
grep -q "^reaper=\([0-9]*\) ppid=\1$" "$T/tidy.out" || fail "the test did not run under its own reaper: $(cat "$T/tidy.out")"
pgrep -f "$S3|$S4" > /dev/null && fail "processes of the tidy test are left: $(pgrep -fa "$S3|$S4")"
echo "ok: kill_test_processes kills whole trees (orphans, new sessions, stopped processes)"

# 3. Without its cleanup, the same test fails.
sed -i "s/^trap .*/true/" "$T/tidy.sh"
"$T/tidy.sh" > "$T/untidy.out" 2>&1
rc=$?
[ $rc = 1 ] || fail "a test without cleanup passed (exit status $rc): $(cat "$T/untidy.out")"
grep -q "left running" "$T/untidy.out" || fail "nothing named: $(cat "$T/untidy.out")"
echo "ok: without it, the test fails naming $(grep -c 'left running' "$T/untidy.out") processes"
echo "all checks passed"
