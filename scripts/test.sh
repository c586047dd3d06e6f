#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: installs what is
# missing, builds loom twice (optimised, and with ASan+UBSan) and runs every
# test in the optimised build and all but the slowest end-to-end scripts in
# the ASan+UBSan one (src/loom/cli/CMakeLists.txt), then 30 s of each fuzz
# target with a fixed seed (docs/fuzzing.md). After each ctest run, no
# process a test started may still be running (named, then the suite
# fails). Exit status 0 means everything passed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh --test
jobs=$(nproc 2>/dev/null || echo 2)

# ctest runs as a child subreaper (tests/lib/reaper.py): every process a
# test starts stays its descendant, orphaned or not, and once ctest is done
# any still running was left by a test: they are named, killed, and the
# suite fails.
root=$PWD
reaped() { /usr/bin/python3 "$root/tests/lib/reaper.py" --name "$1" -- "${@:2}"; }

echo "== release build"
./scripts/build.sh release
(cd build && reaped "ctest (release)" ctest --output-on-failure -j "$jobs")

echo "== ASan+UBSan build"
./scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  reaped "ctest (ASan+UBSan)" ctest --output-on-failure -j "$jobs")

echo "== fuzz targets (30 s each; docs/fuzzing.md)"
LOOM_FUZZ_OPT=-O0 LOOM_FUZZ_SEED=1 ./scripts/fuzz.sh 30

echo "== all tests passed"
