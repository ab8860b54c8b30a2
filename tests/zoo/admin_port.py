# The zoo: a server that serves the socket ck passes as fd 3 and listens on another port of
# its own too (an admin page on argv[1] + its slot), one thread each.
import os
import socket
import sys
import threading

admin = socket.socket()
admin.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
admin.bind(("127.0.0.1", int(sys.argv[1]) + int(os.environ["CK_SLOT"])))
admin.listen()


def serve(s, body):
    while True:
        c, _ = s.accept()
        try:
            c.recv(4096)
            c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            pass  # a client that went away
        c.close()


threading.Thread(target=serve, args=(admin, b"admin\n"), daemon=True).start()
serve(socket.socket(fileno=3), f"slot={os.environ['CK_SLOT']} pid={os.getpid()}\n".encode())
