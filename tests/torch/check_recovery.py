"""The checks of a ckpt_train.py job whose node died (tests/lib/recovery.sh).

Usage: check_recovery.py AFTER.json RUN1.out FINAL.json FINAL.out VICTIM
                         T_KILL T_STEP STEPS WORLD SEEN
AFTER.json is `loom show -o json` once run 1 printed its first step (T_STEP),
RUN1.out rank 0's log then; FINAL.* the same once the job ended. VICTIM is
the node killed at T_KILL, once rank 0 had printed checkpoint SEEN (> 0).
Asserts that run 1 (WORLD ranks) resumed from loom's last checkpoint, one
run 0 reported, at step SEEN or later, and went on at the next step, on other nodes than VICTIM; that the job ran STEPS steps and
succeeded with restart_count 1; and that recovery (node death to the first
step of run 1) took at most 30 s, and that loom recorded the recovery's
phases. Prints the recovery time and the phases.
"""
import datetime
import json
import re
import sys


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def main():
    after, run1, final, final_out = (json.load(open(sys.argv[1])), open(sys.argv[2]).read(),
                                     json.load(open(sys.argv[3])), open(sys.argv[4]).read())
    victim, t_kill, t_step = sys.argv[5], float(sys.argv[6]), float(sys.argv[7])
    steps, world, seen = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
    errors = []
    m = re.search(rf"^start run=1 rank=0 world={world} resumed_from=(\d+)$", run1, re.M)
    resumed = int(m.group(1)) if m else -1
    if resumed < seen:
        errors.append(f"run 1 (world {world}) resumed from step {resumed}, "
                      f"not from a checkpoint >= {seen}")
    first = re.search(r"^start run=1.*\n(step \d+)", run1, re.M)
    if not first or first.group(1) != f"step {resumed + 1}":
        errors.append(f"run 1 did not continue at step {resumed + 1}: {first and first.group(1)}")
    nodes = {t["node"] for t in after["placement"]["tasks"]}
    if victim in nodes:
        errors.append(f"run 1 placed on the dead node {victim}: {nodes}")
    if final["state"] != "succeeded" or f"done steps={steps}" not in final_out:
        errors.append(f"did not finish: {final['state']} {final.get('reason')}")
    ck = after.get("checkpoint") or {}
    if ck.get("step") != resumed or ck.get("run") != 0:
        errors.append(f"loom's last checkpoint {ck} is not the one run 1 resumed from ({resumed})")
    if final["restart_count"] != 1:
        errors.append(f"restart_count {final['restart_count']}, expected 1")
    # Losing the node is not the job's fault, whichever loom saw first: the
    # node's silence, or rank 0 failing in its collective with rank 1.
    if final.get("node_losses") != 1 or final.get("restarts_used") != 0:
        errors.append(f"expected one node-loss requeue and no restart used: "
                      f"node_losses {final.get('node_losses')}, restarts_used "
                      f"{final.get('restarts_used')}")
    total = t_step - t_kill
    print(f"recovery: {total:.1f} s from node death to the first step of the new run "
          f"(resumed from step {resumed}, on {sorted(nodes)})")
    # loom's own account of it (docs/fault-tolerance.md, "Recovery phases").
    rec = final.get("recovery") or {}
    phases = rec.get("phases") or {}
    if not phases or rec.get("run") != 0:
        errors.append(f"loom show has no recovery of run 0: {rec}")
    for name in ("detection", "gang_stop", "placement", "launch", "first_progress"):
        secs = phases.get(name)
        print(f"  {name}: " + ("-" if secs is None else f"{secs:.2f} s"))
    if phases and any(phases.get(n) is None for n in
                      ("detection", "gang_stop", "placement", "launch")):
        errors.append(f"recovery phases missing: {phases}")
    if rec.get("lost") and ts(rec["lost"]) > t_kill + 0.5:
        errors.append(f"loom dates the loss {ts(rec['lost']) - t_kill:.1f} s after the kill")
    if total > 30:
        errors.append(f"recovery took {total:.1f} s, more than 30 s")
    for e in errors:
        print("  " + e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
