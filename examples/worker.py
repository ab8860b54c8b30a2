#!/usr/bin/env python3
"""A Python worker for ck: serves HTTP on the socket ck hands it (fd 3, systemd socket
activation), tells ck when it is ready (READY=1 on NOTIFY_SOCKET), and closes its keep-alive
connections gracefully on SIGTERM.

Run: ck run --port 8080 -- python3 examples/worker.py

The graceful close is the pattern to copy: on SIGTERM, answer the next request of every open
connection with `Connection: close` and close it after that answer; close connections that stay
idle for IDLE_GRACE seconds; keep accepting what is already queued; exit when no connection is
left.

The pieces (sd_notify, inherited_server) can be imported by other workers; ck's tests do.
"""
import http.server
import os
import signal
import socket
import threading
import time

SD_LISTEN_FDS_START = 3
IDLE_GRACE = 0.5

STOPPING = threading.Event()
CONNECTIONS = set()
LOCK = threading.Lock()


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
    # Headers and body are separate writes: without TCP_NODELAY, Nagle's algorithm holds the
    # body until the client's delayed ACK (~40 ms per keep-alive request).
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        self.busy = False
        self.last = time.monotonic()
        with LOCK:
            CONNECTIONS.add(self)

    def finish(self):
        with LOCK:
            CONNECTIONS.discard(self)
        super().finish()

    def do_GET(self):
        self.busy = True
        body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        if STOPPING.is_set():
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self.last = time.monotonic()
        self.busy = False

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


def close_gracefully(server: Server) -> None:
    """Closes connections once idle for IDLE_GRACE, then stops the server."""
    STOPPING.set()
    started = time.monotonic()
    while True:
        now = time.monotonic()
        with LOCK:
            open_now = list(CONNECTIONS)
        for conn in open_now:
            if not conn.busy and now - conn.last >= IDLE_GRACE:
                try:
                    # Its thread, waiting for the next request, reads EOF and ends.
                    conn.connection.shutdown(socket.SHUT_RD)
                except OSError:
                    pass
        if not open_now and now - started >= IDLE_GRACE:
            break
        time.sleep(0.05)
    server.shutdown()


def main() -> None:
    server = inherited_server()
    signal.signal(
        signal.SIGTERM, lambda *_: threading.Thread(target=close_gracefully, args=(server,)).start()
    )
    sd_notify("READY=1\nSTATUS=serving")
    server.serve_forever()
    sd_notify("STOPPING=1")


if __name__ == "__main__":
    main()
