#!/usr/bin/env bash
# Tasks run as the user who submitted their job (docs/agent.md, "Users"). A
# server and one agent (h200-0 on 127.0.0.2, real processes) run as root; a
# job of the test user `loomtest` (created here if missing, removed at the
# end if it was) must run with that user's uid, must not be able to write
# into the agent's data directory, /root or another job's log file, and must
# own a writable checkpoint directory: by default the agent's, per node
# (<agent dir>/checkpoints/<job id>, 0700, the user's), or one the job spec
# names under a shared root that lets users in (1777). A job of a user the
# node does not have fails, and `loom show` says which user.
# Needs root (the agent only switches users as root; CI runs as root): as
# another user it says why and passes without running.
# Usage: tests/e2e_run_as_user_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root (the agent switches users only when it runs as root; CI runs as root)"
  exit 0
fi
source tests/lib/cluster.sh

TEST_USER=loomtest
CREATED_USER=0
# What the job tries to create outside its directories (removed at the end
# should a broken agent let it).
PROBE="loom-e2e-probe-$$"
cleanup_user() {
  rm -f "/root/$PROBE" "/etc/$PROBE"
  # Every process of a user this test created is the test's.
  [ "$CREATED_USER" = 1 ] && pkill -9 -u "$TEST_USER" 2>/dev/null
  cleanup
  [ "$CREATED_USER" = 1 ] && userdel "$TEST_USER" 2>/dev/null
}
trap cleanup_user EXIT
if ! id -u "$TEST_USER" > /dev/null 2>&1; then
  useradd --system --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$TEST_USER" || fail "useradd $TEST_USER"
  CREATED_USER=1
fi
TEST_UID=$(id -u "$TEST_USER")
# The task starts in the user's home directory, or in / when it has none.
TEST_HOME=$(getent passwd "$TEST_USER" | cut -d: -f6)
TEST_PWD=/
[ -d "$TEST_HOME" ] && TEST_PWD=$TEST_HOME

PY=python3
submit() { "$LOOM" submit -f "$1" 2>&1 | grep -o '[0-9]*$'; }

# The scratch directory is mktemp's (0700): let the test user through, so
# that every denial below comes from the permissions of the agent's own
# files. A shared checkpoint area, like /tmp (1777), for a job that names
# its own directory there; the server has no --checkpoint-root.
chmod 755 "$W"
mkdir -p "$W/ckpt" && chmod 1777 "$W/ckpt"
write_cluster 1
start_server
start_agents 1
AGENT_DIR="$W/agent0"

# A job of root's, whose log file the test user's job then tries to write.
cat > "$W/root.yaml" <<YAML
name: roots
user: root
resources: {gpus: 1}
command: ["/bin/sh", "-c", "echo root-job-output; id -u"]
YAML
ROOT_JOB=$(submit "$W/root.yaml") || fail "submit root's job"
wait_for 20 state_is "$ROOT_JOB" succeeded || fail "root's job: $("$LOOM" show "$ROOT_JOB")"
[ "$("$LOOM" logs "$ROOT_JOB")" = "$(printf 'root-job-output\n0')" ] ||
  fail "root's job output: $("$LOOM" logs "$ROOT_JOB")"
OTHER_LOG="$AGENT_DIR/logs/$ROOT_JOB.0.0.out"
[ -f "$OTHER_LOG" ] || fail "no log file $OTHER_LOG: $(ls "$AGENT_DIR/logs")"

# The test user's job: each line says what it could do.
cat > "$W/user.yaml" <<YAML
name: as-user
user: $TEST_USER
resources: {gpus: 1}
env: {AGENT_DIR: "$AGENT_DIR", OTHER_LOG: "$OTHER_LOG", PROBE: "$PROBE"}
command:
  - /bin/sh
  - -c
  - |
    echo "uid=\$(id -u) user=\$USER logname=\$LOGNAME home=\$HOME pwd=\$(pwd)"
    try() { what=\$1; shift; if "\$@" 2>/dev/null; then echo "\$what=written"; else echo "\$what=denied"; fi; }
    try agent-dir touch "\$AGENT_DIR/\$PROBE"
    try agent-logs touch "\$AGENT_DIR/logs/\$PROBE"
    try agent-tasks touch "\$AGENT_DIR/tasks/\$PROBE"
    try other-log sh -c 'echo hacked >> "\$OTHER_LOG"'
    try root-home touch "/root/\$PROBE"
    try etc touch "/etc/\$PROBE"
    try checkpoint touch "\$LOOM_CHECKPOINT_DIR/step"
    echo "checkpoint-owner=\$(stat -c '%U %a' "\$LOOM_CHECKPOINT_DIR")"
    echo "checkpoint-dir=\$LOOM_CHECKPOINT_DIR"
    echo "log-owner=\$(stat -L -c %U /proc/\$\$/fd/1)"
