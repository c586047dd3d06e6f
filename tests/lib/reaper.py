#!/usr/bin/python3
"""Runs a command as a child subreaper and fails when it leaves processes.

Usage: reaper.py [--name NAME] [--grace SECONDS] -- COMMAND [ARGS...]

Every process the command starts stays a descendant of this one, whatever it
does: orphans (a daemon's double fork, a task whose shim died, the shims of
a killed agent) are reparented here instead of to init
(PR_SET_CHILD_SUBREAPER). Once the command has exited, descendants still
alive after GRACE seconds (default 3) were left behind: each is named on
standard error ("left running: pid 123 (sleep 600)"), all are killed, and
the exit status is 1 (or the command's, when that was not 0). Otherwise the
command's exit status is passed on.

The command's environment has LOOM_TEST_REAPER=<this pid>, so that a test's
cleanup (tests/lib/procs.sh) knows it runs under its own reaper, whose
descendants are all the test's.
"""
import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def children_map():
    """pid -> ppid and state of every process, from /proc."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        close = stat.rfind(")")
        fields = stat[close + 2:].split()
        if len(fields) < 2:
            continue
        out[int(name)] = (int(fields[1]), fields[0])
    return out


def descendants(root):
    """Live (not zombie) descendants of `root`."""
    procs = children_map()
    kids = {}
    for pid, (ppid, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    found, pending = [], [root]
    while pending:
        for child in kids.get(pending.pop(), []):
            pending.append(child)
            if procs[child][1] != "Z":
                found.append(child)
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode(errors="replace")
        return text.strip()[:200] or "?"
    except OSError:
        return "?"


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main():
    args = sys.argv[1:]
    name, grace = None, 3.0
    while args and args[0] != "--":
        if args[0] == "--name" and len(args) > 1:
            name, args = args[1], args[2:]
        elif args[0] == "--grace" and len(args) > 1:
            grace, args = float(args[1]), args[2:]
        else:
            sys.exit(f"reaper.py: unknown argument {args[0]} (see its header)")
    if not args or len(args) < 2:
        sys.exit("usage: reaper.py [--name NAME] [--grace S] -- COMMAND [ARGS...]")
    command = args[1:]
    name = name or os.path.basename(command[0])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        print(f"reaper.py: PR_SET_CHILD_SUBREAPER: {os.strerror(ctypes.get_errno())};"
              " cannot check what the command leaves", file=sys.stderr)
        os.execvp(command[0], command)
    env = dict(os.environ, LOOM_TEST_REAPER=str(os.getpid()))
    child = os.fork()
    if child == 0:
        try:
            os.execvpe(command[0], command, env)
        finally:
            os._exit(127)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            break
        if pid == child:
            status = os.waitstatus_to_exitcode(st)
            break
    rc = status if status >= 0 else 128 - status
    deadline = time.monotonic() + grace
    left = descendants(os.getpid())
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        reap()
        left = descendants(os.getpid())
    if not left:
        sys.exit(rc)
    print(f"FAIL: {name} left {len(left)} process(es) running:", file=sys.stderr)
    for pid in left:
        print(f"  left running: pid {pid} ({cmdline(pid)})", file=sys.stderr)
    for _ in range(50):
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        reap()
        left = descendants(os.getpid())
        if not left:
            break
    sys.exit(rc if rc != 0 else 1)


if __name__ == "__main__":
    main()
