#!/usr/bin/env python3
"""A Python worker for ck: serves HTTP on the socket ck hands it (fd 3, systemd socket
activation) and tells ck when it is ready (READY=1 on NOTIFY_SOCKET).

Run: ck run --port 8080 -- python3 examples/worker.py
"""
import http.server
import os
import signal
import socket
import socketserver
import threading


def sd_notify(message: str) -> None:
    """Send one sd_notify message; abstract socket names start with '@'."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(message.encode(), path)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()} python\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def server_bind(self):
        pass  # the socket is already bound and listening: ck made it

    def server_activate(self):
        pass


if int(os.environ.get("LISTEN_PID", "0")) != os.getpid() or int(os.environ.get("LISTEN_FDS", "0")) < 1:
    raise SystemExit("expected to be started by `ck run` (LISTEN_FDS/LISTEN_PID not set for this process)")

server = Server(("", 0), Handler, bind_and_activate=False)
server.socket = socket.socket(fileno=3)  # SD_LISTEN_FDS_START

signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
sd_notify("READY=1\nSTATUS=serving")
server.serve_forever()
sd_notify("STOPPING=1")
