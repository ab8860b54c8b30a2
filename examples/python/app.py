"""A Python web app served by gunicorn (WSGI, `app`) or uvicorn (ASGI, `asgi`) under ck.

Nothing in it knows about ck: gunicorn and uvicorn take the listening socket ck hands over
(systemd socket activation, fd 3) and ck runs one of them per slot.

gunicorn (finds LISTEN_FDS by itself and says READY=1 once it has booted; one gunicorn worker
per ck slot; --no-control-socket needs gunicorn 25.1 or later, drop it before):

    ck run --port 8080 -w 2 -- gunicorn -w 1 --no-control-socket --chdir examples/python app:app

uvicorn (takes the socket with --fd 3; says nothing: ck sees it accept):

    ck run --port 8080 -w 2 -- uvicorn --fd 3 --app-dir examples/python --no-access-log app:asgi

`GET /` answers which worker served it (`slot=S pid=P`); `GET /healthz` answers `ok`.
"""
import os

SLOT = os.environ.get("CK_SLOT", "-")


def answer(path: str) -> tuple[str, bytes]:
    """The status line and body for a GET of `path`."""
    if path == "/":
        return "200 OK", f"slot={SLOT} pid={os.getpid()}\n".encode()
    if path == "/healthz":
        return "200 OK", b"ok\n"
    return "404 Not Found", b"not found\n"


def app(environ, start_response):
    """The WSGI app (gunicorn, or any WSGI server)."""
    status, body = answer(environ.get("PATH_INFO", "/"))
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


async def asgi(scope, receive, send):
    """The same app for ASGI servers (uvicorn)."""
    if scope["type"] != "http":
        return
    status, body = answer(scope["path"])
    await send({
        "type": "http.response.start",
        "status": int(status.split()[0]),
        "headers": [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())],
    })
    await send({"type": "http.response.body", "body": body})
