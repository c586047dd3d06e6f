#!/usr/bin/env bash
# The web dashboard end to end (docs/dashboard.md): headless Chromium
# (Debian's) loads `/` of a running local cluster, runs its JavaScript, and
# the test asserts on the rendered page: the running job's 8 GPU cells carry
# its id, the other 8 are idle, the waiting job is in the queue with its
# pending reason; the job page shows the placement, events and logs; the
# Maintenance panel shows a rolling maintenance and its node's phase.
# Screenshots go to out/test-artifacts/ (dashboard.png, dashboard-job.png).
# Usage: tests/dashboard_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
CHROMIUM=/usr/bin/chromium
[ -x "$CHROMIUM" ] || fail "no $CHROMIUM: install Debian's chromium (scripts/setup.sh --test does)"
ART="${LOOM_TEST_ARTIFACTS:-$PWD/out/test-artifacts}"
mkdir -p "$ART"
# chrome URL OUT ARGS...: runs headless Chromium on URL (JavaScript runs for
# up to 5 s of virtual time).
chrome() {
  timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$W/chromium" --virtual-time-budget=5000 "${@:2}" "$1" 2> "$W/chromium.err"
}

write_cluster 2
start_server
start_agents 2
echo "ok: two agents registered"
BUSY=$("$LOOM" run -g 8 --name busy -- sh -c 'echo hello-from-busy; sleep 600' | grep -o '[0-9]*$') || fail "submit busy"
for _ in $(seq 100); do
  "$LOOM" show "$BUSY" -o json | grep -q '"state": *"running"' && break
  sleep 0.1
done
# A job that fails without a checkpoint: its GPU-seconds are lost (goodput).
CRASH=$("$LOOM" run -g 8 --name crash -- sh -c 'sleep 1; exit 3' | grep -o '[0-9]*$') || fail "submit crash"
wait_for 30 state_is "$CRASH" failed || fail "the crash job did not fail: $("$LOOM" show "$CRASH")"
WIDE=$("$LOOM" run -g 16 --nodes 2 --name wide -- sleep 1 | grep -o '[0-9]*$') || fail "submit wide"
reason_of() { "$LOOM" show "$1" -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["reason"])'; }
# The reason a scheduling pass gave it (the page must show the same; until
# the first pass it is "queued; not yet considered ...").
passed() { ! reason_of "$WIDE" | grep -q "not yet considered"; }
wait_for 10 passed || fail "job $WIDE was not considered by a pass: $(reason_of "$WIDE")"
REASON=$(reason_of "$WIDE")
[ -n "$REASON" ] || fail "the waiting job has no reason"

# Without a token the page asks for one (and shows no data).
timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$W/chromium-anon" \
  --virtual-time-budget=3000 --dump-dom "$LOOM_SERVER/" > "$W/anon.html" 2> /dev/null
grep -q 'id="login" style="padding' "$W/anon.html" || fail "the page did not ask for a token: $(head -c 600 "$W/anon.html")"
grep -q 'class="gpu ' "$W/anon.html" && fail "the page showed GPUs without a token"
echo "ok: without a token the dashboard asks for one"
TOKEN=$(cat "$W/admin.token")
chrome "$LOOM_SERVER/#token=$TOKEN" --dump-dom > "$W/dom.html" || fail "chromium failed: $(tail -5 "$W/chromium.err")"
grep -q 'data-ready="1"' "$W/dom.html" || fail "the page did not finish rendering: $(head -c 600 "$W/dom.html")"
busy=$(grep -o "class=\"gpu busy\" style=\"[^\"]*\" data-node=\"h200-[01]\" data-gpu=\"[0-7]\" data-job=\"$BUSY\"" "$W/dom.html" | wc -l)
[ "$busy" = 8 ] || fail "want 8 GPU cells of job $BUSY, got $busy"
idle=$(grep -o 'class="gpu idle"' "$W/dom.html" | wc -l)
[ "$idle" = 8 ] || fail "want 8 idle GPU cells, got $idle"
[ "$(grep -o 'class="node up"' "$W/dom.html" | wc -l)" = 2 ] || fail "want 2 nodes up"
grep -q 'id="gpus-allocated">8</b> of <b id="gpus-total">16<' "$W/dom.html" || fail "allocation summary"
python3 - "$W/dom.html" "$WIDE" "$REASON" <<'PYEOF' || fail "queue row of job $WIDE"
import html, re, sys
dom, job, reason = open(sys.argv[1]).read(), sys.argv[2], sys.argv[3]
row = re.search(r'<tr class="job" data-job="%s">(.*?)</tr>' % job, dom)
assert row, "no queue row"
cell = re.search(r'<td class="reason">(.*?)</td>', row.group(1))
assert cell and html.unescape(cell.group(1)) == reason, (cell and cell.group(1), reason)
print("queue row:", html.unescape(cell.group(1)))
PYEOF
echo "ok: heat map shows job $BUSY on 8 GPUs and 8 idle; job $WIDE waits with its reason"
python3 - "$W/dom.html" <<'PYEOF' || fail "goodput panel: $(grep -o '<section id="goodput-section".\{0,600\}' "$W/dom.html")"
import re, sys
dom = open(sys.argv[1]).read()
cluster = re.search(r'id="goodput-cluster">([0-9.]+)%<', dom)
row = re.search(r'<tr class="goodput" data-project="default">.*?<td class="ratio">([0-9.]+)%</td>', dom)
assert cluster and row, "no goodput figures"
# The crash job lost its 8 GPU-seconds or so; busy has lost nothing.
assert 0 < float(row.group(1)) < 100, row.group(1)
print(f"goodput: cluster {cluster.group(1)}%, project default {row.group(1)}%")
PYEOF
echo "ok: the goodput panel shows the crash job's loss"

