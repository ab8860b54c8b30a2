# The zoo: a server that writes megabytes a second to stderr (a debug log left on: argv[1]
# KiB a second in 1 KiB lines) while it serves the socket ck passes as fd 3.
import os
import socket
import sys
import threading
import time

rate = int(sys.argv[1])


def chatter():
    line = "debug: " + "x" * 1016 + "\n"
    while True:
        began = time.monotonic()
        for _ in range(rate // 10):
            sys.stderr.write(line)
        sys.stderr.flush()
        time.sleep(max(0.0, 0.1 - (time.monotonic() - began)))


threading.Thread(target=chatter, daemon=True).start()
s = socket.socket(fileno=3)
body = f"slot={os.environ.get('CK_SLOT', '-')} pid={os.getpid()}\n".encode()
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass  # a client that went away
    c.close()
