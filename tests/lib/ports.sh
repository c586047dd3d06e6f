# Sets PORT for an end-to-end test: the test may use PORT to PORT + 63.
# Blocks lie below the kernel's ephemeral range (32768-60999), so an outgoing
# connection never holds one when a server (re)starts on it, and each test
# holds a lock on its block while it runs (/tmp/loom-test-ports), so tests
# that run at once (ctest -j) never share a port: prometheus_test once lost
# its Prometheus port to another test's process.
mkdir -p /tmp/loom-test-ports
for _ in $(seq 500); do
  PORT=$((20000 + (RANDOM % 187) * 64))
  exec {PORT_LOCK}> "/tmp/loom-test-ports/$PORT"
  flock -n "$PORT_LOCK" && break
  exec {PORT_LOCK}>&-
  PORT=
done
[ -n "$PORT" ] || { echo "FAIL: no free port block under /tmp/loom-test-ports"; exit 1; }
