#!/usr/bin/env bash
# The cluster as code on a live cluster with running jobs
# (docs/cluster-as-code.md): revision 1 seeded from --cluster; a plan and
# its exit codes; a stale plan refused; an apply that adds a pool (its agent
# joins and gets work), raises a quota and removes a node (its job moves,
# then the node is gone); a lowered quota that quota reclaim then enforces;
# `rollback --to 1`, which restores all; bad specs and impossible changes
# refused with nothing applied; the live revision kept across kill -9.
# Usage: tests/e2e_cluster_code_test.sh PATH_TO_LOOM [sqlite|etcd]
set -u
LOOM="$(realpath "$1")"
STORE="${2:-sqlite}"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh

SERVER_FLAGS=()
if [ "$STORE" = etcd ]; then
  command -v etcd > /dev/null || fail "etcd not installed (scripts/setup.sh --test installs etcd-server)"
  EPORT=$((10000 + RANDOM % 9000))
  etcd --name m1 --data-dir "$W/etcd" --heartbeat-interval=50 --election-timeout=500 \
    --listen-client-urls "http://127.0.0.1:$EPORT" --advertise-client-urls "http://127.0.0.1:$EPORT" \
    --listen-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((EPORT + 1))" \
    --initial-cluster "m1=http://127.0.0.1:$((EPORT + 1))" --logger zap --log-level warn \
    > "$W/etcd.log" 2>&1 &
  PIDS+=($!)
  wait_for 10 sh -c "curl -sf http://127.0.0.1:$EPORT/health | grep -q true" ||
    fail "etcd did not start: $(tail -3 "$W/etcd.log")"
  SERVER_FLAGS=(--store etcd --etcd-endpoints "http://127.0.0.1:$EPORT" --leader-lease 2)
fi

# spec H200_NODES [A100_NODES] SEARCH_QUOTA RESEARCH_QUOTA [EXTRA_PROJECT]
spec() {
  echo "name: e2e"
  echo "pools:"
  echo "  - {name: h200, nodes: $1, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}"
  [ "$2" -gt 0 ] && echo "  - {name: a100, nodes: $2, gpu: {model: a100, count: 8}, cpus: 96, memory: 1Ti}"
  echo "network: {nodes_per_leaf: 2, leaves_per_spine: 2}"
  echo "projects:"
  echo "  - {name: search, quota_gpus: $3}"
  [ -n "${5:-}" ] || echo "  - {name: research, quota_gpus: $4}"
}
spec 2 0 8 8 > "$W/cluster.yaml"
cp "$W/cluster.yaml" "$W/rev1.yaml"

start_server "${SERVER_FLAGS[@]}"
start_agents 2
"$LOOM" history > "$W/history" || fail "history: $(cat "$W/history")"
grep -q "1 (live).*initial revision" "$W/history" || fail "revision 1 not seeded: $(cat "$W/history")"
"$LOOM" plan -f "$W/cluster.yaml" > "$W/plan0" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "No changes" "$W/plan0" || fail "plan of the live spec: rc=$rc $(cat "$W/plan0")"
echo "ok: revision 1 seeded; a plan of the same spec exits 0"

# Two jobs fill both nodes: research (not preemptible) and search
# (preemptible).
cat > "$W/search.yaml" <<'YAML'
name: searcher
project: search
preemptible: true
resources: {gpus: 8}
command: ["/bin/sleep", "600"]
YAML
RESEARCH=$("$LOOM" run -g 8 --project research --name researcher -- /bin/sleep 600 | grep -o '[0-9]*$') ||
  fail "submit research"
SEARCH=$("$LOOM" submit -f "$W/search.yaml" | grep -o '[0-9]*$') || fail "submit search"
wait_for 10 state_is "$RESEARCH" running || fail "research job did not start"
wait_for 10 state_is "$SEARCH" running || fail "search job did not start"
ON_H1=$RESEARCH
[ "$(jget "$SEARCH" "j['placement']['tasks'][0]['node']")" = h200-1 ] && ON_H1=$SEARCH
echo "ok: jobs $RESEARCH and $SEARCH run; job $ON_H1 is on h200-1"

# Revision 2: a pool of one A100 node, search's quota 8 -> 16, h200-1 gone.
spec 1 1 16 8 > "$W/rev2.yaml"
"$LOOM" plan -f "$W/rev2.yaml" > "$W/plan2" 2>&1; rc=$?
[ $rc = 2 ] || fail "plan with changes: rc=$rc $(cat "$W/plan2")"
for want in "~ pool h200: nodes 2 -> 1" "+ pool a100 (1 node of 8x a100)" "- node h200-1" \
  "~ project search: quota_gpus 8 -> 16" "job $ON_H1 moves: node h200-1 is removed" \
  "Plan: 1 to add, 2 to change, 1 to remove." "--revision 1"; do
  grep -qF -- "$want" "$W/plan2" || fail "plan lacks '$want': $(cat "$W/plan2")"
