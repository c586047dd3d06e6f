#!/usr/bin/env bash
# The image library against a real registry (docs/images.md): Debian's
# docker-registry on loopback holds a busybox image built here offline
# (umoci, skopeo). Eight concurrent pulls into one store make one pull: the
# digest is the one skopeo sees, the root filesystem holds busybox and the
# test's file and runs, each layer was fetched once (the registry's access
# log); an unknown tag or repository is NotFound, a stopped registry
# Unavailable, and a store opened again serves the image without it. Then a
# registry that wants credentials (htpasswd): a pull with a credentials file
# works; without one, or with a wrong password, it fails saying so; a file
# others may read is refused; no output shows the password.
# Usage: tests/image_registry_test.sh PATH_TO_LOOM_IMAGE_TOOL
set -u
TOOL="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/procs.sh
W=$(mktemp -d)
REGISTRY_PID=
cleanup() {
  local rc=0
  [ -n "$REGISTRY_PID" ] && kill -9 "$REGISTRY_PID" 2>/dev/null
  kill_test_processes "$W/" || rc=1
  wait 2>/dev/null
  chmod -R u+w "$W" 2>/dev/null
  rm -rf "$W"
  return $rc
}
trap 'cleanup || exit 1' EXIT
fail() {
  echo "FAIL: $*"
  [ -f "$W/registry.log" ] && { echo "== registry.log"; tail -20 "$W/registry.log"; }
  exit 1
}
for tool in docker-registry umoci skopeo jq; do
  command -v "$tool" > /dev/null || fail "$tool is not installed (scripts/setup.sh --test)"
done
[ -x /bin/busybox ] || fail "busybox-static is not installed (scripts/setup.sh --test)"
source tests/lib/ports.sh
source tests/lib/registry.sh
start_registry 0
echo "ok: docker-registry on $REG"

# An image: busybox and a file of the test's, in two layers; the upper one
# removes a file of the lower one.
umoci init --layout "$W/oci" || fail "umoci init"
umoci new --image "$W/oci:t" || fail "umoci new"
umoci unpack --image "$W/oci:t" "$W/bundle" > /dev/null || fail "umoci unpack"
mkdir -p "$W/bundle/rootfs/bin"
cp /bin/busybox "$W/bundle/rootfs/bin/busybox"
echo "removed by the upper layer" > "$W/bundle/rootfs/gone"
umoci repack --refresh-bundle --image "$W/oci:t" "$W/bundle" || fail "umoci repack (busybox)"
echo "made by image_registry_test $$" > "$W/bundle/rootfs/loom-test-file"
rm "$W/bundle/rootfs/gone"  # a whiteout in the upper layer
umoci repack --refresh-bundle --image "$W/oci:t" "$W/bundle" || fail "umoci repack (test file)"
skopeo copy -q --dest-tls-verify=false "oci:$W/oci:t" "docker://$REG/test/busybox:1" ||
  fail "skopeo copy to the registry"
WANT=$(skopeo inspect --tls-verify=false "docker://$REG/test/busybox:1" | jq -r .Digest)
LAYERS=$(skopeo inspect --raw --tls-verify=false "docker://$REG/test/busybox:1" |
  jq -r '.layers[].digest')
[ "$(echo "$LAYERS" | wc -l)" = 2 ] || fail "the image has not two layers: $LAYERS"
echo "ok: pushed test/busybox:1 ($WANT)"

# Eight concurrent pulls into one store.
LOG_BEFORE=$(wc -l < "$W/registry.log")
"$TOOL" pull --store "$W/store" --concurrency 8 "$REG/test/busybox:1" > "$W/pull.out" 2>&1 ||
  fail "pull: $(cat "$W/pull.out")"
