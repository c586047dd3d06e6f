#!/usr/bin/env bash
# loom's main job: sets up, builds, and starts a local cluster (`loom dev`: a
# server on the embedded SQLite store plus agents emulating 3 x 8 H200 and
# 1 x 8 A100 nodes on 127.0.0.2-5), submits the sample jobs of examples/dev
# when the cluster has none yet, and prints how to watch them. Ctrl-C stops
# the cluster; state stays under out/dev for the next run.
# LOOM_DEV_PORT picks another server port (default 7070).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh release loom
LOOM="$PWD/build/src/loom/cli/loom"
PORT="${LOOM_DEV_PORT:-7070}"
export LOOM_SERVER="http://127.0.0.1:$PORT"
# `loom dev` writes its admin token there at the first start.
export LOOM_TOKEN_FILE="$PWD/out/dev/admin.token"
mkdir -p out

# In the background: wait for the four nodes, submit the samples, show the tour.
(
  for _ in $(seq 300); do
    [ "$("$LOOM" nodes -o json 2>/dev/null | grep -c '"up"')" = 4 ] && break
    sleep 0.2
  done
  if ! "$LOOM" queue --all -o json 2>/dev/null | grep -q '"id"'; then
    for f in hello gang wide held; do
      "$LOOM" submit -f "examples/dev/$f.yaml"
    done
  fi
  sleep 2
  echo
  "$LOOM" nodes
  echo
  "$LOOM" queue --all
  cat <<TOUR

Try, in another terminal (export LOOM_SERVER=$LOOM_SERVER LOOM_TOKEN_FILE=$LOOM_TOKEN_FILE;
PATH=\$PATH:$(dirname "$LOOM")):
  loom whoami                      # the admin token loom dev made (docs/security.md)
  loom queue                       # squeue-like; pending jobs say why
  loom show 3                      # wide-eval: waiting for whole H200 nodes
  loom logs -f 2 --task 1          # gang-train, rank 1
  loom release 4                   # the held A100 sweep
  loom run -g 2 --wait -- sh -c 'echo GPUs \$CUDA_VISIBLE_DEVICES'
  loom cordon h200-2; loom nodes   # take a node out of scheduling
The dashboard: http://127.0.0.1:$PORT/#token=\$(cat \$LOOM_TOKEN_FILE)
Ctrl-C here stops the cluster.
TOUR
) &
exec "$LOOM" dev --port "$PORT" --data-dir out/dev
