# The zoo: a server that closes the file descriptors it did not open (fd 3 among them, the
# socket ck passes) and opens a socket of its own on the port argv[1].
import os
import socket
import sys

os.closerange(3, 64)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
body = f"slot={os.environ.get('CK_SLOT', '-')} pid={os.getpid()}\n".encode()
while True:
    c, _ = s.accept()
    try:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    except OSError:
        pass  # a client that went away
    c.close()
