# Shared by the fault-tolerance tests of tests/torch/ckpt_train.py jobs
# (torch_recovery_test: host processes; torch_container_test: in an image):
# wait for a checkpoint, kill a node, wait for the next run, check it.
# Needs LOOM, W, PY, AGENT_PIDS and `fail` (tests/lib/cluster.sh).

# wait_for_checkpoint JOB STEP: waits (60 s at most) until rank 0 (task 0)
# printed "checkpoint STEP", then checks that loom has a checkpoint of STEP
# or later reported (`loom show`), which it writes to $W/before.json.
wait_for_checkpoint() {
  local id=$1 step=$2
  for _ in $(seq 600); do
    "$LOOM" logs "$id" --task 0 2>/dev/null | grep -qx "checkpoint $step" && break
    sleep 0.1
  done
  "$LOOM" logs "$id" --task 0 | grep -qx "checkpoint $step" ||
    fail "no checkpoint $step: $("$LOOM" show "$id"; "$LOOM" logs "$id" --task 0 --stderr)"
  "$LOOM" show "$id" -o json > "$W/before.json"
  "$PY" -c "import json,sys; c=json.load(open(sys.argv[1])).get('checkpoint') or {}; sys.exit(not (c.get('step') or 0) >= $step)" "$W/before.json" ||
    fail "loom show has no reported checkpoint >= $step: $(cat "$W/before.json")"
}

# task_node TASK: the node of task TASK in $W/before.json.
task_node() {
  "$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['placement']['tasks'][$1]['node'])" "$W/before.json"
}

# kill_node I: node h200-I dies: SIGKILL to its agent, then to every process
# of the tasks it supervised: their shims, their process groups and whatever
# is in their cgroups, below them included (a container's processes are in
# a session of runc's and the cgroup `<group_dir>/container`: docs/images.md,
# "Running"). Fails unless it
# found a task there and, within 5 s, none of those processes is left. Only
# processes of this test are signalled (descendants of its reaper, or of
# this shell: tests/lib/procs.sh), whatever pids the records hold. Sets
# T_KILL; prints how many processes it killed.
kill_node() {
  local root=$$
  [ "${LOOM_TEST_REAPER:-}" = "$PPID" ] && root=$PPID
  T_KILL=$(date +%s.%N)
  kill -9 "${AGENT_PIDS[$1]}"
  "$PY" - "$W/agent$1/tasks" "$root" <<'PYEOF' || fail "node h200-$1 did not die: $(ls -l "$W/agent$1/tasks")"
import glob, json, os, signal, sys, time
root = int(sys.argv[2])
tasks = []
for f in glob.glob(os.path.join(sys.argv[1], "*.json")):
    try:
        tasks.append(json.load(open(f)))
    except (OSError, ValueError):
        pass
if not tasks:
    sys.exit(print("no task records in " + sys.argv[1]) or 1)

def stat(pid):  # (state, parent) or None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None

def alive(pid):  # and a descendant of the test's root
    s = stat(pid)
    if s is None or s[0] == "Z":
        return False
    for _ in range(64):
        if s is None or s[1] <= 1:
            return False
        if s[1] == root:
            return True
        s = stat(s[1])
    return False

def pgid_of(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None

def processes():
    found = set()
    groups = {t["pgid"] for t in tasks if t.get("pgid")}
    found.update(int(p) for p in os.listdir("/proc") if p.isdigit() and pgid_of(int(p)) in groups)
    for task in tasks:
        found.update(p for p in (task.get("shim_pid"), task.get("pid")) if p)
        tops = (task.get("cgroup") or {}).get("dirs", []) + [task.get("group_dir")]
        for top in filter(None, tops):
            for root, _, files in os.walk(top):
                if "cgroup.procs" in files:
                    try:
                        found.update(int(l) for l in open(os.path.join(root, "cgroup.procs")))
                    except (OSError, ValueError):
                        pass
    return {p for p in found if alive(p)}

killed = set()
for _ in range(50):
    left = processes()
    if not left:
        print(f"killed the agent and {len(killed)} processes of its {len(tasks)} task(s)")
        sys.exit(0)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
            killed.add(pid)
        except OSError:
            pass
    time.sleep(0.1)
sys.exit(print(f"still alive after SIGKILL: {sorted(left)}") or 1)
PYEOF
}

# wait_for_rerun JOB: waits (90 s at most) until run 1 of the job printed
# its first training step; sets T_STEP and writes `loom show` then to
# $W/after.json and task 0's log to $W/run1.out.
wait_for_rerun() {
  local id=$1
  T_STEP=""
  for _ in $(seq 900); do
    if "$LOOM" logs "$id" --task 0 2>/dev/null | grep -A1 "^start run=1 " | grep -q "^step"; then
      T_STEP=$(date +%s.%N)
      break
    fi
    sleep 0.1
  done
  [ -n "$T_STEP" ] || fail "the job did not run again: $("$LOOM" show "$id")"
  "$LOOM" show "$id" -o json > "$W/after.json"
  "$LOOM" logs "$id" --task 0 > "$W/run1.out"
}

# check_recovery JOB VICTIM STEPS WORLD SEEN: waits (60 s at most) for the
# job to succeed, then tests/torch/check_recovery.py: run 1 (WORLD ranks)
# resumed from loom's last checkpoint, SEEN (the one waited for before the
# kill) or later, and went on from there, not on VICTIM; the job ran STEPS
# steps in all, restart count 1; recovery within 30 s (prints its parts);
# VICTIM is down (`loom nodes`).
check_recovery() {
  local id=$1
  wait_for 60 state_is "$id" succeeded
  "$LOOM" nodes -o json | "$PY" -c "import json,sys; sys.exit([n['state'] for n in json.load(sys.stdin)['nodes'] if n['name'] == sys.argv[1]] != ['down'])" "$2" ||
    fail "the dead node $2 is not down: $("$LOOM" nodes)"
  "$LOOM" show "$id" -o json > "$W/final.json"
  "$LOOM" logs "$id" --task 0 > "$W/final.out"
  "$PY" tests/torch/check_recovery.py "$W/after.json" "$W/run1.out" "$W/final.json" \
    "$W/final.out" "$2" "$T_KILL" "$T_STEP" "$3" "$4" "$5" ||
    fail "checks failed: $("$LOOM" show "$id"; cat "$W/final.out")"
}
