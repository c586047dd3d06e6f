#!/usr/bin/env bash
# End-to-end checks of `loom sim` as a user runs it: good runs write their
# files; bad input gets a clear message and exit status 2, never a crash.
# Usage: tests/cli_sim_test.sh PATH_TO_LOOM
set -u
LOOM="$1"
cd "$(dirname "$0")/.."
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0

# expect RC PATTERN -- ARGS...: runs loom, checks the exit status and that
# stdout+stderr match PATTERN.
expect() {
  local want_rc="$1" pattern="$2"
  shift 3
  local out rc
  out=$("$LOOM" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want_rc" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL: loom $* -> rc=$rc (want $want_rc), output:"
    echo "$out" | head -20
    echo "(expected /$pattern/)"
    fails=$((fails + 1))
  else
    echo "ok: loom $*"
  fi
}

S=testdata/traces/sample.csv
expect 0 "presets|small" -- sim --help
expect 0 "large" -- sim --help
expect 0 "jobs finished" -- sim --cluster small --trace $S --policy fifo,fair \
  --json "$T/out.json" --plot "$T/out.html" --quiet
[ -s "$T/out.json" ] && grep -q '"policies"' "$T/out.json" || { echo "FAIL: no JSON"; fails=$((fails+1)); }
[ -s "$T/out.html" ] && grep -q "<svg" "$T/out.html" || { echo "FAIL: no plot"; fails=$((fails+1)); }
expect 0 "jobs finished" -- sim --cluster small --trace $S --plot "$T/out.svg" --quiet

# Bad flags and files.
expect 2 "unknown policy 'sjf'" -- sim --trace $S --policy fifo,sjf
expect 2 "no-such-cluster" -- sim --cluster no-such-cluster --trace $S
expect 2 "nope.csv" -- sim --trace "$T/nope.csv"
expect 2 "arrival-scale" -- sim --trace $S --arrival-scale -1
expect 2 "time-limits" -- sim --trace $S --time-limits maybe
expect 2 "las-thresholds" -- sim --trace $S --policy las --las-thresholds 1,x
expect 1 "cannot write" -- sim --trace $S --json /nonexistent-dir/out.json --quiet
expect 1 "plot" -- sim --trace $S --plot "$T/out.png" --quiet

# A broken cluster spec names the file, line and field.
printf 'pools:\n  - {name: h200, nodes: 2, gpu: {model: h200, count: 0}, cpus: 8, memory: 64Gi}\n' > "$T/bad.yaml"
expect 2 "bad.yaml:2:.*count" -- sim --cluster "$T/bad.yaml" --trace $S

# Bad trace lines are reported with their line number and skipped...
{ echo "job_id,submit_time,duration,num_gpus"; echo "a,0,100,1"; echo "b,10,-5,1";
  echo "c,20,100,many"; echo "d,30,100,2"; } > "$T/bad.csv"
expect 0 "line 3" -- sim --trace "$T/bad.csv" --quiet
expect 0 "2 bad lines" -- sim --trace "$T/bad.csv" --quiet
# ...or fail the run under --strict.
expect 2 "line 3" -- sim --trace "$T/bad.csv" --strict
# Garbage bytes are an error, not a crash.
head -c 4096 /dev/urandom > "$T/garbage.csv"
expect 2 "garbage.csv" -- sim --trace "$T/garbage.csv"
# A job larger than the cluster is infeasible, not queued forever.
{ echo "job_id,submit_time,duration,num_gpus"; echo "huge,0,100,4096"; echo "ok,1,100,8"; } > "$T/huge.csv"
expect 0 "jobs infeasible +1$" -- sim --cluster small --trace "$T/huge.csv" --policy fifo --quiet

# The Llama 3 failure model and a pre-training gang with hot spares.
expect 0 "llama3" -- sim --help
expect 0 "effective training time" -- sim --cluster small --trace $S --policy fair \
  --failure-model llama3 --checkpoint-interval 1800 --gang 12:48:2 --quiet
expect 0 "failure model llama3" -- sim --cluster small --trace $S --failure-model llama3 --quiet
expect 2 "unknown model 'weibull'" -- sim --trace $S --failure-model weibull
expect 2 "give one of them" -- sim --trace $S --failure-model llama3 --fail-mtbf 100
expect 2 "NODES:HOURS" -- sim --trace $S --gang 4:x
expect 2 "the cluster has 18" -- sim --cluster small --trace $S --gang 19:1

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all checks passed"
