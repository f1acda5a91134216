#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A fault and latency proxy for an S3 server (Python stdlib only).

It sits between a client and an S3 endpoint (radosgw from rgw-up.sh) and
forwards every request unchanged -- the Host header included, so SigV4
signatures made for the proxy's address still verify upstream -- while it

  * adds a delay to every request (object-store latency on loopback),
  * answers the next N requests (optionally only those matching a method
    and/or key) with an error instead, by default 503 SlowDown,
  * goes "down": every connection is closed without an answer (or, with
    refuse, the listening socket is closed so connects are refused) until
    it comes back up on the same port,
  * logs every request: method, bucket, key, Range, status, body bytes
    relayed, so tests and benchmarks count the GETs and bytes of each object.

Python API (see tests/integration/s3_fixture.py, which re-exports it):

    with S3Proxy("http://127.0.0.1:7480", delay_ms=0) as p:
        p.endpoint                  # "http://127.0.0.1:PORT", give it to the client
        p.set_delay(20)             # ms added to each request
        p.set_delay(5000, key="k")  # ... or only to the requests for key k
        p.fail_next(3, status=503, method="GET", key="a/b.jpg")
        p.down(refuse=False); p.up()
        p.count(method="GET", key="a/b.jpg")   # requests seen (failed ones too)
        p.connections               # TCP connections accepted so far
        p.entries()                 # list of dicts: method, bucket, key, query,
                                    #   range, status, injected, bytes (the
                                    #   response body relayed upstream->client)
        p.clear_log()

Standalone:

    s3proxy.py --upstream http://127.0.0.1:7480 [--port N] [--delay-ms N]
               [--log FILE]

