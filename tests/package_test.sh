#!/usr/bin/env bash
# The Debian package and the Ansible playbook (docs/deploy.md): builds the
# .deb with scripts/package.sh, extracts it into a scratch root (the binary
# runs from there, the units and configs are where they belong, the units
# pass `systemd-analyze verify`), installs, removes and purges it with
# `dpkg --root`, then runs deploy/ansible/site.yml against localhost
# (connection local) into a scratch prefix with the agent started directly
# (no systemd here): the node joins the loopback server with a single-use
# join token, and takes a job. A second run of the playbook changes
# nothing and leaves the agent running; a changed config restarts it.
# Usage: tests/package_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
for tool in dpkg-deb dpkg-shlibdeps ansible-playbook start-stop-daemon jq curl; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (./scripts/setup.sh --test)"
done
export ANSIBLE_NOCOLOR=1 ANSIBLE_LOCAL_TEMP="$W/ansible-tmp" ANSIBLE_REMOTE_TEMP="$W/ansible-tmp"
export ANSIBLE_HOME="$W/ansible-home" ANSIBLE_RETRY_FILES_ENABLED=0

# 1. The package.
version=$(sed -n 's/^project(loom VERSION \([0-9][0-9.]*\).*/\1/p' CMakeLists.txt)
arch=$(dpkg --print-architecture)
deb=$(./scripts/package.sh "$LOOM" "$W/out" 2> "$W/package.log") ||
  fail "scripts/package.sh: $(cat "$W/package.log")"
[ "$deb" = "$W/out/loom_${version}_${arch}.deb" ] && [ -s "$deb" ] || fail "no package at $deb"
[ "$(dpkg-deb -f "$deb" Package Version Architecture | tr '\n' ' ')" = \
  "Package: loom Version: $version Architecture: $arch " ] || fail "control: $(dpkg-deb -f "$deb")"
dpkg-deb -f "$deb" Depends | grep -q 'libc6 (>= ' || fail "Depends lacks libc6: $(dpkg-deb -f "$deb" Depends)"
dpkg-deb -I "$deb" conffiles | sort | tr '\n' ' ' | grep -qx '/etc/loom/agent.toml /etc/loom/server.toml ' ||
  fail "conffiles: $(dpkg-deb -I "$deb" conffiles)"
# A stale binary (another version than CMakeLists.txt's) is refused.
printf '#!/bin/sh\necho loom 0.0.1\n' > "$W/stale-loom" && chmod +x "$W/stale-loom"
if ./scripts/package.sh "$W/stale-loom" "$W/stale" > /dev/null 2> "$W/stale.log"; then
  fail "scripts/package.sh packaged a binary that says loom 0.0.1"
fi
grep -q "says 'loom 0.0.1' but CMakeLists.txt says $version" "$W/stale.log" || fail "stale: $(cat "$W/stale.log")"
echo "ok: $(basename "$deb"), $(($(stat -c %s "$deb") / 1024)) KiB"

# 2. Extracted into a scratch root: the binary, units and configs.
R="$W/root"
dpkg-deb -x "$deb" "$R" || fail "dpkg-deb -x"
for f in usr/bin/loom lib/systemd/system/loom-server.service lib/systemd/system/loom-agent.service \
  etc/loom/agent.toml etc/loom/server.toml usr/share/doc/loom/deploy.md; do
  [ -f "$R/$f" ] || fail "the package has no /$f"
done
[ "$(stat -c %a "$R/usr/bin/loom")" = 755 ] || fail "/usr/bin/loom mode $(stat -c %a "$R/usr/bin/loom")"
[ "$("$R/usr/bin/loom" --version)" = "loom $version" ] || fail "the packaged binary: $("$R/usr/bin/loom" --version 2>&1)"
"$R/usr/bin/loom" agent --help | grep -q -- '--config' || fail "the packaged loom agent has no --config"
unit="$R/lib/systemd/system/loom-agent.service"
grep -qx 'ExecStart=/usr/bin/loom agent --config /etc/loom/agent.toml' "$unit" || fail "agent ExecStart"
grep -qx 'KillMode=process' "$unit" || fail "the agent unit would kill its tasks on restart"
grep -qx 'ExecStart=/usr/bin/loom server --config /etc/loom/server.toml' \
  "$R/lib/systemd/system/loom-server.service" || fail "server ExecStart"
