#!/usr/bin/env bash
# Jobs in container images end to end (docs/images.md): a loopback registry
# (Debian's docker-registry) holds a busybox image built here offline; a
# server and two agents emulating 8-GPU H200 nodes run a gang of four tasks
# in it, two on each node. Each task sees only its GPUs' (stand-in) device
# files, the env contract, the job's uid, a read-only root and its mount;
# each node pulled each layer once although it ran two tasks. Stop and
# signals reach the container; a container task outlives its agent's kill -9
# and is re-adopted; a bad image or mount is refused at submit with nothing
# stored; the image stores are root's alone and a file a layer gives to uid
# 1000 is root's; a mount source swapped for a symbolic link during the pull
# binds the checked directory; an image that cannot be pulled on the nodes
# fails the job with the reason and leaves the nodes up.
# Usage: tests/e2e_container_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
source tests/lib/registry.sh
for tool in docker-registry umoci skopeo jq runc; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (scripts/setup.sh --test)"
done
[ "$(id -u)" = 0 ] || { echo "SKIP: container tasks need root (runc)"; exit 0; }

# job_named NAME: the id of the job called NAME.
job_named() {
  "$LOOM" queue --all -o json | jq -r --arg n "$1" '.. | objects | select(.name? == $n) | .id' | head -1
}

start_registry
mkdir -p "$W/image/etc" "$W/data"
echo "from the image" > "$W/image/etc/loom-test"
# A file the layer gives to uid 1000, a local user's on many hosts: on the
# nodes it must be root's (docs/images.md, "Owners").
echo "uid 1000's in the layer" > "$W/image/etc/owned-by-1000"
chown 1000:1000 "$W/image/etc/owned-by-1000"
chmod 0666 "$W/image/etc/owned-by-1000"
echo "from the host's data dir" > "$W/data/hello"
DIGEST=$(push_busybox_image test/busybox:1 "$W/image") || fail "push the image"
echo "ok: test/busybox:1 ($DIGEST) in the registry on $REG"

write_cluster 2
cat >> "$W/cluster.yaml" <<YAML
containers: {allowed_mounts: ["$W/data"]}
services: {port_range: $((PORT + 62))-$((PORT + 63))}
YAML
start_server --insecure-registry "$REG"
AGENT_FLAGS=(--insecure-registry "$REG")
start_agents 2

# The uid a host task of the same user runs as.
"$LOOM" run -g 1 --name host --wait -- /bin/sh -c 'id -u' > "$W/host.out" 2>&1 || fail "host job: $(cat "$W/host.out")"
HOST_ID=$(job_named host)
HOST_UID=$("$LOOM" logs "$HOST_ID" | tr -d '[:space:]')

# Four tasks of four GPUs, two on each node, in the image.
LAYERS_BEFORE=$(wc -l < "$W/registry.log")
cat > "$W/boxed.yaml" <<YAML
name: boxed
tasks: 4
resources: {gpus_per_task: 4}
container:
  image: $REG/test/busybox:1
  mounts: ["$W/data:/data:ro"]
command:
  - /bin/sh
  - -c
  - |
    echo "rank=\$RANK world=\$WORLD_SIZE cvd=\$CUDA_VISIBLE_DEVICES nvd=\$NVIDIA_VISIBLE_DEVICES"
    echo "uid=\$(id -u) image_var=\$IMAGE_VAR"
    echo "devices=\$(ls /dev | grep "^nvidia[0-9]" | tr "\n" " ")"
    cat /etc/loom-test /data/hello
    touch /probe 2> /dev/null && echo root=rw || echo root=ro
    touch /data/probe 2> /dev/null && echo data=rw || echo data=ro
    grep -q " / overlay " /proc/mounts && echo root=overlay
    [ -e /work ] || echo no-host-tree
    echo "owner=\$(stat -c %u /etc/owned-by-1000)"