prints "listening http://127.0.0.1:PORT" and serves until killed. It is
controlled over HTTP on its own port (no S3 bucket can be named __proxy):
GET /__proxy/delay?ms=N[&key=K], /__proxy/fail?n=N&status=503&method=GET&key=K,
/__proxy/down[?refuse=1], /__proxy/up, /__proxy/log (JSON lines),
/__proxy/clear. Control requests work while the proxy is down (unless it
refuses connections: then only the Python API can bring it back).
"""

import argparse
import http.client
import http.server
import json
import signal
import socket
import sys
import threading
import time
import urllib.parse

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer",
               "transfer-encoding", "upgrade"}
_MAX_BODY = 256 << 20  # a request or response body we relay


def _slowdown_body(status):
    code = {503: "SlowDown", 500: "InternalError", 502: "BadGateway",
            504: "GatewayTimeout"}.get(status, "InjectedError")
    return ('<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code>'
            '<Message>injected by s3proxy</Message></Error>' % code).encode()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "s3proxy"

    def log_message(self, fmt, *args):  # quiet: the proxy keeps its own log
        pass

    def setup(self):
        super().setup()
        self.server.proxy.count_connection()

    # every method goes through one path
    def do_GET(self):
        self._handle()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _parse(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        host = (self.headers.get("Host") or "").split(":")[0]
        proxy = self.server.proxy
        # virtual-hosted: BUCKET.host; path-style: /BUCKET/KEY
        if host.count(".") and not host.replace(".", "").isdigit() and \
                host != "localhost" and not host.startswith(proxy.host_name + "."):
            bucket = host.split(".")[0]
            key = path.lstrip("/")
        else:
            parts = path.lstrip("/").split("/", 1)
            bucket = parts[0]
            key = parts[1] if len(parts) > 1 else ""
        return url, bucket, key

    def _send_simple(self, status, body, ctype="application/xml", close=False):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _control(self, url):
        proxy = self.server.proxy
        q = dict(urllib.parse.parse_qsl(url.query))
        what = url.path[len("/__proxy/"):]
        if what == "delay":
            proxy.set_delay(int(q.get("ms", "0")), q.get("key"))
        elif what == "fail":
            proxy.fail_next(int(q.get("n", "1")), int(q.get("status", "503")),
                            q.get("method"), q.get("key"))
        elif what == "down":
            # answer first, then go down (refusing would close our own socket)
            self._send_simple(200, b"ok\n", "text/plain", close=True)
            threading.Thread(target=proxy.down,
                             kwargs={"refuse": q.get("refuse") == "1"}).start()
            return
        elif what == "up":
            proxy.up()
        elif what == "log":
            body = "".join(json.dumps(e) + "\n" for e in proxy.entries()).encode()
            self._send_simple(200, body, "application/json")
            return
        elif what == "clear":
            proxy.clear_log()
        else:
            self._send_simple(404, b"unknown control\n", "text/plain")
            return
        self._send_simple(200, b"ok\n", "text/plain")

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n < 0 or n > _MAX_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(n) if n else None

    def _handle(self):
        proxy = self.server.proxy
        url, bucket, key = self._parse()
        if url.path.startswith("/__proxy/"):
            self._control(url)
            return
        if proxy.is_down():
            # drop the connection without a word
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            proxy.record(self.command, bucket, key, url.query,
                         self.headers.get("Range"), 0, True)
            return
        delay = proxy.delay_ms(key)
        if delay:
            time.sleep(delay / 1000.0)
        body = self._read_body()
        injected = proxy.take_failure(self.command, key)
        if injected:
            proxy.record(self.command, bucket, key, url.query,
                         self.headers.get("Range"), injected, True)
            self._send_simple(injected, _slowdown_body(injected))
            return
        # Logged before the answer goes out: a client that has its answer
        # always finds the request in the log.
        self._forward(body, lambda status, nbytes: proxy.record(
            self.command, bucket, key, url.query, self.headers.get("Range"),
            status, False, nbytes))

    def _upstream(self):
        conn = getattr(self, "_up", None)
        if conn is None:
            p = self.server.proxy
            conn = http.client.HTTPConnection(p.up_host, p.up_port, timeout=60)
            self._up = conn
        return conn

    def _forward(self, body, record):
        for attempt in (0, 1):  # a stale keep-alive upstream gets one retry
            conn = self._upstream()
            try:
                conn.putrequest(self.command, self.path, skip_host=True,
                                skip_accept_encoding=True)
                for k, v in self.headers.items():
                    if k.lower() in _HOP_BY_HOP or k.lower() == "content-length":
                        continue
                    conn.putheader(k, v)
                conn.putheader("Content-Length", str(len(body) if body else 0))
                conn.endheaders(body)
                resp = conn.getresponse()
                data = resp.read() if self.command != "HEAD" else b""
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self._up = None
                if attempt:
                    record(502, 0)
                    self._send_simple(502, _slowdown_body(502))
                    return 502, 0
        record(resp.status, len(data))
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() in _HOP_BY_HOP or k.lower() == "content-length":
                continue
            self.send_header(k, v)
        if self.command == "HEAD":
            self.send_header("Content-Length", resp.getheader("Content-Length") or "0")
        else:
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if data:
            self.wfile.write(data)
        return resp.status, len(data)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # clients that open many connections at once (a prefill) must not meet
    # the default backlog of 5: dropped SYNs cost a 1 s retransmit each
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # a client that hangs up mid-request is not news: keep stderr quiet
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class S3Proxy:
    """In-process proxy; see the module docstring. Thread-safe."""

    def __init__(self, upstream, delay_ms=0, port=0, host="127.0.0.1"):
        u = urllib.parse.urlsplit(upstream)
        if u.scheme != "http" or not u.port:
            raise ValueError("upstream must be http://HOST:PORT")
        self.up_host, self.up_port = u.hostname, u.port
        self.host_name = host
        self._lock = threading.Lock()
        self._delay = delay_ms
        self._key_delay = {}  # key -> ms, instead of _delay for that key
        self._failures = []  # [remaining, status, method, key]
        self._down = False
        self._log = []
        self._connections = 0
        self._server = None
        self._thread = None
        self.port = port
        self._start_server()

    @property
    def endpoint(self):
        return "http://%s:%d" % (self.host_name, self.port)

    def _start_server(self):
        srv = _Server((self.host_name, self.port), _Handler)
        srv.proxy = self
        self.port = srv.server_address[1]
        t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                             daemon=True)
        t.start()
        self._server, self._thread = srv, t

    def _stop_server(self):
        srv, self._server = self._server, None
        if srv:
            srv.shutdown()
            srv.server_close()
            self._thread.join(5)

    # ---- controls
    def set_delay(self, ms, key=None):
        """ms added to every request, or (key given) to that key's only."""
        with self._lock:
            if key is None:
                self._delay = ms
            else:
                self._key_delay[key] = ms

    def delay_ms(self, key=None):
        with self._lock:
            return self._key_delay.get(key, self._delay)

    def fail_next(self, n, status=503, method=None, key=None):
        """Answer the next n requests matching method/key with status."""
        with self._lock:
            self._failures.append([n, status, method, key])

    def take_failure(self, method, key):
        with self._lock:
            for f in self._failures:
                if f[0] > 0 and (f[2] is None or f[2] == method) and \
                        (f[3] is None or f[3] == key):
                    f[0] -= 1
                    return f[1]
        return 0

    def down(self, refuse=False):
        """Close every connection (refuse=True: stop listening) until up()."""
        with self._lock:
            self._down = True
        if refuse:
            self._stop_server()

    def up(self):
        with self._lock:
            self._down = False
        if self._server is None:
            self._start_server()

    def is_down(self):
        with self._lock:
            return self._down

    def count_connection(self):
        with self._lock:
            self._connections += 1

    @property
    def connections(self):
        """TCP connections accepted so far (keep-alive reuse shows here)."""
        with self._lock:
            return self._connections

    # ---- log
    def record(self, method, bucket, key, query, rng, status, injected, nbytes=0):
        e = {"time": time.time(), "method": method, "bucket": bucket, "key": key,
             "query": query, "range": rng, "status": status, "injected": injected,
             "bytes": nbytes}
        with self._lock:
            self._log.append(e)

    def entries(self):
        with self._lock:
            return list(self._log)

    def clear_log(self):
        with self._lock:
            self._log.clear()

    def count(self, method=None, key=None, status=None):
        return sum(1 for e in self.entries()
                   if (method is None or e["method"] == method)
                   and (key is None or e["key"] == key)
                   and (status is None or e["status"] == status))

    def close(self):
        self._stop_server()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description="S3 fault and latency proxy")
    ap.add_argument("--upstream", required=True, help="http://HOST:PORT of the S3 server")
    ap.add_argument("--port", type=int, default=0, help="listen port (default: a free one)")
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--log", help="append one JSON line per request to FILE at exit")
    a = ap.parse_args(argv)
    p = S3Proxy(a.upstream, delay_ms=a.delay_ms, port=a.port)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("listening %s" % p.endpoint, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        p.close()
        if a.log:
            with open(a.log, "a") as f:
                for e in p.entries():
                    f.write(json.dumps(e) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