grep -qx "digest $WANT" "$W/pull.out" || fail "resolved $(grep digest "$W/pull.out"), skopeo says $WANT"
ROOTFS=$(sed -n 's/^rootfs //p' "$W/pull.out")
[ "$ROOTFS" = "$W/store/images/${WANT#sha256:}/rootfs" ] || fail "rootfs at $ROOTFS"
[ -x "$ROOTFS/bin/busybox" ] || fail "no bin/busybox in $ROOTFS"
grep -q "made by image_registry_test $$" "$ROOTFS/loom-test-file" || fail "no test file in $ROOTFS"
jq -e .rootfs.diff_ids "$(dirname "$ROOTFS")/config.json" > /dev/null || fail "no image config beside $ROOTFS"
[ -e "$ROOTFS/gone" ] && fail "the upper layer's whiteout was not applied"
[ "$("$ROOTFS/bin/busybox" echo runs)" = runs ] || fail "bin/busybox from the store does not run"
[ -w "$ROOTFS/loom-test-file" ] && [ "$(id -u)" != 0 ] && fail "the root filesystem is writable"
[ -z "$(find "$ROOTFS" ! -type l -perm /222 | head -1)" ] ||
  fail "writable entries in the root filesystem: $(find "$ROOTFS" ! -type l -perm /222 | head -3)"
grep -q "^image $WANT users 8 " "$W/pull.out" || fail "not one image with 8 users: $(cat "$W/pull.out")"
grep -q "^progress \([0-9]*\) of \1$" "$W/pull.out" || fail "progress did not reach the total: $(grep progress "$W/pull.out")"
echo "ok: 8 concurrent pulls gave one root filesystem with busybox and the test file"

# Each layer fetched once, the manifest resolved by one HEAD.
sleep 0.5  # the access log is written after the response
tail -n +"$((LOG_BEFORE + 1))" "$W/registry.log" > "$W/pull.log"
for layer in $LAYERS; do
  n=$(grep -c "\"GET /v2/test/busybox/blobs/$layer " "$W/pull.log")
  [ "$n" = 1 ] || fail "layer $layer was fetched $n times"
done
n=$(grep -c '"HEAD /v2/test/busybox/manifests/1 ' "$W/pull.log")
[ "$n" = 1 ] || fail "the tag was resolved with $n HEAD requests"
CONFIG=$(skopeo inspect --raw --tls-verify=false "docker://$REG/test/busybox:1" | jq -r .config.digest)
n=$(grep -c "\"GET /v2/test/busybox/blobs/$CONFIG " "$W/pull.log")
[ "$n" = 1 ] || fail "the config was fetched $n times"
echo "ok: each layer and the config was fetched once, the tag resolved with one request"

# Unknown tag and repository.
"$TOOL" resolve "$REG/test/busybox:nope" > "$W/nope.out" 2>&1 && fail "an unknown tag resolved"
grep -q "^error: NOT_FOUND: .*MANIFEST_UNKNOWN" "$W/nope.out" || fail "unknown tag: $(cat "$W/nope.out")"
"$TOOL" resolve "$REG/test/nothing:1" > "$W/nothing.out" 2>&1 && fail "an unknown repository resolved"
grep -q "^error: NOT_FOUND: .*_UNKNOWN" "$W/nothing.out" || fail "unknown repository: $(cat "$W/nothing.out")"
"$TOOL" resolve "test/busybox:1" > "$W/nohost.out" 2>&1 && fail "a reference without a registry resolved"
grep -q "^error: INVALID_ARGUMENT: .*no registry host" "$W/nohost.out" || fail "no host: $(cat "$W/nohost.out")"
echo "ok: unknown tag and repository are NotFound: $(cut -c1-120 "$W/nope.out")"

# A stopped registry.
kill "$REGISTRY_PID" && wait "$REGISTRY_PID" 2>/dev/null
REGISTRY_PID=
"$TOOL" resolve "$REG/test/busybox:1" > "$W/down.out" 2>&1 && fail "resolved with the registry stopped"
grep -q "^error: UNAVAILABLE: cannot reach registry $REG" "$W/down.out" || fail "registry down: $(cat "$W/down.out")"
echo "ok: a stopped registry is Unavailable: $(cut -c1-120 "$W/down.out")"

