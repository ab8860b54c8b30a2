# The zoo: a server that accepts connections and never reads them (nor answers): it keeps each
# one open, as a server stuck elsewhere does. It serves nothing.
import socket

s = socket.socket(fileno=3)
held = []
while True:
    c, _ = s.accept()
    held.append(c)
