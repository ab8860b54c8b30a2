# The zoo: a server that boots for a long time and says nothing meanwhile (loading a model, a
# cache): it sleeps as many seconds as the file argv[1] says, then serves fd 3.
import os
import socket
import sys
import time

time.sleep(float(open(sys.argv[1]).read()))
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
