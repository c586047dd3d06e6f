#!/usr/bin/env bash
# TLS for the API (docs/security.md): a server with --tls-cert/--tls-key
# answers HTTPS only; the CLI and an agent verify it against the CA of a
# throwaway certificate (LOOM_CA_CERT, --ca-cert), refuse it without that
# CA, and a job runs over the encrypted channel.
# Usage: tests/tls_test.sh PATH_TO_LOOM
set -u
LOOM="$(realpath "$1")"
cd "$(dirname "$0")/.."
source tests/lib/cluster.sh
command -v openssl > /dev/null || fail "openssl not installed"

# A CA and a server certificate for 127.0.0.1 (IP SAN), both throwaway.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=loom test CA" \
  -keyout "$W/ca.key" -out "$W/ca.pem" 2> /dev/null || fail "CA"
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
  -keyout "$W/server.key" -out "$W/server.csr" 2> /dev/null || fail "CSR"
printf 'subjectAltName=IP:127.0.0.1\n' > "$W/san.ext"
openssl x509 -req -in "$W/server.csr" -CA "$W/ca.pem" -CAkey "$W/ca.key" \
  -CAcreateserial -days 1 -extfile "$W/san.ext" -out "$W/server.pem" 2> /dev/null || fail "sign"

write_cluster 1
export LOOM_SERVER="https://127.0.0.1:$PORT"
export LOOM_CA_CERT="$W/ca.pem"
"$LOOM" server --listen "127.0.0.1:$PORT" --data-dir "$W/server" --cluster "$W/cluster.yaml" \
  --admin-token-file "$W/admin.token" --tls-cert "$W/server.pem" --tls-key "$W/server.key" \
  > "$W/server.log" 2>&1 &
SERVER=$!
PIDS+=($SERVER)
for _ in $(seq 100); do
  curl -sf --cacert "$W/ca.pem" "$LOOM_SERVER/healthz" > /dev/null && break
  sleep 0.1
done
curl -sf --cacert "$W/ca.pem" "$LOOM_SERVER/healthz" > /dev/null || fail "no HTTPS answer"
grep -q "listening on https://" "$W/server.log" || fail "the server does not say https"
after_server_start
echo "ok: the server answers HTTPS"

# Plain HTTP to the TLS port gets nothing useful.
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$PORT/healthz")
[ "$code" != 200 ] || fail "plain HTTP was answered on the TLS port"
# The CLI verifies the certificate: with the CA it works, without it it fails.
"$LOOM" whoami > /dev/null || fail "whoami over TLS"
if LOOM_CA_CERT="" "$LOOM" whoami > "$W/noca.out" 2>&1; then
  fail "the CLI accepted a certificate it cannot verify"
fi
echo "ok: the CLI verifies the server's certificate (without the CA: $(head -c 120 "$W/noca.out"))"
# A bad certificate file stops the server at start, with a clear message.
"$LOOM" server --listen "127.0.0.1:$((PORT + 40))" --data-dir "$W/bad" --cluster "$W/cluster.yaml" \
  --tls-cert "$W/san.ext" --tls-key "$W/server.key" > "$W/bad.log" 2>&1
[ $? = 2 ] && grep -q "cannot use the TLS certificate" "$W/bad.log" || fail "bad certificate: $(cat "$W/bad.log")"
"$LOOM" server --listen "127.0.0.1:$((PORT + 41))" --data-dir "$W/bad2" --cluster "$W/cluster.yaml" \
  --tls-cert "$W/server.pem" > "$W/bad2.log" 2>&1
[ $? = 2 ] || fail "--tls-cert without --tls-key was accepted"
echo "ok: bad TLS flags are refused"

# An agent joins over TLS and a job runs.
"$LOOM" agent --server "$LOOM_SERVER" --ca-cert "$W/ca.pem" --listen "127.0.0.2:$((PORT + 1))" \
  --name h200-0 --data-dir "$W/agent0" --emulate 8xH200 --join-token-file "$W/join.token" \
  > "$W/agent0.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  [ "$("$LOOM" nodes -o json 2> /dev/null | grep -c '"up"')" = 1 ] && break
  sleep 0.1
done
[ "$("$LOOM" nodes -o json | grep -c '"up"')" = 1 ] || fail "the agent did not join over TLS"
out=$("$LOOM" run -g 1 --wait -- echo over-tls 2>&1) || fail "job over TLS: $out"
"$LOOM" logs 1 | grep -q over-tls || fail "job log"
echo "ok: an agent joined and a job ran over TLS"
# An agent that does not trust the CA cannot register.
"$LOOM" agent --server "$LOOM_SERVER" --listen "127.0.0.3:$((PORT + 2))" --name h200-0 \
  --data-dir "$W/agent-untrusting" --emulate 8xH200 --join-token-file "$W/join.token" \
  > "$W/agent-untrusting.log" 2>&1 &
UNTRUSTING=$!
PIDS+=($UNTRUSTING)
sleep 2
grep -q "registered with" "$W/agent-untrusting.log" && fail "an agent registered without trusting the CA"
grep -qi "cannot register" "$W/agent-untrusting.log" || fail "the untrusting agent says nothing: $(cat "$W/agent-untrusting.log")"
echo "ok: an agent without the CA cannot register ($(grep -o 'cannot register[^;]*' "$W/agent-untrusting.log" | head -1 | head -c 100))"
echo "all checks passed"
