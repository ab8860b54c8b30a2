#!/usr/bin/env python3
"""A Python worker for ck: serves HTTP on the socket ck hands it (fd 3, systemd socket
activation) and tells ck when it is ready (READY=1 on NOTIFY_SOCKET).

Run: ck run --port 8080 -- python3 examples/worker.py

The pieces (sd_notify, inherited_server) can be imported by other workers; ck's tests do.
"""
import http.server
import os
import signal
import socket
import threading

SD_LISTEN_FDS_START = 3


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
    """Answers every GET with `slot=S pid=P`, like ck's demo worker."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    """An HTTP server on a socket that is already bound and listening: ck made it."""

    def server_bind(self):
        pass

    def server_activate(self):
        pass


def inherited_server() -> Server:
    """The HTTP server on the first socket ck passed (fails when not started by ck)."""
    if int(os.environ.get("LISTEN_PID", "0")) != os.getpid() or int(os.environ.get("LISTEN_FDS", "0")) < 1:
        raise SystemExit("expected to be started by `ck run` (LISTEN_FDS/LISTEN_PID not set for this process)")
    server = Server(("", 0), Handler, bind_and_activate=False)
    server.socket = socket.socket(fileno=SD_LISTEN_FDS_START)
    return server


def main() -> None:
    server = inherited_server()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    sd_notify("READY=1\nSTATUS=serving")
    server.serve_forever()
    sd_notify("STOPPING=1")


if __name__ == "__main__":
    main()
