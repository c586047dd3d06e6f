# Shared by the end-to-end tests: every process a test starts goes when it
# ends, whole trees included (a task's children, processes that started a
# new session, shims of killed agents and their tasks), and a test that
# leaves one running fails.
#
# Sourcing this re-runs the test under tests/lib/reaper.py (a child
# subreaper) unless it already runs under one of its own: then every
# process the test starts stays a descendant of the reaper, even once
# orphaned, so `kill_test_processes` finds them all, and the reaper fails
# the test when any is still alive after it ended (naming it). Without
# python3, or where the script cannot be run again, the test runs as is and
# `kill_test_processes` finds the test shell's descendants and the processes
# whose command line names PATTERN (and their sessions: a shim's tasks).
#
# Source it first thing after `cd` to the repository root: whatever the
# script did before runs twice.
# The script runs again from where it was started (its $0 and arguments may
# be relative to that directory); after that cd, $OLDPWD is the repository.
if [ "${LOOM_TEST_REAPER:-}" != "$PPID" ] && [ -x /usr/bin/python3 ] &&
  (cd "${OLDPWD:-.}" && [ -x "$0" ]); then
  cd "${OLDPWD:-.}" &&
    exec /usr/bin/python3 "$OLDPWD/tests/lib/reaper.py" --name "$(basename "$0")" -- "$0" "$@"
fi

# descendants_of PID: the live descendants of PID, one a line.
descendants_of() {
  ps -e -o pid=,ppid=,stat= | awk -v root="$1" '
    { parent[$1] = $2; state[$1] = $3 }
    END {
      n = 1; queue[1] = root
      for (i = 1; i <= n; i++)
        for (p in parent)
          if (parent[p] == queue[i] && !(p in seen)) {
            seen[p] = 1; queue[++n] = p
            if (state[p] !~ /^Z/) print p
          }
    }'
}

# test_processes [PATTERN]: what this test started and is still alive (not
# this shell).
test_processes() {
  local root=$$
  [ "${LOOM_TEST_REAPER:-}" = "$PPID" ] && root=$PPID
  {
    descendants_of "$root"
    if [ "$root" = $$ ] && [ -n "${1:-}" ]; then
      local p
      for p in $(pgrep -f -- "$1"); do
        echo "$p"
        descendants_of "$p"
        # A shim's tasks are in its session (the shim calls setsid).
        pgrep -s "$p" 2>/dev/null
      done
    fi
  } | sort -un | grep -vx -e "$$" -e "$PPID"
}

# live_test_processes [PATTERN]: test_processes still alive once listed (the
# listing's own processes are not; nor the subshell this runs in, when
# called as $(live_test_processes)).
live_test_processes() {
  local p listed
  listed=$(test_processes "${1:-}")
  for p in $listed; do
    [ "$p" = "$BASHPID" ] && continue
    kill -0 "$p" 2>/dev/null && echo "$p"
  done
}

# kill_test_processes [PATTERN]: stops, then SIGKILLs, every process of
# test_processes, again until none is left (a process may fork before it
# is stopped). Returns 1, naming them, when some are still there after 5 s.
kill_test_processes() {
  local pids
  for _ in $(seq 50); do
    pids=$(live_test_processes "${1:-}")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null
    wait 2>/dev/null
    sleep 0.1
  done
  echo "FAIL: processes of this test survive SIGKILL:"
  ps -o pid=,args= -p "$(echo $pids | tr ' ' ,)"
  return 1
}
