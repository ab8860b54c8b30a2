"""An HTTP/3 server on aioquic for a UDP group under ck, `--udp-mode flow`: every GET is answered
with the worker that served it (`slot=S pid=P`). aioquic draws its connection IDs at random with
no hook for a cookie, so `quic` mode cannot route its packets: `flow` mode keeps each connection
on its worker while the client's address and port stay.

It takes ck's socket (socket activation, fd 3) when ck hands it one, else binds 127.0.0.1:$PORT
itself (for `--adopt`), with a self-signed certificate for `localhost` made at start. It says
nothing: ck sees it wait on the socket. On SIGTERM it takes no new connection and exits once
its connections are closed (ck keeps sending their datagrams to it meanwhile, and kills it once
its slot has been quiet for `--udp-linger`).

    python3 -m venv venv && venv/bin/pip install aioquic
    ck run --listen udp://127.0.0.1:4433 -w 2 -- venv/bin/python examples/python/h3_server.py
"""
import asyncio
import datetime
import os
import signal
import socket

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, ProtocolNegotiated
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

ANSWER = f"slot={os.environ.get('CK_SLOT', '-')} pid={os.getpid()}\n".encode()
# Connections open now, and whether SIGTERM came.
OPEN: set["H3Server"] = set()
STOPPING = asyncio.Event()


class H3Server(QuicConnectionProtocol):
    """One QUIC connection: HTTP/3 requests answered once each request stream ends."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = None
        OPEN.add(self)

    def quic_event_received(self, event):
        if isinstance(event, ProtocolNegotiated):
            self.h3 = H3Connection(self._quic)
        if isinstance(event, ConnectionTerminated):
            OPEN.discard(self)
        if self.h3 is None:
            return
        for h3_event in self.h3.handle_event(event):
            ended = isinstance(h3_event, (HeadersReceived, DataReceived)) and h3_event.stream_ended
            if ended:
                self.h3.send_headers(
                    h3_event.stream_id,
                    [(b":status", b"200"), (b"content-type", b"text/plain")],
                )
                self.h3.send_data(h3_event.stream_id, ANSWER, end_stream=True)
        self.transmit()


def configuration() -> QuicConfiguration:
    """The server's TLS and QUIC settings, with a fresh self-signed certificate."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    config = QuicConfiguration(is_client=False, alpn_protocols=H3_ALPN)
    config.certificate = cert
    config.private_key = key
    return config


def take_socket() -> socket.socket:
    """ck's socket (fd 3) if it passed one, else a socket bound to $PORT."""
    if int(os.environ.get("LISTEN_FDS", "0")) > 0:
        s = socket.socket(fileno=3)
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(("127.0.0.1", int(os.environ["PORT"])))
    s.setblocking(False)
    return s


async def main() -> None:
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, STOPPING.set)
    config = configuration()
    transport, _ = await loop.create_datagram_endpoint(
        lambda: QuicServer(configuration=config, create_protocol=H3Server),
        sock=take_socket(),
    )
    await STOPPING.wait()
    while OPEN:
        await asyncio.sleep(0.1)
    transport.close()


if __name__ == "__main__":
    asyncio.run(main())