chrome "$LOOM_SERVER/#token=$TOKEN&/job/$BUSY" --dump-dom > "$W/job.html" || fail "chromium (job page)"
grep -q "Job $BUSY: busy" "$W/job.html" || fail "job page title: $(head -c 600 "$W/job.html")"
grep -q 'id="job-placement">1 node(s)' "$W/job.html" || fail "job page placement"
grep -q "started on 1 node(s)" "$W/job.html" || fail "job page events"
grep -q "hello-from-busy" "$W/job.html" || fail "job page logs"
grep -q 'id="job-goodput">100.0% (0.00 of ' "$W/job.html" || fail "job page goodput: $(grep -o 'id="job-goodput">[^<]*' "$W/job.html")"
echo "ok: job page shows placement, events and logs"

chrome "$LOOM_SERVER/#token=$TOKEN" --screenshot="$ART/dashboard.png" --window-size=1280,900 > /dev/null
chrome "$LOOM_SERVER/#token=$TOKEN&/job/$BUSY" --screenshot="$ART/dashboard-job.png" --window-size=1280,900 > /dev/null
for f in dashboard.png dashboard-job.png; do
  [ "$(head -c 8 "$ART/$f" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$ART/$f is not a PNG"
done
echo "ok: screenshots in $ART"

# loom top: the same at a glance in the terminal.
"$LOOM" top --once > "$W/top.out" || fail "loom top"
grep -q "^GPUs   8/16 allocated (50%)" "$W/top.out" || fail "top totals: $(cat "$W/top.out")"
grep -q "^Nodes  2, 2 up" "$W/top.out" || fail "top nodes"
grep -q "^leaf0  #\.$" "$W/top.out" || fail "top node map: $(cat "$W/top.out")"
grep -q "^$WIDE  *wide  .*next to run" "$W/top.out" || fail "top waiting job"
grep -q "^$BUSY  *busy  .*one node (h200-0)" "$W/top.out" || fail "top running job"
echo "ok: loom top"

# The Services panel: a service of one replica, ready, 1 of 1.
# (The 16-GPU job holds a reservation that no replica may delay: gone.)
"$LOOM" cancel "$WIDE" > /dev/null || fail "cancel $WIDE"
printf 'kind: service\nname: web\nreplicas: 1\nresources: {gpus: 1}\ncommand: [sleep, "600"]\n' > "$W/web.yaml"
"$LOOM" service apply -f "$W/web.yaml" > "$W/web.out" 2>&1 || fail "service apply: $(cat "$W/web.out")"
web_ready() { "$LOOM" service show web -o json | grep -q '"ready": *1'; }
wait_for 30 web_ready || fail "the service's replica is not ready: $("$LOOM" service show web)"
chrome "$LOOM_SERVER/#token=$TOKEN" --dump-dom > "$W/svc.html" || fail "chromium (services)"
grep -q '<tr class="service" data-service="web"><td>web</td>.*<td class="ready">1</td><td class="desired">1</td>' "$W/svc.html" ||
  fail "no services row: $(grep -o '<section id="services-section".\{0,800\}' "$W/svc.html")"
grep -q '<td class="status">1 of 1 replica(s) serving</td>' "$W/svc.html" || fail "services status: $(grep -o '<section id="services-section".\{0,800\}' "$W/svc.html")"
"$LOOM" service delete web > /dev/null || fail "service delete"
web_gone() { ! "$LOOM" service show web > /dev/null 2>&1; }
wait_for 30 web_gone || fail "the service was not deleted"
echo "ok: the services panel shows web, 1 of 1 ready"

# The Maintenance panel: a run whose command is still running on h200-1.
"$LOOM" maintain --nodes h200-1 --batch 1 --run 'sleep 60' > "$W/maint.out" 2>&1 ||
  fail "loom maintain: $(cat "$W/maint.out")"
maint_running() {
  curl -sf "${AUTH[@]}" "$LOOM_SERVER/v1/maintenance/1" | grep -q '"phase": *"running"'
}
wait_for 20 maint_running || fail "the maintenance's command did not start: $("$LOOM" maintain status)"
chrome "$LOOM_SERVER/#token=$TOKEN" --dump-dom > "$W/maint.html" || fail "chromium (maintenance)"
grep -q 'id="maint-summary" data-maint="1" data-state="running"' "$W/maint.html" ||
  fail "no maintenance summary: $(grep -o '<section id="maint-section".\{0,400\}' "$W/maint.html")"
grep -q '<tr class="maint-node" data-node="h200-1" data-phase="running">' "$W/maint.html" ||
  fail "no running row for h200-1: $(grep -o '<section id="maint-section".\{0,800\}' "$W/maint.html")"
echo "ok: the dashboard shows the maintenance and h200-1's phase"
echo "PASS"
