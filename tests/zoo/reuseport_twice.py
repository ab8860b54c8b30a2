# The zoo: a server that serves the socket ck passes as fd 3 and also binds a second socket of
# its own to the same port with SO_REUSEPORT ("to be sure"), serving both, one thread each.
# What its own socket answers says slot=own.
import os
import socket
import threading

passed = socket.socket(fileno=3)
port = passed.getsockname()[1]
own = socket.socket()
own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
own.bind(("0.0.0.0", port))
own.listen()


def serve(s, slot):
    body = f"slot={slot} pid={os.getpid()}\n".encode()
    while True:
        c, _ = s.accept()
        try:
            c.recv(4096)
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass  # a client that went away
        c.close()


threading.Thread(target=serve, args=(own, "own"), daemon=True).start()
serve(passed, os.environ.get("CK_SLOT", "-"))