YAML
"$LOOM" submit -f "$W/boxed.yaml" > "$W/boxed.out" 2>&1 || fail "submit boxed: $(cat "$W/boxed.out")"
ID=$(job_named boxed)
wait_for 60 state_is "$ID" succeeded || fail "boxed did not succeed: $(cat "$W/boxed.out"; "$LOOM" show "$ID")"
"$LOOM" show "$ID" > "$W/show.txt" || fail "loom show"
grep -q "$DIGEST" "$W/show.txt" || fail "loom show has no digest: $(cat "$W/show.txt")"
grep -q "test/busybox:1" "$W/show.txt" || fail "loom show has no image: $(cat "$W/show.txt")"
for t in 0 1 2 3; do
  "$LOOM" logs "$ID" --task "$t" > "$W/t$t.out" 2>&1 || fail "logs of task $t"
  out=$(cat "$W/t$t.out")
  grep -q "^rank=$t world=4 cvd=0,1,2,3 nvd=[0-9],[0-9],[0-9],[0-9]$" <<< "$out" ||
    fail "task $t: env contract / GPUs: $out"
  nvd=$(sed -n 's/.* nvd=//p' <<< "$out")
  want="nvidia${nvd//,/ nvidia} "
  grep -qx "devices=$want" <<< "$out" || fail "task $t: devices (want $want): $out"
  grep -qx "uid=$HOST_UID image_var=from-image" <<< "$out" || fail "task $t: uid/env: $out"
  grep -qx "from the image" <<< "$out" || fail "task $t: no image file: $out"
  grep -qx "from the host's data dir" <<< "$out" || fail "task $t: no mount: $out"
  grep -qx "root=ro" <<< "$out" || fail "task $t: the root is writable: $out"
  grep -qx "data=ro" <<< "$out" || fail "task $t: the read-only mount is writable: $out"
  grep -qx "root=overlay" <<< "$out" || fail "task $t: root is not the overlay: $out"
  grep -qx "no-host-tree" <<< "$out" || fail "task $t: sees the host's tree: $out"
  grep -qx "owner=0" <<< "$out" || fail "task $t: a layer's uid 1000 owns an image file: $out"
done
echo "ok: four tasks in the image saw their GPUs' devices, the contract, uid $HOST_UID, a read-only root and the mount"

# The node's image store: root's alone, and the layer's uid-1000 file root's,
# so that local uid 1000 can neither reach nor change what others run.
for i in 0 1; do
  [ "$(stat -c '%a %u' "$W/agent$i/images")" = "700 0" ] ||
    fail "agent $i's image store is $(stat -c '%a %u' "$W/agent$i/images"), not 700 root's"
  f=$(find "$W/agent$i/images/images" -path '*/rootfs/etc/owned-by-1000' | head -1)
  [ -n "$f" ] || fail "agent $i: no owned-by-1000 in its store"
  [ "$(stat -c %u "$f")" = 0 ] || fail "agent $i: $f belongs to uid $(stat -c %u "$f")"
  setpriv --reuid=1000 --regid=1000 --clear-groups sh -c "chmod u+w '$f' && echo bob >> '$f'" 2> /dev/null &&
    fail "uid 1000 could write $f"
  setpriv --reuid=1000 --regid=1000 --clear-groups ls "$W/agent$i/images/images" > /dev/null 2>&1 &&
    fail "uid 1000 can list agent $i's image store"
done
grep -q "uid 1000's in the layer" "$f" || fail "$f was changed"
echo "ok: the image stores are 0700 root's; a file the layer gave uid 1000 is root's and uid 1000 cannot write it"

# Each layer fetched once per node: two nodes, twice in all.
sleep 0.5
tail -n +"$((LAYERS_BEFORE + 1))" "$W/registry.log" > "$W/pulls.log"
for layer in $(skopeo inspect --raw --tls-verify=false "docker://$REG/test/busybox:1" | jq -r '.layers[].digest'); do
  n=$(grep -c "\"GET /v2/test/busybox/blobs/$layer " "$W/pulls.log")
  [ "$n" = 2 ] || fail "layer $layer was fetched $n times by two nodes"
done
echo "ok: each node pulled each layer once for its two tasks"
grep -q "pulled its image in" "$W/show.txt" || fail "no pull event in loom show: $(cat "$W/show.txt")"
echo "ok: the pull is a phase of the start in the job's events"

