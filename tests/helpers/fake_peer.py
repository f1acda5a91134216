#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A misbehaving coordfs peer, for testing that clients never trust it.

Usage: fake_peer.py MODE PORT [DIR]

Listens on 127.0.0.1:PORT (0 = any free port), prints the bound port and a
newline on stdout once it accepts connections, and prints nothing else.
Every path under /v1/files/ is a file of FILE_SIZE bytes whose byte i is
(i * 131 + 7) & 0xff, with the ETag "<FILE_SIZE hex>-0"; with DIR, it is
DIR's file of that path (404 when missing), with the ETag coordfs gives a
local file: "<size hex>-<mtime in ns hex>" of DIR's copy. Modes:

  ok        correct answers (206 with Content-Range, or 200): a control
  short     promises the requested length, sends half of it, closes
  wronglen  Content-Length and body 16 bytes longer than the range
  shortlen  Content-Length and body 1 byte shorter than the range
  500       500 Internal Server Error
  hang      reads the request and never answers
  garbage   answers with bytes that are not HTTP, then closes
  norange   ignores Range: 200 with the whole file
  badrange  206 with the right length but the data (and Content-Range)
            of the range shifted by one byte
  trickle   correct headers, then the body at one byte every 0.2 s
  flip      correct headers (206, Content-Range, ETag of its own copy), but
            every byte of the body inverted: a peer whose copy differs
  headers   a 206 status line, then header lines without end, as fast as
            the client takes them
  chunked   correct headers but Transfer-Encoding: chunked, the range's
            bytes, and never the last chunk
  headclose correct headers (Content-Length of the range), then closes
  midstall  correct headers, half the body, then nothing (connection open)
  slow      correct answers, each after a delay of FAKE_PEER_DELAY seconds
            (from the environment; 1.5 by default): a peer that never
            fails but makes every read wait
  redirect  307 to the same path with ?honest=1 added, which this fake
            answers correctly: a client that followed redirects would take
            the bytes
"""
import http.server
import os
import re
import sys
import threading
import time
import urllib.parse

FILE_SIZE = 1 << 20
MODES = ("ok", "short", "wronglen", "shortlen", "500", "hang", "garbage",
         "norange", "badrange", "trickle", "flip", "redirect", "slow", "headers",
         "chunked", "headclose", "midstall")
DELAY = float(os.environ.get("FAKE_PEER_DELAY", "1.5"))


def pattern(start, length):
    return bytes(((i * 131 + 7) & 0xFF) for i in range(start, start + length))


class PatternFile:
    size = FILE_SIZE
    etag = '"%x-0"' % FILE_SIZE

    def read(self, start, length):
        return pattern(start, length)


class DirFile:
    def __init__(self, path):
        st = os.stat(path)
        self.path = path
        self.size = st.st_size
        self.etag = '"%x-%x"' % (st.st_size, st.st_mtime_ns)

    def read(self, start, length):
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(length)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "ok"

    def log_message(self, fmt, *args):  # print nothing
        pass

    root = None
    file = None

    def wanted_range(self):
        m = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if not m:
            return None
        a, b = int(m.group(1)), int(m.group(2))
        if a > b or a >= self.file.size:
            return None
        return a, min(b, self.file.size - 1) - a + 1

    def send_body(self, status, body, content_length, content_range=None):
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(content_length))
        if content_range:
            self.send_header("Content-Range", content_range)
        if self.file is not None and status in (200, 206):
            self.send_header("ETag", self.file.etag)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def send_head(self, content_range, framing, value):
        """A 206's headers, framed by Content-Length or Transfer-Encoding."""
        self.send_response(206)
        self.send_header(framing, value)
        self.send_header("Content-Range", content_range)
        self.send_header("ETag", self.file.etag)
        self.end_headers()

    def find_file(self):
        if self.root is None:
            return PatternFile()
        rel = urllib.parse.unquote(self.path[len("/v1/files/"):])
        parts = rel.split("/")
        if not rel or any(p in ("", ".", "..") for p in parts):
            return None
        path = os.path.join(self.root, *parts)
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        return DirFile(path)

    def do_GET(self):
        mode = self.mode
        path, _, query = self.path.partition("?")
        if mode == "redirect":
            if query != "honest=1":
                self.send_response(307)
                self.send_header("Location", "http://127.0.0.1:%d%s?honest=1" %
                                 (self.server.server_address[1], path))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            mode = "ok"
            self.path = path
        if mode == "hang":
            threading.Event().wait()
        if mode == "slow":
            time.sleep(DELAY)
            mode = "ok"
        if mode == "garbage":
            self.wfile.write(os.urandom(64) + b"\r\n\r\nnot http at all\r\n")
            self.wfile.flush()
            self.close_connection = True
            return
        if mode == "500":
            self.send_body(500, b"boom\n", 5)
            return
        self.file = None
        if self.path.startswith("/v1/files/"):
            self.file = self.find_file()
        if self.file is None:
            self.send_body(404, b"", 0)
            return
        data = self.file.read  # the file's bytes
        size = self.file.size
        rng = self.wanted_range()
        if mode == "flip":
            start, length = rng if rng else (0, size)
            body = bytes(b ^ 0xFF for b in data(start, length))
            if rng:
                cr = "bytes %d-%d/%d" % (start, start + length - 1, size)
                self.send_body(206, body, length, cr)
            else:
                self.send_body(200, body, length)
            return
        if mode == "norange" or rng is None:
            self.send_body(200, data(0, size), size)
            return
        start, length = rng
        cr = "bytes %d-%d/%d" % (start, start + length - 1, size)
        if mode == "ok":
            self.send_body(206, data(start, length), length, cr)
        elif mode == "short":
            self.send_body(206, data(start, length // 2), length, cr)
            self.close_connection = True
        elif mode == "wronglen":
            self.send_body(206, data(start, length + 16), length + 16, cr)
        elif mode == "shortlen":
            self.send_body(206, data(start, length - 1), length - 1, cr)
        elif mode == "trickle":
            self.send_head(cr, "Content-Length", str(length))
            for b in data(start, length):
                self.wfile.write(bytes([b]))
                self.wfile.flush()
                time.sleep(0.2)
        elif mode == "headers":
            self.wfile.write(b"HTTP/1.1 206 Partial Content\r\n")
            pad = b"X-Pad: " + b"p" * 1000 + b"\r\n"
            while True:
                self.wfile.write(pad * 64)
        elif mode == "chunked":
            self.send_head(cr, "Transfer-Encoding", "chunked")
            body = data(start, length)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(body), body))
            self.wfile.flush()
            threading.Event().wait()
        elif mode == "headclose":
            self.send_head(cr, "Content-Length", str(length))
            self.wfile.flush()
            self.close_connection = True
        elif mode == "midstall":
            self.send_head(cr, "Content-Length", str(length))
            self.wfile.write(data(start, length // 2))
            self.wfile.flush()
            threading.Event().wait()
        elif mode == "badrange":
            cr = "bytes %d-%d/%d" % (start + 1, start + length, size)
            self.send_body(206, data(start + 1, length), length, cr)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # print nothing
        pass


def main():
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in MODES:
        sys.stderr.write("usage: fake_peer.py {%s} PORT [DIR]\n" % "|".join(MODES))
        return 2
    Handler.mode = sys.argv[1]
    if len(sys.argv) == 4:
        Handler.root = os.path.realpath(sys.argv[3])
    server = Server(("127.0.0.1", int(sys.argv[2])), Handler)
    sys.stdout.write("%d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