grep -qx 'join-token-file = "/etc/loom/join.token"' "$R/etc/loom/agent.toml" || fail "agent.toml names no join token file"
# The packaged configs are read by the binary: every key is a flag (with
# --help the file is read, then the help printed).
for verb in agent server; do
  "$R/usr/bin/loom" "$verb" --config "$R/etc/loom/$verb.toml" --help > "$W/$verb-help.out" 2>&1 ||
    fail "the packaged $verb.toml: $(head -3 "$W/$verb-help.out")"
done
# A bad key is refused, naming the file and the key, exit 2.
cp "$R/etc/loom/agent.toml" "$W/bad-agent.toml" && echo 'join-tokn-file = "/x"' >> "$W/bad-agent.toml"
"$R/usr/bin/loom" agent --config "$W/bad-agent.toml" > "$W/bad-agent.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "$W/bad-agent.toml: key 'join-tokn-file': not a flag of \`loom agent\`" "$W/bad-agent.out" ||
  fail "a bad agent.toml: exit $rc, $(cat "$W/bad-agent.out")"
echo "ok: the package extracts into a scratch root with its binary, units and configs"

# 3. systemd-analyze verify, in a copy of the root holding the host's own
# units (sysinit.target, ...) beside the package's. Skipped only when
# systemd-analyze cannot verify a unit of the host itself there.
V="$W/verify"
if ! command -v systemd-analyze > /dev/null || ! [ -d /lib/systemd/system ]; then
  echo "skip: systemd-analyze verify (no systemd-analyze or no /lib/systemd/system on this host)"
else
  cp -a "$R" "$V" && cp -an /lib/systemd/system/. "$V/lib/systemd/system/" || fail "copying units"
  if ! systemd-analyze --root="$V" verify multi-user.target > "$W/verify-host.out" 2>&1; then
    echo "skip: systemd-analyze verify cannot run here: $(head -c 200 "$W/verify-host.out")"
  else
    systemd-analyze --root="$V" verify loom-server.service loom-agent.service > "$W/verify.out" 2>&1 ||
      fail "systemd-analyze verify: $(cat "$W/verify.out")"
    [ ! -s "$W/verify.out" ] || fail "systemd-analyze verify warns: $(cat "$W/verify.out")"
    # It does catch a broken unit.
    sed 's|^ExecStart=/usr/bin/loom |ExecStart=/usr/bin/nonexistent-loom |' "$unit" \
      > "$V/lib/systemd/system/loom-broken.service"
    if systemd-analyze --root="$V" verify loom-broken.service > /dev/null 2>&1; then
      fail "systemd-analyze verify passed a unit whose binary does not exist"
    fi
    echo "ok: systemd-analyze verify passes both units"
  fi
fi

# 4. dpkg --root: installed into its own database, maintainer scripts run
# against the root (DPKG_ROOT), removed (configs stay), purged.
D="$W/dpkgroot"
mkdir -p "$D/var/lib/dpkg/info" "$D/var/lib/dpkg/updates" && touch "$D/var/lib/dpkg/status"
had_user=$(getent passwd loom > /dev/null && echo yes || echo no)
dpkg_root() { dpkg --root="$D" --force-script-chrootless --force-depends --log="$W/dpkg.log" "$@"; }
dpkg_root -i "$deb" > "$W/dpkg-install.out" 2>&1 || fail "dpkg --root -i: $(cat "$W/dpkg-install.out")"
[ "$(dpkg-query --root="$D" -W -f='${Version} ${Status}' loom)" = "$version install ok installed" ] ||
  fail "dpkg-query: $(dpkg-query --root="$D" -W loom 2>&1)"
[ -x "$D/usr/bin/loom" ] && [ -f "$D/lib/systemd/system/loom-agent.service" ] || fail "dpkg --root installed no files"
[ "$(stat -c %a "$D/var/lib/loom/agent")" = 700 ] || fail "the postinst made no 0700 /var/lib/loom/agent"
[ "$had_user" = yes ] || ! getent passwd loom > /dev/null || fail "the postinst under DPKG_ROOT made a loom user on this host"
dpkg_root -r loom > "$W/dpkg-remove.out" 2>&1 || fail "dpkg --root -r: $(cat "$W/dpkg-remove.out")"
[ ! -e "$D/usr/bin/loom" ] && [ ! -e "$D/lib/systemd/system/loom-agent.service" ] || fail "removal left the binary or a unit"
[ -f "$D/etc/loom/agent.toml" ] || fail "removal took the conffiles"
dpkg_root -P loom > "$W/dpkg-purge.out" 2>&1 || fail "dpkg --root -P: $(cat "$W/dpkg-purge.out")"
[ ! -e "$D/etc/loom/agent.toml" ] || fail "purge left /etc/loom/agent.toml"
[ -d "$D/var/lib/loom/agent" ] || fail "purge took the state under /var/lib/loom"
echo "ok: dpkg --root installs (postinst against the root), removes and purges it"

# 5. The playbook: a server on loopback, a single-use join token for the
# node, and an operator token for the wait.
cat > "$W/cluster.yaml" <<YAML
name: deploy
pools:
  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti, labels: {rack: a, zone: "1"}}
network: {nodes_per_leaf: 2, leaves_per_spine: 2}
YAML
start_server
"$LOOM" token create --join --nodes h200-0 --description "playbook" > "$W/node.token" 2> /dev/null ||
  fail "cannot make a join token"
"$LOOM" token create --role operator --user ops > "$W/ops.token" 2> /dev/null || fail "cannot make an operator token"
chmod 600 "$W/node.token" "$W/ops.token"
P="$W/prefix"
LISTEN="127.0.0.2:$((PORT + 1))"
cat > "$W/inventory.yml" <<YAML
all:
  children:
    loom_agents:
      hosts:
        h200-0:
          ansible_connection: local
          ansible_python_interpreter: /usr/bin/python3
          loom_agent_listen: "$LISTEN"
      vars:
        loom_deb: "$deb"
        loom_server_url: "$LOOM_SERVER"
        loom_join_token_file: "$W/node.token"
        loom_api_token_file: "$W/ops.token"
        loom_prefix: "$P"
        loom_use_systemd: false
        loom_join_retries: 30
        loom_node_labels: {rack: a, zone: "1"}
        loom_agent_config: {emulate: 8xH200, health-interval: 1s}
YAML
start=$SECONDS
ansible-playbook -i "$W/inventory.yml" -c local deploy/ansible/site.yml > "$W/ansible.log" 2>&1 ||
  fail "ansible-playbook: $(tail -30 "$W/ansible.log")"
took=$((SECONDS - start))
grep -Eq 'h200-0 +: ok=[0-9]+ +changed=[1-9]' "$W/ansible.log" || fail "the playbook changed nothing: $(tail -5 "$W/ansible.log")"
grep -q "node h200-0 is up at $LISTEN" "$W/ansible.log" || fail "the playbook did not report the join: $(tail -20 "$W/ansible.log")"
# What it wrote and started.
[ "$(stat -c %a "$P/etc/loom/join.token")" = 600 ] || fail "join.token mode $(stat -c %a "$P/etc/loom/join.token")"
cmp -s <(tr -d '\n' < "$P/etc/loom/join.token") <(tr -d '\n' < "$W/node.token") || fail "join.token is not the token"
grep -qx "data-dir = \"$P/var/lib/loom/agent\"" "$P/etc/loom/agent.toml" || fail "agent.toml: $(cat "$P/etc/loom/agent.toml")"
grep -qx 'emulate = "8xH200"' "$P/etc/loom/agent.toml" || fail "agent.toml lacks loom_agent_config"
[ "$(dpkg-query --root="$P" -W -f='${Version} ${Status}' loom)" = "$version install ok installed" ] ||
  fail "the playbook did not install the package under the prefix"
agent_pid=$(cat "$P/run/loom-agent.pid" 2> /dev/null)
[ -n "$agent_pid" ] && kill -0 "$agent_pid" 2> /dev/null || fail "no agent running from $P/run/loom-agent.pid"
PIDS+=("$agent_pid")
[ "$(readlink "/proc/$agent_pid/exe")" = "$P/usr/bin/loom" ] || fail "the agent is not the packaged binary"
tr '\0' ' ' < "/proc/$agent_pid/cmdline" | grep -q "agent --config $P/etc/loom/agent.toml" ||
  fail "agent command line: $(tr '\0' ' ' < "/proc/$agent_pid/cmdline")"
[ -s "$P/var/lib/loom/agent/credential" ] || fail "the agent keeps no credential: it did not join"
node=$("$LOOM" nodes -o json | jq -c '.nodes[] | select(.name == "h200-0")')
[ "$(jq -r .state <<< "$node")" = up ] && [ "$(jq -r .address <<< "$node")" = "$LISTEN" ] &&
  [ "$(jq -r .gpus <<< "$node")" = 8 ] || fail "node h200-0: $node"
if jq -e 'has("labels")' <<< "$node" > /dev/null; then
  jq -e '.labels.rack == "a" and .labels.zone == "1"' <<< "$node" > /dev/null || fail "labels: $node"
  echo "ok: the node carries its labels $(jq -c .labels <<< "$node")"
else
  echo "note: this server reports no node labels; checked that the node is up"
fi
# The node joined with the playbook's token (bound to h200-0, used once).
tokens=$("$LOOM" token list -o json 2> /dev/null)
jq -e '[.tokens[] | select(.description == "playbook" and (.joined | index("h200-0")))] | length == 1' \
  <<< "$tokens" > /dev/null || fail "the playbook's join token was not used by h200-0: $tokens"
echo "ok: the playbook installed the package into $P, wrote the config and join token, started the agent and the node joined with the token (${took} s)"

# 6. The node takes a job.
out=$("$LOOM" run -g 8 --name packaged --wait -- /bin/echo hi from the packaged agent 2>&1) ||
  fail "loom run: $out; agent: $(tail -20 "$P/var/log/loom-agent.log")"
job=$(grep -o 'job [0-9]*' <<< "$out" | head -1 | grep -o '[0-9]*$')
[ -n "$job" ] || fail "no job id in: $out"
state_is "$job" succeeded || fail "job $job: $(jget "$job" "j['state']")"
[ "$(jget "$job" "','.join(sorted({t['node'] for t in j['placement']['tasks']}))")" = h200-0 ] ||
  fail "job $job did not run on h200-0: $("$LOOM" show "$job" 2>&1 | head -20)"
[ "$("$LOOM" logs "$job" 2>&1)" = "hi from the packaged agent" ] || fail "job $job's output: $("$LOOM" logs "$job" 2>&1)"
echo "ok: the agent the playbook joined ran job $job (8 GPUs): its output came back"

# 7. Run again: nothing changes, the same agent keeps running.
ansible-playbook -i "$W/inventory.yml" -c local deploy/ansible/site.yml > "$W/ansible2.log" 2>&1 ||
  fail "second ansible-playbook: $(tail -30 "$W/ansible2.log")"
grep -Eq 'h200-0 +: ok=[0-9]+ +changed=0 +unreachable=0 +failed=0' "$W/ansible2.log" ||
  fail "the second run changed something: $(grep -B2 '^changed' "$W/ansible2.log" | head -20; tail -4 "$W/ansible2.log")"
[ "$(cat "$P/run/loom-agent.pid")" = "$agent_pid" ] && kill -0 "$agent_pid" 2> /dev/null ||
  fail "the second run restarted or stopped the agent"
echo "ok: a second run of the playbook changes nothing"

# 8. A changed config: the playbook restarts the agent, which comes back
# with its credential (the single-use join token is spent).
sed -i 's/health-interval: 1s/health-interval: 2s/' "$W/inventory.yml"
ansible-playbook -i "$W/inventory.yml" -c local deploy/ansible/site.yml > "$W/ansible3.log" 2>&1 ||
  fail "third ansible-playbook: $(tail -30 "$W/ansible3.log")"
grep -qx 'health-interval = "2s"' "$P/etc/loom/agent.toml" || fail "agent.toml was not rewritten"
new_pid=$(cat "$P/run/loom-agent.pid")
[ "$new_pid" != "$agent_pid" ] && kill -0 "$new_pid" 2> /dev/null || fail "the agent was not restarted for its new config"
PIDS+=("$new_pid")
! kill -0 "$agent_pid" 2> /dev/null || fail "the old agent $agent_pid still runs"
node_up() { "$LOOM" nodes -o json 2> /dev/null | jq -e '.nodes[] | select(.name == "h200-0" and .state == "up")' > /dev/null; }
wait_for 10 node_up || fail "h200-0 is not up after the restart"
out=$("$LOOM" run -g 1 --wait -- /bin/echo again 2>&1) || fail "a job after the restart: $out"
echo "ok: a changed config restarts the agent (pid $agent_pid -> $new_pid), which rejoins with its credential and runs a job"
echo "PASS"
