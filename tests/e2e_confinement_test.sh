#!/usr/bin/env bash
# Confinement on the node (docs/security.md, "What runs as root on a node,
# and on which paths"): a server and one agent run as root, tasks as their
# users, two test users (loomalice, loombob; created here, removed at the
# end when they were), and local dataset sources under the cluster's
# datasets.local_roots. Each check is one finding of the confinement issue:
#   - a source outside datasets.local_roots (/etc/shadow, the server's own
#     secret key) is refused at submit;
#   - alice's job cannot read bob's 0600 file (the agent copies a local
#     source as the job's user), nor list bob's 0700 directory (the server
#     lists it as the job's user), and nothing of bob's reaches the cache;
#   - bob's job cannot have alice's cached copy of a source bob may not
#     read (the agent checks as bob before binding it), and bob cannot
#     read the cache on the node outside a job (it is root's, 0700);
#   - a dataset mount on a system directory (/etc/pam.d) is refused, and a
#     link planted in a mount path is not followed (nothing is made where
#     it points);
#   - every host task runs with NoNewPrivs: a set-user-ID root program run
#     by alice's task does not make it root.
# Needs root (users, setuid, mounts); as another user it says why and
# passes without running.
# Usage: tests/e2e_confinement_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: needs root (the agent switches users only when it runs as root; CI runs as root)"
  exit 0
fi
source tests/lib/cluster.sh

CREATED=()
PROBE="loom-confinement-probe-$$"
cleanup_users() {
  rm -rf "/etc/$PROBE"
  for u in "${CREATED[@]}"; do pkill -9 -u "$u" 2> /dev/null; done
  cleanup
  for u in "${CREATED[@]}"; do userdel "$u" 2> /dev/null; done
}
trap cleanup_users EXIT
[ -n "${KEEP:-}" ] && trap "echo kept \$W" EXIT
for u in loomalice loombob; do
  if ! id -u "$u" > /dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin "$u" || fail "useradd $u"
    CREATED+=("$u")
  fi
done
as() { local u=$1; shift; setpriv --reuid="$u" --regid="$u" --init-groups "$@"; }

# The shared file system: each user's directory, and one of bob's that
# anyone may list but whose file only bob reads.
chmod 755 "$W"
NFS="$W/nfs"
mkdir -p "$NFS/alice/set" "$NFS/bob/set" "$NFS/bobshared" "$NFS/alicepriv" "$W/mnt"
echo alice-data > "$NFS/alice/set/data.txt"
echo bob-secret > "$NFS/bob/set/secret.txt"
echo bob-shared-secret > "$NFS/bobshared/secret.txt"
echo alice-private > "$NFS/alicepriv/private.txt"
chown -R loomalice: "$NFS/alice" "$NFS/alicepriv"
chown -R loombob: "$NFS/bob" "$NFS/bobshared"
chmod 700 "$NFS/bob"
chmod 600 "$NFS/bob/set/secret.txt" "$NFS/bobshared/secret.txt" "$NFS/alicepriv/private.txt"
chmod 755 "$NFS/bobshared" "$NFS/alicepriv"
chmod 1777 "$W/mnt"
# A set-user-ID root program: `id -u` prints its effective uid.
cp /usr/bin/id "$W/suid-id" && chmod 4755 "$W/suid-id"

write_cluster 1
cat >> "$W/cluster.yaml" <<YAML
datasets: {local_roots: ["$NFS"], mount_roots: [/data, "$W/mnt"]}
YAML
start_server
start_agents 1
AGENT_DIR="$W/agent0"

submit_as() {  # USER SOURCE MOUNT COMMAND: the job's id, or what the CLI said
  cat > "$W/job.yaml" <<YAML
name: reader
user: $1
resources: {gpus: 1}
data: [{source: "$2", mount: "$3"}]
command: ["/bin/sh", "-c", "$4"]
YAML
  "$LOOM" submit -f "$W/job.yaml" 2>&1
}
job_id() { grep -o '[0-9]*$' <<< "$1"; }
# ended JOB: the job is no longer pending or running.
ended() { case "$(jget "$1" "j['state']")" in failed | succeeded | cancelled) return 0 ;; esac; return 1; }
said() { "$LOOM" show "$1" 2>&1; }

# 1. Sources outside datasets.local_roots.
for src in /etc/shadow "$W/server/secret.key" "$AGENT_DIR"; do
  out=$(submit_as loomalice "$src" /data/x "cat /data/x/*")
  grep -q "datasets.local_roots" <<< "$out" || fail "source $src was not refused: $out"
done
echo "ok: sources outside datasets.local_roots (/etc/shadow, the server's secret key, the agent's data) are refused at submit"

# 2. Alice's own data: read, read-only, as her; and the task has no new
# privileges.
out=$(submit_as loomalice "$NFS/alice/set" /data/mine \
  "cat /data/mine/data.txt; grep NoNewPrivs /proc/self/status; echo euid=\$($W/suid-id -u)")