done
"$LOOM" plan -f "$W/rev2.yaml" -o json > "$W/plan2.json"; rc=$?
[ $rc = 2 ] && [ "$(jq -r '.changes | length' "$W/plan2.json")" = 4 ] &&
  [ "$(jq -r '.effects.drain[0].job' "$W/plan2.json")" = "$ON_H1" ] ||
  fail "plan -o json: rc=$rc $(cat "$W/plan2.json")"
out=$("$LOOM" apply -f "$W/rev2.yaml" --revision 0 2>&1); rc=$?
[ $rc = 1 ] && grep -q "live cluster revision is 1, not 0" <<<"$out" || fail "stale plan applied: rc=$rc $out"
"$LOOM" history -o json | jq -e '.revisions | length == 1' > /dev/null || fail "a refused apply made a revision"
echo "ok: plan text, JSON and exit code 2; a stale plan is refused"

"$LOOM" apply -f "$W/rev2.yaml" --revision 1 > "$W/apply2" 2>&1 || fail "apply: $(cat "$W/apply2")"
grep -q "Applied as revision 2. Draining h200-1 first" "$W/apply2" || fail "apply output: $(cat "$W/apply2")"
# The new pool's agent joins.
"$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.9:$((PORT + 9))" --name a100-0 \
  --data-dir "$W/agent-a100" --emulate 8xA100 --join-token-file "$W/join.token" >> "$W/agent-a100.log" 2>&1 &
PIDS+=($!)
node_state() { "$LOOM" nodes -o json 2>/dev/null | jq -r --arg n "$1" '[.. | objects | select(.name? == $n)][0].state // "gone"'; }
wait_for 15 sh -c "[ \"\$(\"$LOOM\" nodes -o json | jq -r '[.. | objects | select(.name? == \"a100-0\")][0].state')\" = up ]" ||
  fail "a100-0 did not join: $(node_state a100-0)"
# The job on h200-1 moves (to a100-0, the only free node), then h200-1 goes.
wait_for 20 sh -c "[ \"\$(\"$LOOM\" show $ON_H1 -o json | jq -r '.placement.tasks[0].node + \" \" + .state')\" = 'a100-0 running' ]" ||
  fail "job $ON_H1 did not move: $("$LOOM" show "$ON_H1")"
wait_for 10 sh -c "[ \"\$(\"$LOOM\" nodes -o json | jq -r '[.. | objects | select(.name? == \"h200-1\")] | length')\" = 0 ]" ||
  fail "h200-1 is still listed: $("$LOOM" nodes)"
"$LOOM" show "$ON_H1" | grep -q "moved off its node: node h200-1 is removed (cluster revision 2)" ||
  fail "the move is not in the job's events: $("$LOOM" show "$ON_H1")"
[ "$(jget "$ON_H1" "j['requeues']")" = 1 ] || fail "the move is not a requeue: $("$LOOM" show "$ON_H1" -o json)"
echo "ok: revision 2 live: a100-0 joined and took job $ON_H1 from h200-1, which is gone"

# Revision 3: search's quota 16 -> 0, research's 8 -> 16: a research job
# within its quota reclaims the GPUs search borrows.
spec 1 1 0 16 > "$W/rev3.yaml"
"$LOOM" plan -f "$W/rev3.yaml" > "$W/plan3" 2>&1; rc=$?
[ $rc = 2 ] && grep -qF "project search goes over its quota: 8 GPUs running, quota 0 (was 16)" "$W/plan3" ||
  fail "plan of the quota change: rc=$rc $(cat "$W/plan3")"
"$LOOM" apply -f "$W/rev3.yaml" --revision 2 > "$W/apply3" 2>&1 || fail "apply 3: $(cat "$W/apply3")"
state_is "$SEARCH" running || fail "a lowered quota stopped a job by itself"
RECLAIM=$("$LOOM" run -g 8 --project research --name reclaimer -- /bin/sleep 600 | grep -o '[0-9]*$') ||
  fail "submit reclaimer"
