# The zoo: a server that crashes after N requests (argv[1]): it answers N, then takes the next
# connection and dies on it with an unhandled exception, as a leak or a bug would (a client
# that went away is no error to it).
import os
import socket
import sys

limit = int(sys.argv[1])
s = socket.socket(fileno=3)
body = f"slot={os.environ.get('CK_SLOT', '-')} pid={os.getpid()}\n".encode()
served = 0
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        if served == limit:
            raise RuntimeError(f"crashed after {served} requests")
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        served += 1
    except OSError:
        pass  # a client that went away
    c.close()