# The store opened again has the image, without the registry.
"$TOOL" pull --store "$W/store" "$REG/test/busybox:1@$WANT" > "$W/again.out" 2>&1 ||
  fail "pull from the store alone: $(cat "$W/again.out")"
grep -qx "rootfs $ROOTFS" "$W/again.out" || fail "reopened store: $(cat "$W/again.out")"
echo "ok: the store opened again serves the image with the registry stopped"

# A registry that wants credentials: htpasswd auth (Basic), bcrypt.
PASSWORD="pw-$$-$RANDOM"
htpasswd_line alice "$PASSWORD" > "$W/htpasswd"
start_registry 1 "$W/htpasswd"
skopeo copy -q --dest-tls-verify=false "oci:$W/oci:t" "docker://$REG/private/busybox:1" \
  > "$W/push-anon.out" 2>&1 && fail "the registry took a push without credentials"
skopeo copy -q --dest-tls-verify=false --dest-creds "alice:$PASSWORD" \
  "oci:$W/oci:t" "docker://$REG/private/busybox:1" || fail "skopeo copy --dest-creds"
write_auth() {  # write_auth FILE USER:PASSWORD
  (umask 077 && printf '{"auths": {"http://%s": {"auth": "%s"}}}\n' "$REG" \
    "$(printf %s "$2" | base64 -w0)" > "$1")
}
write_auth "$W/auth.json" "alice:$PASSWORD"
"$TOOL" --registry-auth "$W/auth.json" pull --store "$W/store-auth" "$REG/private/busybox:1" \
  > "$W/auth-pull.out" 2>&1 || fail "pull with credentials: $(cat "$W/auth-pull.out")"
grep -qx "digest $WANT" "$W/auth-pull.out" || fail "pull with credentials: $(cat "$W/auth-pull.out")"
ROOTFS=$(sed -n 's/^rootfs //p' "$W/auth-pull.out")
[ "$("$ROOTFS/bin/busybox" echo runs)" = runs ] || fail "bin/busybox of the authenticated pull does not run"
echo "ok: a pull with the credentials file from a registry that wants them"
"$TOOL" pull --store "$W/store-noauth" "$REG/private/busybox:1" > "$W/noauth.out" 2>&1 &&
  fail "pulled without credentials"
grep -qx "error: UNAUTHENTICATED: registry $REG needs credentials for private/busybox: none configured for $REG" \
  "$W/noauth.out" || fail "without credentials: $(cat "$W/noauth.out")"
write_auth "$W/wrong.json" "alice:not-$PASSWORD"
"$TOOL" --registry-auth "$W/wrong.json" resolve "$REG/private/busybox:1" > "$W/wrong.out" 2>&1 &&
  fail "resolved with a wrong password"
grep -q "^error: PERMISSION_DENIED: registry $REG refused the credentials for private/busybox ($W/wrong.json auths" \
  "$W/wrong.out" || fail "wrong password: $(cat "$W/wrong.out")"
chmod 644 "$W/auth.json"
"$TOOL" --registry-auth "$W/auth.json" resolve "$REG/private/busybox:1" > "$W/lax.out" 2>&1 &&
  fail "a credentials file others may read was used"
grep -q "^error: FAILED_PRECONDITION: $W/auth.json has mode 0644: group or others may read" \
  "$W/lax.out" || fail "mode 0644: $(cat "$W/lax.out")"
for f in "$W"/*.out; do
  grep -q -e "$PASSWORD" -e "$(printf %s "alice:$PASSWORD" | base64 -w0)" "$f" &&
    fail "$f shows the password"
done
echo "ok: without credentials: $(cut -c1-110 "$W/noauth.out")"
echo "ok: a wrong password: $(cut -c1-110 "$W/wrong.out")"
echo "PASS"
