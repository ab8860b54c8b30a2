# The zoo: a server that daemonizes as the old recipes say (fork, setsid, fork, the parents
# exit 0), then serves the socket it inherited as fd 3 from the grandchild.
import os
import socket

if os.fork() > 0:
    os._exit(0)
os.setsid()
if os.fork() > 0:
    os._exit(0)
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
