# The zoo: a blocking accept-then-read loop, the way a hurried person writes one. No error
# handling (any socket error ends the process), no READY=1: it serves the socket ck passes as
# fd 3, one connection at a time.
import os
import socket

s = socket.socket(fileno=3)
body = f"slot={os.environ.get('CK_SLOT', '-')} pid={os.getpid()}\n".encode()
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.close()