wait_for 20 state_is "$RECLAIM" running || fail "reclaimer did not run: $("$LOOM" show "$RECLAIM"); search job: $("$LOOM" show "$SEARCH")"
state_is "$SEARCH" pending || fail "search job not reclaimed: $("$LOOM" show "$SEARCH")"
"$LOOM" show "$SEARCH" | grep -q "reclaims GPUs of its quota" || fail "no reclaim reason: $("$LOOM" show "$SEARCH")"
echo "ok: revision 3 lowered search's quota; job $RECLAIM reclaimed job $SEARCH's GPUs"

# Bad input: nothing applied.
printf 'pools:\n  - {name: h200, nodes: 1, gpu: {model: h200, count: 0}, cpus: 1, memory: 1Gi}\n' > "$W/bad.yaml"
out=$("$LOOM" plan -f "$W/bad.yaml" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "bad.yaml:2:.*pools\[0\].gpu.count: must be between 1 and 16" <<<"$out" ||
  fail "malformed spec: rc=$rc $out"
out=$("$LOOM" apply -f "$W/bad.yaml" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "gpu.count" <<<"$out" || fail "malformed apply: rc=$rc $out"
spec 1 1 0 16 no-research > "$W/norsearch.yaml"
out=$("$LOOM" apply -f "$W/norsearch.yaml" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "project 'research' is not in the new spec but has 2 unfinished job(s)" <<<"$out" ||
  fail "project removed under its jobs: rc=$rc $out"
out=$("$LOOM" plan -f "$W/nope.yaml" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "nope.yaml" <<<"$out" || fail "missing file: rc=$rc $out"
out=$(curl -s "${AUTH[@]}" -X POST "$LOOM_SERVER/v1/cluster/apply" -d '{"spec": 7}')
grep -q '"code":"invalid_argument"' <<<"$out" || fail "garbage body: $out"
"$LOOM" history -o json | jq -e '(.revisions | length) == 3 and .live_revision == 3' > /dev/null ||
  fail "bad input changed the revisions: $("$LOOM" history)"
echo "ok: malformed specs and impossible changes refused; nothing applied"

# kill -9: the live revision survives, and the server says its --cluster
# file (revision 1's) differs.
kill -9 "$SERVER"; wait "$SERVER" 2>/dev/null
start_server "${SERVER_FLAGS[@]}"
"$LOOM" plan -f "$W/rev3.yaml" > /dev/null 2>&1 || fail "after kill -9 revision 3 is not live"
grep -q "differs from the live revision 3" "$W/server.log" || fail "no differs warning: $(tail -5 "$W/server.log")"
wait_for 15 sh -c "[ \"\$(\"$LOOM\" nodes -o json | grep -c '\"up\"')\" = 2 ]" || fail "nodes after restart: $("$LOOM" nodes)"
echo "ok: revision 3 is live after kill -9 of the server"

# Rollback to revision 1: h200-1 is back (its agent registers again),
# a100-0 is drained and goes, the quotas are 8 and 8 again.
out=$("$LOOM" rollback --to 1 --revision 3 2>&1) || fail "rollback: $out"
grep -q "Applied as revision 4 (the spec of revision 1)" <<<"$out" || fail "rollback output: $out"
grep -qF "+ node h200-1" <<<"$out" && grep -qF -- "- pool a100" <<<"$out" || fail "rollback plan: $out"
AGENT_PIDS_OLD=${AGENT_PIDS[1]}
kill -9 "$AGENT_PIDS_OLD" 2>/dev/null
restart_agent 1
wait_for 20 sh -c "[ \"\$(\"$LOOM\" nodes -o json | jq -r '[.. | objects | select(.name? == \"a100-0\")] | length')\" = 0 ]" ||
  fail "a100-0 is still listed: $("$LOOM" nodes)"
"$LOOM" plan -f "$W/rev1.yaml" > "$W/plan-after" 2>&1 || fail "after rollback the live spec is not revision 1's: $(cat "$W/plan-after")"
"$LOOM" history > "$W/history" && grep -q "4 (live).*(rollback to 1)" "$W/history" || fail "history: $(cat "$W/history")"
# Job 3, drained off a100-0, runs again on h200-1 once that node is back
# and a pass places it (a moment later under the sanitizers).
two_running() {
  "$LOOM" queue -o json | jq -e '[.jobs[]? // .[]? | select(.state == "running")] | length >= 2' > /dev/null
}
wait_for 20 two_running ||
  fail "jobs after rollback: $("$LOOM" queue --all; for j in "$SEARCH" "$RECLAIM"; do "$LOOM" show "$j"; done 2>&1)"
for n in h200-0 h200-1; do [ "$(node_state $n)" = up ] || fail "$n after rollback: $(node_state $n)"; done
echo "ok: rollback --to 1 restored the nodes and quotas as revision 4"
echo "all checks passed ($STORE)"
