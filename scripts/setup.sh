#!/usr/bin/env bash
# Installs everything loom needs to build and test on Debian 12 (bookworm).
# Safe to run again; safe while another process runs apt (waits for the lock).
# Usage: scripts/setup.sh [--test|--bench]; --test adds what only the tests need
# (Debian's python3-torch for the torch.distributed end-to-end test,
# prometheus for the metrics test, chromium for the dashboard test, etcd
# for the etcd store and HA tests, clang and its libFuzzer runtime for
# scripts/fuzz.sh, a registry and the tools that build and push a test image
# for the image tests: docker-registry, umoci, skopeo, jq, busybox-static,
# and runc for running tasks in images, ansible-core for the playbook in
# deploy/ansible that tests/package_test.sh runs, and wrk, the load of the
# services test and benchmark). Every set-up has haproxy: `loom gateway`
# runs it (docs/services.md), and rclone: agents fill their dataset cache
# with it and the server lists datasets with it (docs/datasets.md); the
# dataset test serves its cold store with `rclone serve http`. --bench installs --test's
# packages plus what only the benchmarks need: stress-ng, which saturates the
# CPUs in bench/liveness.sh.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
APT="$SUDO apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends"

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev libyaml-cpp-dev nlohmann-json3-dev libfmt-dev libcli11-dev
  libsqlite3-dev libcpp-httplib-dev libarchive-dev
  libgtest-dev libgmock-dev libbenchmark-dev time curl haproxy rclone
)
if [ "${1:-}" = "--test" ] || [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(python3-torch prometheus chromium etcd-server etcd-client
             clang libclang-rt-dev
             docker-registry umoci skopeo jq busybox-static runc ansible-core
             wrk)
fi
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(stress-ng)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q -o DPkg::Lock::Timeout=900
  $APT "${missing[@]}"
else
  echo "setup: all packages present"
fi