ID=$(job_id "$out") || fail "submit alice's job: $out"
wait_for 60 state_is "$ID" succeeded || fail "alice's job: $(said "$ID")"
LOG=$("$LOOM" logs "$ID")
grep -qx alice-data <<< "$LOG" || fail "alice's job did not read her data: $LOG"
grep -q "NoNewPrivs:[[:space:]]*1" <<< "$LOG" || fail "the task runs without no_new_privs: $LOG"
grep -qx "euid=$(id -u loomalice)" <<< "$LOG" || fail "a set-user-ID program gave the task: $LOG"
echo "ok: alice's job read her own dataset, with NoNewPrivs: 1; a set-user-ID root program stayed alice"

# The cache is root's alone: bob (and alice) cannot read it outside a job.
CACHE="$AGENT_DIR/nodes/h200-0/datasets"
[ -d "$CACHE" ] || CACHE=$(find "$AGENT_DIR" -type d -name datasets | head -1)
[ "$(stat -c '%U %a' "$CACHE")" = "root 700" ] || fail "dataset cache: $(ls -ld "$CACHE")"
COPY=$(find "$CACHE" -name data.txt | head -1)
[ -n "$COPY" ] || fail "no cached copy of alice's file under $CACHE"
as loombob cat "$COPY" > /dev/null 2>&1 && fail "bob read the cached copy $COPY"
echo "ok: the cache ($CACHE) is root 0700: bob cannot read alice's cached copy"

# 3. Alice cannot list bob's 0700 directory (the server lists as her).
out=$(submit_as loomalice "$NFS/bob/set" /data/bob "cat /data/bob/secret.txt")
ID=$(job_id "$out") || fail "submit: $out"
wait_for 20 sh -c "\"$LOOM\" show $ID 2>&1 | grep -q 'user loomalice cannot list it'" ||
  fail "alice's job on bob's 0700 directory: $(said "$ID")"
state_is "$ID" pending || fail "alice's job on bob's directory is not pending: $(said "$ID")"
"$LOOM" cancel "$ID" > /dev/null
echo "ok: alice's job on bob's 0700 directory waits: '$(said "$ID" | grep -o 'user loomalice cannot list it[^;]*' | head -1)'"

# 4. Alice cannot read bob's 0600 file in a directory she may list (the
# agent copies as her).
out=$(submit_as loomalice "$NFS/bobshared" /data/bob "cat /data/bob/secret.txt")
ID=$(job_id "$out") || fail "submit: $out"
wait_for 60 ended "$ID" || fail "alice's job on bob's file did not end: $(said "$ID")"
state_is "$ID" succeeded && fail "alice's job on bob's 0600 file succeeded: $("$LOOM" logs "$ID")"
said "$ID" | grep -q "cannot read" || fail "no reason naming the file: $(said "$ID")"
grep -rqs bob-shared-secret "$CACHE" && fail "bob's secret reached the cache"
"$LOOM" logs "$ID" 2> /dev/null | grep -q bob-shared-secret && fail "alice's task printed bob's secret"
echo "ok: alice's job cannot read bob's 0600 file: '$(said "$ID" | grep -o 'user loomalice cannot read[^;]*' | head -1)'"

# 5. A copy alice cached is not bob's: his job on alice's private file
# (in a directory he may list) fails before his task sees it.
out=$(submit_as loomalice "$NFS/alicepriv" /data/p "cat /data/p/private.txt")
ID=$(job_id "$out") || fail "submit: $out"
wait_for 60 state_is "$ID" succeeded || fail "alice's private job: $(said "$ID")"
out=$(submit_as loombob "$NFS/alicepriv" /data/p "cat /data/p/private.txt")
ID=$(job_id "$out") || fail "submit: $out"
wait_for 60 ended "$ID" || fail "bob's job on alice's file did not end: $(said "$ID")"
state_is "$ID" succeeded && fail "bob read alice's cached version: $("$LOOM" logs "$ID")"
said "$ID" | grep -q "user loombob cannot read" || fail "no reason: $(said "$ID")"
echo "ok: bob's job cannot use alice's cached version of a file he may not read"

# 6. Mount points: never a system directory, and never through a link.
out=$(submit_as loomalice "$NFS/alice/set" /etc/pam.d "id")
grep -q "system directory" <<< "$out" || fail "a mount on /etc/pam.d was accepted: $out"
as loomalice ln -s /etc "$W/mnt/evil" || fail "ln -s"
out=$(submit_as loomalice "$NFS/alice/set" "$W/mnt/evil/$PROBE/x" "ls /")
ID=$(job_id "$out") || fail "submit: $out"
wait_for 60 ended "$ID" || fail "the job with a linked mount did not end: $(said "$ID")"
state_is "$ID" succeeded && fail "a mount through a planted link worked"
[ -e "/etc/$PROBE" ] && fail "the agent made /etc/$PROBE through a planted link"
echo "ok: a mount on /etc/pam.d is refused; one through a planted link fails and makes nothing under /etc"
echo "PASS"