YAML
USER_JOB=$(submit "$W/user.yaml") || fail "submit the test user's job"
wait_for 20 state_is "$USER_JOB" succeeded || fail "the test user's job: $("$LOOM" show "$USER_JOB")"
"$LOOM" logs "$USER_JOB" > "$W/user.out" || fail "loom logs $USER_JOB"
"$LOOM" logs "$USER_JOB" --stderr > "$W/user.err"
expect() {
  grep -qx -- "$1" "$W/user.out" ||
    fail "expected '$1' in the output of job $USER_JOB: $(cat "$W/user.out") / stderr: $(cat "$W/user.err")"
}
expect "uid=$TEST_UID user=$TEST_USER logname=$TEST_USER home=$TEST_HOME pwd=$TEST_PWD"
echo "ok: the job of $TEST_USER ran as uid $TEST_UID (id -u), with its USER, LOGNAME and HOME"
for what in agent-dir agent-logs agent-tasks other-log root-home etc; do expect "$what=denied"; done
grep -q hacked "$OTHER_LOG" && fail "the test user's job wrote into root's job's log"
for f in "$AGENT_DIR/$PROBE" "$AGENT_DIR/logs/$PROBE" "$AGENT_DIR/tasks/$PROBE" "/root/$PROBE" "/etc/$PROBE"; do
  [ -e "$f" ] && fail "the test user's job created $f"
done
echo "ok: it could not write into the agent's data, logs or task state, another job's log, /root or /etc"
expect "checkpoint=written"
expect "checkpoint-owner=$TEST_USER 700"
CKPT="$AGENT_DIR/checkpoints/$USER_JOB"
expect "checkpoint-dir=$CKPT"
[ "$(stat -c '%U %a' "$CKPT")" = "$TEST_USER 700" ] || fail "checkpoint directory: $(ls -ld "$CKPT")"
[ "$(stat -c %U "$CKPT/step")" = "$TEST_USER" ] || fail "checkpoint file owner"
[ "$(stat -c '%U %a' "$AGENT_DIR/checkpoints")" = "root 711" ] || fail "checkpoint root: $(ls -ld "$AGENT_DIR/checkpoints")"
expect "log-owner=$TEST_USER"
USER_LOG="$AGENT_DIR/logs/$USER_JOB.0.0.out"
[ "$(stat -c '%U %a' "$USER_LOG")" = "$TEST_USER 600" ] || fail "log file: $(ls -l "$USER_LOG")"
[ "$(stat -c %U "$OTHER_LOG")" = root ] || fail "root's log file changed owner"
echo "ok: its default checkpoint directory ($CKPT, 700) and log files are its own"

# A checkpoint directory the job names, under a shared root: the task makes
# it as its user.
cat > "$W/named.yaml" <<YAML
name: named-ckpt
user: $TEST_USER
resources: {gpus: 1}
checkpoint: {dir: "$W/ckpt/named"}
command:
  - /bin/sh
  - -c
  - 'touch "\$LOOM_CHECKPOINT_DIR/step" && echo "dir=\$LOOM_CHECKPOINT_DIR"'
YAML
NAMED=$(submit "$W/named.yaml") || fail "submit the named-checkpoint job"
wait_for 20 state_is "$NAMED" succeeded || fail "named-checkpoint job: $("$LOOM" show "$NAMED") $("$LOOM" logs "$NAMED" --stderr)"
[ "$("$LOOM" logs "$NAMED")" = "dir=$W/ckpt/named" ] || fail "named-checkpoint job output: $("$LOOM" logs "$NAMED")"
[ "$(stat -c %U "$W/ckpt/named/step")" = "$TEST_USER" ] || fail "named checkpoint owner: $(ls -l "$W/ckpt/named")"
echo "ok: a checkpoint directory the job names under a shared root is made by, and belongs to, its user"

# A user the node does not have: the launch fails, and the job says why.
cat > "$W/nobody.yaml" <<YAML
name: ghost
user: loom-no-such-user
resources: {gpus: 1}
command: ["/bin/true"]
restart: {max: 3}
YAML
GHOST=$(submit "$W/nobody.yaml") || fail "submit the ghost job"
wait_for 20 state_is "$GHOST" failed || fail "ghost job: $("$LOOM" show "$GHOST")"
"$LOOM" show "$GHOST" > "$W/ghost.show"
grep -q "user 'loom-no-such-user' does not exist on node h200-0" "$W/ghost.show" ||
  fail "loom show does not name the user: $(cat "$W/ghost.show")"
grep -q "launch of task 0 on h200-0 refused" "$W/ghost.show" ||
  fail "loom show has no refused launch: $(cat "$W/ghost.show")"
# Refused as specified, it would be refused again: no restart despite
# restart.max 3.
grep -q "not queued again" "$W/ghost.show" ||
  fail "the refused job says nothing of restarts: $(cat "$W/ghost.show")"
[ "$("$LOOM" show "$GHOST" -o json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["restart_count"])')" = 0 ] ||
  fail "the refused job was restarted"
grep "user 'loom-no-such-user'" "$W/ghost.show" | head -1 | sed 's/^ */  loom show: /'
echo "ok: a job of a user the node lacks failed and says so"
echo "all checks passed"
