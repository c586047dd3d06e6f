# Shared by the image and container tests: Debian's docker-registry on loopback and a
# busybox image built offline (umoci, skopeo; ../shared/COMPONENTS.md 9).
# Needs W (a scratch dir) and PORT (tests/lib/ports.sh) set, and `fail`.
# Sets REG (host:port) and REGISTRY_PID; the registry's access log is
# $W/registry.log.

# start_registry [PORT_OFFSET [HTPASSWD]]: starts it on 127.0.0.1:PORT+OFFSET
# (default 50) and waits until /v2/ answers. With HTPASSWD (a file of
# USER:BCRYPT lines, see htpasswd_line), the registry wants those users'
# credentials (Basic, its htpasswd auth) for every request.
start_registry() {
  REG="127.0.0.1:$((PORT + ${1:-50}))"
  local auth="" want=200
  if [ -n "${2:-}" ]; then
    auth="auth: {htpasswd: {realm: loom-test, path: $2}}"
    want=401
  fi
  cat > "$W/registry.yml" <<YAML
version: 0.1
log: {level: info, accesslog: {disabled: false}}
storage: {filesystem: {rootdirectory: $W/registry}}
http: {addr: $REG}
$auth
YAML
  docker-registry serve "$W/registry.yml" >> "$W/registry.log" 2>&1 &
  REGISTRY_PID=$!
  PIDS+=("$REGISTRY_PID")
  for _ in $(seq 100); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$REG/v2/")" = "$want" ] && return 0
    sleep 0.1
  done
  fail "the registry did not start on $REG"
}

# htpasswd_line USER PASSWORD: the line of an htpasswd file for them (the
# registry takes bcrypt only; Python's crypt module makes it).
htpasswd_line() {
  python3 -W ignore -c 'import crypt, sys
print(sys.argv[1] + ":" + crypt.crypt(sys.argv[2], crypt.mksalt(crypt.METHOD_BLOWFISH)))' "$1" "$2" ||
    fail "cannot make a bcrypt hash (python3 crypt)"
}

# push_busybox_image NAME:TAG [DIR]: an image of busybox (with links for
# its applets) plus the files of DIR (copied to the root), pushed to the
# registry as NAME:TAG (with REGISTRY_CREDS, USER:PASSWORD, when set). Prints
# its digest.
push_busybox_image() {
  local ref=$1 extra=${2:-} layout="$W/oci-$$-$RANDOM"
  umoci init --layout "$layout" > /dev/null || fail "umoci init"
  umoci new --image "$layout:t" > /dev/null || fail "umoci new"
  umoci unpack --image "$layout:t" "$layout.bundle" > /dev/null || fail "umoci unpack"
  mkdir -p "$layout.bundle/rootfs/bin" "$layout.bundle/rootfs/tmp"
  cp /bin/busybox "$layout.bundle/rootfs/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ -e "$layout.bundle/rootfs/bin/$applet" ] || ln -s busybox "$layout.bundle/rootfs/bin/$applet"
  done
  [ -n "$extra" ] && cp -a "$extra/." "$layout.bundle/rootfs/"
  umoci repack --image "$layout:t" "$layout.bundle" > /dev/null || fail "umoci repack"
  umoci config --image "$layout:t" --config.env "IMAGE_VAR=from-image" > /dev/null ||
    fail "umoci config"
  skopeo copy -q --dest-tls-verify=false ${REGISTRY_CREDS:+--dest-creds "$REGISTRY_CREDS"} \
    "oci:$layout:t" "docker://$REG/$ref" || fail "skopeo copy to $REG/$ref"
  skopeo inspect --tls-verify=false ${REGISTRY_CREDS:+--creds "$REGISTRY_CREDS"} \
    "docker://$REG/$ref" | jq -r .Digest
}