# The nodes' images, and a pull asked ahead of a run.
wait_for 10 sh -c "\"$LOOM\" images | grep -c 'test/busybox .* present' | grep -qx 2" ||
  fail "loom images does not list the image on both nodes: $("$LOOM" images)"
push_busybox_image test/pre:1 > /dev/null || fail "push test/pre:1"
PRE_BEFORE=$(wc -l < "$W/registry.log")
"$LOOM" image pull "$REG/test/pre:1" --nodes h200-1 > "$W/pre.out" 2>&1 || fail "image pull: $(cat "$W/pre.out")"
grep -q "^h200-1: pulled" "$W/pre.out" || fail "image pull: $(cat "$W/pre.out")"
"$LOOM" images --node h200-1 | grep -q "test/pre .* present" || fail "pre-pulled image not listed: $("$LOOM" images)"
"$LOOM" images --node h200-0 | grep -q "test/pre" && fail "h200-0 was not asked to pull: $("$LOOM" images)"
tail -n +"$((PRE_BEFORE + 1))" "$W/registry.log" | grep -q '"GET /v2/test/pre/blobs/' || fail "no blob fetched by the pre-pull"
"$LOOM" image pull "$REG/test/pre:1" --nodes h200-1 > "$W/pre2.out" 2>&1 || fail "image pull again: $(cat "$W/pre2.out")"
"$LOOM" image pull "$REG/test/nothere:1" --pool h200 > "$W/nothere.out" 2>&1 && fail "pull of an unknown tag succeeded"
grep -q "not found" "$W/nothere.out" || fail "unknown tag: $(cat "$W/nothere.out")"
echo "ok: loom images lists each node's images; loom image pull pre-pulled one node"

# Stop reaches the container: a task that traps SIGTERM says so.
"$LOOM" run -g 1 --name trap --image "$REG/test/busybox:1" -- /bin/sh -c \
  'trap "echo got-term; exit 0" TERM; echo ready; while true; do sleep 0.1; done' > /dev/null ||
  fail "submit trap"
TRAP=$(job_named trap)
wait_for 20 sh -c "'$LOOM' logs $TRAP 2>/dev/null | grep -q ready" || fail "trap never started: $("$LOOM" show "$TRAP")"
"$LOOM" cancel "$TRAP" > /dev/null || fail "cancel"
wait_for 20 sh -c "'$LOOM' logs $TRAP 2>/dev/null | grep -q got-term" || fail "SIGTERM did not reach the container: $("$LOOM" logs "$TRAP")"
wait_for 20 state_is "$TRAP" cancelled || fail "trap not cancelled: $("$LOOM" show "$TRAP")"
echo "ok: cancel's SIGTERM reached the container's process"

# An agent killed while a container task runs: the task's shim and runc keep
# it running, the restarted agent re-adopts it (and its image), and it ends
# as it would have; once forgotten, its bundle is gone.
"$LOOM" run -g 8 --name survivor --image "$REG/test/busybox:1" -- /bin/sh -c \
  'echo started; sleep 4; echo finished' > /dev/null || fail "submit survivor"
SURVIVOR=$(job_named survivor)
wait_for 20 sh -c "'$LOOM' logs $SURVIVOR 2>/dev/null | grep -q started" ||
  fail "survivor never started: $("$LOOM" show "$SURVIVOR")"
