#!/usr/bin/env bash
# Builds loom's libFuzzer targets (fuzz/, docs/fuzzing.md) with clang into
# build-fuzz/ and runs each one for SECONDS (default 30), all at once, seeded
# with a copy of its corpus (fuzz/corpus/<target>/; the repository is not
# written to). Prints how many inputs each target ran. Exits non-zero when a
# target crashes, leaks, times out or runs out of memory; the input that did
# it is left in build-fuzz/fuzz-runs/<target>/ with the log.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (default: every target;
# SECONDS 0 only builds). LOOM_FUZZ_OPT: the optimisation level (default
# -O1, for long runs; the CI smoke run uses -O0, which builds in half the
# time and runs its 30 s slower). LOOM_FUZZ_SEED: libFuzzer's -seed (default:
# random). CI fixes it: its targets then start with the same mutations on
# every machine (coverage feedback drifts a little), so a longer run with
# the same seed and flags here covers most of what CI will try.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(job_spec_fuzzer cluster_spec_fuzzer server_api_fuzzer auth_fuzzer
           http_request_fuzzer)
fi
dir=build-fuzz
jobs=$(nproc 2>/dev/null || echo 2)

start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DLOOM_FUZZ=ON -DLOOM_UNITY_BUILD=ON \
  -DLOOM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=Debug \
  "-DCMAKE_CXX_FLAGS_DEBUG=${LOOM_FUZZ_OPT:--O1} -gline-tables-only" > /dev/null
ninja -C "$dir" -j "$jobs" "${targets[@]}"
built=$(date +%s)
echo "fuzz: built ${targets[*]} in $((built - start)) s"
if [ "$seconds" -eq 0 ]; then exit 0; fi  # build only

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
pids=()
for t in "${targets[@]}"; do
  run="$dir/fuzz-runs/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus"
  cp fuzz/corpus/"$t"/* "$run/corpus/"
  dict=()
  if [ -f "fuzz/dict/${t%_fuzzer}.dict" ]; then
    dict=("-dict=fuzz/dict/${t%_fuzzer}.dict")
  fi
  "$dir/fuzz/$t" -max_total_time="$seconds" -max_len=8192 -timeout=60 \
    -rss_limit_mb=2560 -print_final_stats=1 "${dict[@]}" ${LOOM_FUZZ_SEED:+-seed=$LOOM_FUZZ_SEED} \
    -artifact_prefix="$run/" "$run/corpus" > "$run/log" 2>&1 &
  pids+=($!)
done

failed=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  run="$dir/fuzz-runs/$t"
  rc=0
  wait "${pids[$i]}" || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run/log" | tail -1)
  secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$run/log" | tail -1)
  corpus=$(find "$run/corpus" -type f | wc -l)
  if [ "$rc" -ne 0 ]; then
    failed=1
    echo "fuzz: $t FAILED (exit $rc) after ${execs:-?} executions; log and input in $run/" >&2
    grep -v '^"' "$run/log" | tail -40 >&2 || true
  else
    echo "fuzz: $t: ${execs:-?} executions in ${secs:-$seconds} s, corpus $(ls fuzz/corpus/"$t" | wc -l) -> $corpus inputs"
  fi
done
echo "fuzz: total $(( $(date +%s) - start )) s (build $((built - start)) s)"
exit "$failed"
