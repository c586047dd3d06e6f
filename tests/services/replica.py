#!/usr/bin/env python3
"""A service replica for the services tests and benchmark (docs/services.md).

Listens on $LOOM_HOST:$PORT (the agent's), answers GET / after --delay-ms
with "replica <job id>", and GET /healthz with 200, or 503 with --broken (a
version whose readiness never passes). Threads per connection, HTTP/1.1
keep-alive, as a model server would.
"""
import argparse
import http.server
import os
import socketserver
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--delay-ms", type=float, default=0)
    ap.add_argument("--broken", action="store_true")
    ap.add_argument("--version", default="v1")
    args = ap.parse_args()
    name = "replica %s %s\n" % (os.environ.get("LOOM_JOB_ID", "?"), args.version)
    body = name.encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            if self.path == "/healthz":
                code, out = (503, b"broken\n") if args.broken else (200, b"ok\n")
            else:
                if args.delay_ms > 0:
                    time.sleep(args.delay_ms / 1000.0)
                code, out = 200, body
            self.send_response(code)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True
        request_queue_size = 256

    host = os.environ.get("LOOM_HOST", "127.0.0.1")
    port = int(os.environ["PORT"])
    srv = Server((host, port), Handler)
    print("listening on %s:%d" % (host, port), flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