NODE=$(jget "$SURVIVOR" "j['placement']['tasks'][0]['node']")
I=${NODE#h200-}
kill -9 "${AGENT_PIDS[$I]}"
restart_agent "$I"
# restart_agent returns once the server sees the node up, which it may still
# do from before the kill: wait for the new agent's recovery line.
wait_for 20 grep -Eq "recovered [0-9]+ tasks \([1-9][0-9]* running" "$W/agent$I.log" ||
  fail "the task was not re-adopted: $(tail -5 "$W/agent$I.log")"
wait_for 30 state_is "$SURVIVOR" succeeded || fail "survivor after the agent's restart: $("$LOOM" show "$SURVIVOR")"
"$LOOM" logs "$SURVIVOR" | grep -q finished || fail "survivor did not finish: $("$LOOM" logs "$SURVIVOR")"
wait_for 20 sh -c "[ -z \"\$(ls '$W/agent$I/containers')\" ]" ||
  fail "bundles left: $(ls "$W/agent$I/containers")"
echo "ok: a container task outlived its agent's kill -9, was re-adopted and finished; its bundle went"

# Bad input at submit: nothing stored.
before=$("$LOOM" queue --all -o json | grep -c '"id"')
out=$("$LOOM" run -g 1 --image "$REG/test/busybox:nope" -- true 2>&1) && fail "an unknown tag was accepted"
grep -q "container.image" <<< "$out" || fail "unknown tag: $out"
out=$("$LOOM" run -g 1 --image "$REG/test/nothing:1" -- true 2>&1) && fail "an unknown repository was accepted"
grep -q "container.image" <<< "$out" || fail "unknown repository: $out"
out=$("$LOOM" run -g 1 --image "not a reference" -- true 2>&1) && fail "a malformed reference was accepted"
grep -q -- "--image" <<< "$out" || fail "malformed reference: $out"
# One the CLI lets through, the server's parser refuses (no registry host).
out=$(curl -s "${AUTH[@]}" -X POST "$LOOM_SERVER/v1/jobs" \
  -d '{"name": "x", "command": ["true"], "container": {"image": "busybox:1"}}')
grep -q '"field":"container.image"' <<< "$out" || fail "no registry host: $out"
out=$("$LOOM" run -g 1 --image "$REG/test/busybox:1" --mount /etc:/host-etc -- true 2>&1) &&
  fail "a mount outside allowed_mounts was accepted"
grep -q "container.mounts\[0\]" <<< "$out" || fail "mount outside allowed_mounts: $out"
out=$("$LOOM" run -g 1 --image "127.0.0.1:1/test/busybox:1" -- true 2>&1) && fail "an unreachable registry was accepted"
grep -qi "unavailable\|503\|cannot" <<< "$out" || fail "unreachable registry: $out"
after=$("$LOOM" queue --all -o json | grep -c '"id"')
[ "$before" = "$after" ] || fail "refused jobs were stored ($before -> $after)"
echo "ok: bad images and mounts refused at submit, nothing stored"

# A mount source swapped for a symbolic link while the image is pulled (the
# registry stopped meanwhile): the container gets the directory the agent
# checked, never the link's target (docs/images.md, "Mounts").
mkdir -p "$W/image-swap/etc" "$W/data/swap" "$W/private"
echo "swap test" > "$W/image-swap/etc/swap"
push_busybox_image test/swap:1 "$W/image-swap" > /dev/null || fail "push test/swap:1"
echo "checked" > "$W/data/swap/hello"
echo "another user's" > "$W/private/hello"
chmod 0700 "$W/private"
"$LOOM" run -g 8 --hold --name swap --image "$REG/test/swap:1" --mount "$W/data/swap:/swap:ro" -- \
  /bin/cat /swap/hello > "$W/swap.out" 2>&1 || fail "submit swap: $(cat "$W/swap.out")"
SWAP=$(job_named swap)
kill -STOP "$REGISTRY_PID"
"$LOOM" release "$SWAP" > /dev/null || { kill -CONT "$REGISTRY_PID"; fail "release swap"; }
wait_for 20 sh -c "grep -q '(job $SWAP) waits for image' '$W'/agent*.log" ||
  { kill -CONT "$REGISTRY_PID"; fail "swap never waited for its pull: $("$LOOM" show "$SWAP")"; }
mv "$W/data/swap" "$W/data/swap.old"
ln -s "$W/private" "$W/data/swap"
kill -CONT "$REGISTRY_PID"
wait_for 60 state_is "$SWAP" succeeded || fail "swap did not succeed: $("$LOOM" show "$SWAP")"
out=$("$LOOM" logs "$SWAP")
[ "$out" = "checked" ] || fail "the swapped mount bound the link's target: $out"
# Swapped before the launch: refused, saying why.
"$LOOM" run -g 8 --name swapped --image "$REG/test/swap:1" --mount "$W/data/swap:/swap:ro" -- \
  /bin/cat /swap/hello > /dev/null 2>&1 || fail "submit swapped"
SWAPPED=$(job_named swapped)
wait_for 30 state_is "$SWAPPED" failed || fail "a link as the source was run: $("$LOOM" show "$SWAPPED")"
"$LOOM" show "$SWAPPED" | grep -q "container.mounts\[0\].source: on node h200-[01]: $W/data/swap is reached through a symbolic link" ||
  fail "no reason for the refused link: $("$LOOM" show "$SWAPPED")"
"$LOOM" logs "$SWAPPED" 2> /dev/null | grep -q "another user's" && fail "the link's target was read"
rm "$W/data/swap"
echo "ok: a mount source swapped for a link during the pull bound the checked directory; a link at launch is refused"

# A pull that fails on the nodes: the job fails with the reason, no restart
# loop, the nodes stay up. The job is held while the registry loses the
# image's blobs after the server pinned its digest.
push_busybox_image test/gone:1 > /dev/null || fail "push test/gone:1"
"$LOOM" run -g 8 --nodes 2 --hold --name gone --image "$REG/test/gone:1" -- true > "$W/gone.out" 2>&1 ||
  fail "submit gone: $(cat "$W/gone.out")"
GONE=$(job_named gone)
for layer in $(skopeo inspect --raw --tls-verify=false "docker://$REG/test/gone:1" | jq -r '.layers[].digest'); do
  rm -rf "$W/registry/docker/registry/v2/blobs/sha256/${layer:7:2}/${layer#sha256:}"
done
"$LOOM" release "$GONE" > /dev/null || fail "release gone"
wait_for 30 state_is "$GONE" failed || fail "gone did not fail: $("$LOOM" show "$GONE")"
"$LOOM" show "$GONE" > "$W/gone.txt"
grep -q "pulling image" "$W/gone.txt" || fail "no pull failure in the reason: $(cat "$W/gone.txt")"
[ "$(jget "$GONE" "j.get('restart_count', 0)")" = 0 ] || fail "gone was restarted: $(cat "$W/gone.txt")"
[ "$("$LOOM" nodes -o json | grep -c '"up"')" = 2 ] || fail "a node is not up: $("$LOOM" nodes)"
echo "ok: a pull that fails on the nodes failed the job with the reason; the nodes stay up"

# ---------------------------------------------------------------------------
# GPU driver files from a CDI spec (docs/images.md, "GPU driver files"). Both
# agents again, with --cdi-dir: a spec whose GPU devices are stand-ins of its
# own, which mounts a test "library", sets an env entry and names a hook
# (never run). A 2-GPU task sees its two devices from the spec, the library
# (its directory on LD_LIBRARY_PATH) and the env.
mkdir -p "$W/cdi" "$W/cdi-dev" "$W/driver"
echo "from the CDI spec" > "$W/driver/libnvidia-loomtest.so.1"
{
  echo "cdiVersion: 0.5.0"
  echo "kind: nvidia.com/gpu"
  echo "devices:"
  for g in 0 1 2 3 4 5 6 7; do
    echo "cdi stand-in $g" > "$W/cdi-dev/nvidia$g"
    echo "- {name: \"$g\", containerEdits: {deviceNodes: [{path: /dev/nvidia$g, hostPath: $W/cdi-dev/nvidia$g}]}}"
  done
  echo "containerEdits:"
  echo "  env: [LOOM_CDI_TEST=from-cdi, NVIDIA_VISIBLE_DEVICES=void]"
  echo "  mounts: [{hostPath: $W/driver/libnvidia-loomtest.so.1, containerPath: /usr/lib/loomtest/libnvidia-loomtest.so.1, options: [ro, nosuid, nodev, bind]}]"
  echo "  hooks: [{hookName: createContainer, path: /bin/touch, args: [touch, $W/cdi-hook-ran]}]"
} > "$W/cdi/nvidia.yaml"
for i in 0 1; do kill "${AGENT_PIDS[$i]}"; done
for i in 0 1; do wait "${AGENT_PIDS[$i]}" 2> /dev/null; done
AGENT_FLAGS+=(--cdi-dir "$W/cdi")
for i in 0 1; do
  launch_agent "$i"
  wait_for 20 curl -sf "http://127.0.0.$((i + 2)):$((PORT + 1 + i))/healthz" -o /dev/null ||
    fail "agent $i did not come back with --cdi-dir"
  grep -q "GPU driver files: CDI spec $W/cdi/nvidia.yaml" "$W/agent$i.log" ||
    fail "agent $i does not use the CDI spec: $(grep "GPU driver files" "$W/agent$i.log")"
done
"$LOOM" run -g 2 --name cdi --wait --image "$REG/test/busybox:1" -- /bin/sh -c \
  'echo "nvd=$NVIDIA_VISIBLE_DEVICES cvd=$CUDA_VISIBLE_DEVICES cdi=$LOOM_CDI_TEST ld=$LD_LIBRARY_PATH"
   for d in /dev/nvidia[0-9]*; do echo "$d: $(cat "$d")"; done
   cat /usr/lib/loomtest/libnvidia-loomtest.so.1' > "$W/cdi.out" 2>&1 ||
  fail "the CDI job: $(cat "$W/cdi.out")"
out=$("$LOOM" logs "$(job_named cdi)")
grep -Eqx "nvd=[0-7],[0-7] cvd=0,1 cdi=from-cdi ld=(.*:)?/usr/lib/loomtest" <<< "$out" ||
  fail "CDI job: env: $out"
[ "$(grep -c "^/dev/nvidia[0-9]*: cdi stand-in [0-9]$" <<< "$out")" = 2 ] || fail "CDI job: not two devices of the spec: $out"
for g in $(sed -n 's/^nvd=\([0-9]\),\([0-9]\) .*/\1 \2/p' <<< "$out"); do
  grep -qx "/dev/nvidia$g: cdi stand-in $g" <<< "$out" || fail "CDI job: no device of GPU $g: $out"
done
grep -qx "from the CDI spec" <<< "$out" || fail "CDI job: the spec's mount is missing: $out"
[ ! -e "$W/cdi-hook-ran" ] || fail "the CDI spec's hook was run"
echo "ok: a 2-GPU task got its devices, a mount and env from a CDI spec; its hook was not run"
# A service whose replicas run in the image (docs/services.md): busybox's
# httpd on the port the agent gave it, behind loom gateway.
SVC_PORT=$((PORT + 62))
"$LOOM" gateway --listen-host 127.0.0.1 --run-dir "$W/gw" --interval 0.2 --threads 1 >> "$W/gateway.log" 2>&1 &
PIDS+=($!)
cat > "$W/web.yaml" <<YAML
kind: service
name: boxed-web
replicas: 2
port: $SVC_PORT
resources: {gpus: 1}
container: {image: $REG/test/busybox:1}
command: [/bin/sh, -c, 'exec httpd -f -p \$LOOM_HOST:\$PORT -h /etc']
readiness: {http: /loom-test, period: 200ms}
YAML
"$LOOM" service apply -f "$W/web.yaml" > "$W/web.out" 2>&1 || fail "service apply: $(cat "$W/web.out")"
boxed_served() { [ "$(curl -sf "http://127.0.0.1:$SVC_PORT/loom-test")" = "from the image" ]; }
wait_for 60 boxed_served || fail "the service in the image is not served: $("$LOOM" service show boxed-web)"
"$LOOM" service show boxed-web | grep -q "^Status: *2 of 2 replica(s) serving" ||
  fail "service: $("$LOOM" service show boxed-web)"
"$LOOM" service show boxed-web -o json | grep -q '"image_digest": *"sha256:' ||
  fail "the service's image is not pinned: $("$LOOM" service show boxed-web -o json | head -40)"
echo "ok: a service of 2 replicas in the image serves the image's file through the gateway"
echo "all checks passed"
