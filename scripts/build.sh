#!/usr/bin/env bash
# Configures and builds loom. Usage: scripts/build.sh [release|asan] [targets...]
#   release  -> build/       (RelWithDebInfo: optimised, with line tables)
#   asan     -> build-asan/  (AddressSanitizer + UndefinedBehaviorSanitizer,
#                             clang when installed, else the default c++)
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:-release}"
shift || true
case "$kind" in
  # Line tables only (-g1): backtraces, perf and sanitizer reports need no
  # more, and full debug info made the build a third slower (CI's budget).
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG") ;;
  # With clang where it is installed (scripts/setup.sh --test installs it):
  # clang builds this tree in half the time g++ takes (controller.cc: 22 s
  # against 43 s), which is a third of CI's run. Line tables only, as above.
  asan) dir=build-asan
        flags=(-DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON -DLOOM_BUILD_BENCH=OFF
               "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1")
        if command -v clang++ > /dev/null; then
          flags+=(-DCMAKE_CXX_COMPILER=clang++)
        fi ;;
  *) echo "usage: $0 [release|asan] [targets...]" >&2; exit 2 ;;
esac
# Unity builds (CMakeLists.txt, LOOM_UNITY_BUILD): a target's sources in
# batches of 16, which took the server library from 136 to 37 CPU seconds
# and keeps CI within its budget. An edit then recompiles its batch: for
# quick rebuilds while editing, configure a tree without it.
flags+=(-DLOOM_UNITY_BUILD=ON)
cmake -S . -B "$dir" -G Ninja "${flags[@]}" > /dev/null
jobs=$(nproc 2>/dev/null || echo 2)
ninja -C "$dir" -j "$jobs" "$@"
