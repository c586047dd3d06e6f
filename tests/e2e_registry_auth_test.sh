#!/usr/bin/env bash
# Registry credentials end to end (docs/images.md, "Registry credentials"):
# Debian's docker-registry with htpasswd auth on loopback holds a busybox
# image; a server and an agent started with `--registry-auth FILE` resolve
# and pull it, and a job runs in it. The password is in no log, job, event
# or task record. An agent without the file fails a new image's pull with
# "needs credentials" (the job fails, the node stays up); a server without
# it refuses the submission (400); a file others may read stops both at
# start.
# Usage: tests/e2e_registry_auth_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/registry.sh
for tool in docker-registry umoci skopeo jq runc python3; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (scripts/setup.sh --test)"
done
[ "$(id -u)" = 0 ] || { echo "SKIP: container tasks need root (runc)"; exit 0; }

job_named() {
  "$LOOM" queue --all -o json | jq -r --arg n "$1" '.. | objects | select(.name? == $n) | .id' | head -1
}

PASSWORD="pw-$$-$RANDOM"
SECRET_B64=$(printf %s "ci:$PASSWORD" | base64 -w0)
htpasswd_line ci "$PASSWORD" > "$W/htpasswd"
start_registry 50 "$W/htpasswd"
mkdir -p "$W/image/etc"
echo "from the private image" > "$W/image/etc/loom-test"
REGISTRY_CREDS="ci:$PASSWORD" push_busybox_image private/busybox:1 "$W/image" > "$W/digest" ||
  fail "push the image"
(umask 077 && printf '{"auths": {"%s": {"auth": "%s"}}}\n' "$REG" "$SECRET_B64" > "$W/auth.json")
echo "ok: private/busybox:1 ($(cat "$W/digest")) in a registry that wants credentials on $REG"

write_cluster 1
start_server --insecure-registry "$REG" --registry-auth "$W/auth.json"
grep -q "registry credentials for $REG from $W/auth.json" "$W/server.log" ||
  fail "the server did not say which registries it has credentials for"
AGENT_FLAGS=(--insecure-registry "$REG" --registry-auth "$W/auth.json")
start_agents 1

"$LOOM" run -g 1 --name private --wait --image "$REG/private/busybox:1" -- cat /etc/loom-test \
  > "$W/private.out" 2>&1 || fail "the job in the private image: $(cat "$W/private.out")"
ID=$(job_named private)
state_is "$ID" succeeded || fail "private did not succeed: $("$LOOM" show "$ID")"
"$LOOM" logs "$ID" | grep -qx "from the private image" || fail "private's output: $("$LOOM" logs "$ID")"
"$LOOM" show "$ID" | grep -q "$(cat "$W/digest")" || fail "loom show has no digest: $("$LOOM" show "$ID")"
echo "ok: the server resolved and the agent pulled with the credentials file; the job ran in the image"

# The secret is nowhere the test can see: logs, the job, its events, the
# agent's task records and launch state, the server's store.
"$LOOM" show "$ID" -o json > "$W/show.json"
curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/jobs/$ID/events" > "$W/events.json" || fail "events"
for f in "$W"/*.log "$W/show.json" "$W/events.json" "$W/private.out"; do
  grep -q -e "$PASSWORD" -e "$SECRET_B64" "$f" && fail "$f holds the registry password"
done
grep -rlq -e "$PASSWORD" -e "$SECRET_B64" "$W/agent0" "$W/server" &&
  fail "a file under the agent's or the server's data dir holds the password: $(grep -rl -e "$PASSWORD" -e "$SECRET_B64" "$W/agent0" "$W/server")"
echo "ok: the password is in no log, job, event, task record or store"

# An agent without credentials: a new image's pull fails on the node.
REGISTRY_CREDS="ci:$PASSWORD" push_busybox_image private/other:1 > /dev/null || fail "push private/other:1"
kill "${AGENT_PIDS[0]}" && wait "${AGENT_PIDS[0]}" 2> /dev/null
AGENT_FLAGS=(--insecure-registry "$REG")
restart_agent 0
"$LOOM" run -g 1 --name other --image "$REG/private/other:1" -- true > "$W/other.out" 2>&1 ||
  fail "submit other (the server has credentials): $(cat "$W/other.out")"
OTHER=$(job_named other)
wait_for 30 state_is "$OTHER" failed || fail "other did not fail: $("$LOOM" show "$OTHER")"
"$LOOM" show "$OTHER" > "$W/other.txt"
grep -q "pulling image .* needs credentials for private/other: none configured for $REG" "$W/other.txt" ||
  fail "other's reason: $(cat "$W/other.txt")"
[ "$("$LOOM" nodes -o json | grep -c '"up"')" = 1 ] || fail "the node is not up: $("$LOOM" nodes)"
echo "ok: an agent without credentials fails the pull saying so; the node stays up"

# A server without credentials refuses the submission.
kill "$SERVER" && wait "$SERVER" 2> /dev/null
start_server --insecure-registry "$REG"
out=$("$LOOM" run -g 1 --image "$REG/private/busybox:1" -- true 2>&1) &&
  fail "a server without credentials accepted a private image"
grep -q "container.image: cannot read '$REG/private/busybox:1' from its registry: registry $REG needs credentials for private/busybox: none configured for $REG" <<< "$out" ||
  fail "submit without credentials: $out"
echo "ok: a server without credentials refuses the submission: ${out:0:140}"

# A credentials file others may read stops the server and the agent.
chmod 644 "$W/auth.json"
timeout 10 "$LOOM" server --listen "127.0.0.1:$((PORT + 40))" --data-dir "$W/server2" \
  --cluster "$W/cluster.yaml" --registry-auth "$W/auth.json" > "$W/lax-server.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "loom server with a 0644 credentials file exited $rc: $(cat "$W/lax-server.out")"
grep -q -- "--registry-auth: $W/auth.json has mode 0644: group or others may read" "$W/lax-server.out" ||
  fail "lax server: $(cat "$W/lax-server.out")"
timeout 10 "$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.9:$((PORT + 41))" \
  --data-dir "$W/agent-lax" --emulate 1xH200 --registry-auth "$W/auth.json" > "$W/lax-agent.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "loom agent with a 0644 credentials file exited $rc: $(cat "$W/lax-agent.out")"
grep -q -- "--registry-auth: $W/auth.json has mode 0644" "$W/lax-agent.out" ||
  fail "lax agent: $(cat "$W/lax-agent.out")"
echo "ok: a credentials file others may read stops the server and the agent (exit 2)"
echo "all checks passed"
