"""A minimal DNS server for a UDP group under ck: it answers every A query with 127.0.0.1
and a TXT query with the worker that answered (`slot=S pid=P`). Python's standard library only.

It takes ck's socket (socket activation, fd 3) when ck hands it one, else binds 127.0.0.1:$PORT
itself (for `--adopt`). It says nothing: ck sees it wait on the socket. On SIGTERM it exits at
once, as most DNS servers do; ck has already sent new queries to the other workers by then.

    ck run --listen udp://127.0.0.1:8053 -w 2 --udp-mode stateless -- python3 examples/python/dns.py
"""
import os
import socket
import struct

SLOT = os.environ.get("CK_SLOT", "-")
TYPE_A, TYPE_TXT = 1, 16


def take_socket() -> socket.socket:
    """ck's socket (fd 3) if it passed one, else a socket bound to $PORT."""
    if int(os.environ.get("LISTEN_FDS", "0")) > 0:
        return socket.socket(fileno=3)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", int(os.environ["PORT"])))
    return s


def answer(query: bytes) -> bytes | None:
    """The response to `query`, or None for a datagram that is not a one-question query."""
    if len(query) < 12 or struct.unpack("!H", query[4:6])[0] != 1:
        return None
    end = 12
    while end < len(query) and query[end] != 0:
        end += query[end] + 1
    end += 5  # the root label, QTYPE, QCLASS
    if end > len(query):
        return None
    qtype = struct.unpack("!H", query[end - 4 : end - 2])[0]
    if qtype == TYPE_TXT:
        text = f"slot={SLOT} pid={os.getpid()}".encode()
        data = bytes([len(text)]) + text
    elif qtype == TYPE_A:
        data = bytes([127, 0, 0, 1])
    else:
        data = None
    header = query[:2] + b"\x81\x80" + b"\x00\x01" + struct.pack("!H", 1 if data else 0)
    header += b"\x00\x00\x00\x00"
    record = b""
    if data:
        # The name by pointer to the question, type, class IN, TTL 60, the data.
        record = b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, 60, len(data)) + data
    return header + query[12:end] + record


def main() -> None:
    s = take_socket()
    while True:
        query, peer = s.recvfrom(512)
        response = answer(query)
        if response is not None:
            s.sendto(response, peer)


if __name__ == "__main__":
    main()
