"""A UDP server that stops the way a QUIC server does after GOAWAY: once it got SIGTERM it
answers the flows it knows and refuses every new one, then exits when no datagram has come
for a while.

It takes its socket from ck (socket activation, fd 3) and says READY=1. A new flow costs it a
few milliseconds (a handshake's keys), so new flows queue on its socket under load.

    python3 server.py flow   # a flow is a client address and port
    python3 server.py quic   # a flow is a QUIC-like connection: a long-header packet's
                             # destination connection ID opens it; the server answers with a
                             # connection ID of its own that carries ck's cookie
                             # (CK_QUIC_SERVER_ID), which short-header packets then use

Every answer is `ok pid=P` (quic: `ok pid=P cid=HEX`) or `refused pid=P`. At exit it writes
`new=N refused=R` to REFUSALS_DIR/PID when that is set, and to stderr.
"""
import os
import signal
import socket
import sys
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "flow"
# What a new flow costs: the keys of a handshake.
HANDSHAKE_COST = 0.008
# After SIGTERM, exit once no datagram came for this long.
QUIET_EXIT = 0.4

stopping = False


def on_term(_signum, _frame):
    global stopping
    stopping = True


def notify(message):
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.connect(path)
        s.send(message)


def flow_key(data, peer):
    """The flow a datagram belongs to: its client (flow), or its connection ID (quic)."""
    if MODE != "quic":
        return peer
    if not data:
        return None
    if data[0] & 0x80:
        # Long header: flags, version (4), DCID length, DCID.
        if len(data) < 6:
            return None
        return bytes(data[6 : 6 + data[5]])
    # Short header: the DCID is one of ours, 8 octets.
    return bytes(data[1:9])


def main():
    signal.signal(signal.SIGTERM, on_term)
    sock = socket.socket(fileno=3)
    sock.settimeout(0.05)
    server_id = bytes.fromhex(os.environ.get("CK_QUIC_SERVER_ID", "0000"))
    pid = os.getpid()
    known = {}
    refused_flows = set()
    new = 0
    notify(b"READY=1")
    last = time.monotonic()
    while True:
        try:
            data, peer = sock.recvfrom(2048)
        except socket.timeout:
            if stopping and time.monotonic() - last >= QUIET_EXIT:
                break
            continue
        last = time.monotonic()
        key = flow_key(data, peer)
        if key is None:
            continue
        reply = known.get(key)
        if reply is None:
            if stopping:
                refused_flows.add(key)
                sock.sendto(b"refused pid=%d" % pid, peer)
                continue
            time.sleep(HANDSHAKE_COST)
            new += 1
            reply = b"ok pid=%d" % pid
            if MODE == "quic":
                # QUIC-LB plaintext layout: length - 1 in the first octet, ck's server ID,
                # then our own octets.
                cid = bytes([7]) + server_id + os.urandom(5)
                reply += b" cid=" + cid.hex().encode()
                known[cid] = reply
            known[key] = reply
        sock.sendto(reply, peer)
    line = "new=%d refused=%d" % (new, len(refused_flows))
    print("udp-refuser pid=%d: %s" % (pid, line), file=sys.stderr)
    out = os.environ.get("REFUSALS_DIR")
    if out:
        with open(os.path.join(out, str(pid)), "w") as f:
            f.write(line + "\n")


main()
