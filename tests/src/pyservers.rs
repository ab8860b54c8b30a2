//! Real Python servers for the tests (gunicorn, uvicorn), installed by `cargo xtask test` into
//! `target/py-servers`, and the tiny WSGI and ASGI apps they serve (`slot=S pid=P`, like ck's
//! demo worker).

use std::path::PathBuf;

use crate::sys::TempDir;

/// Path of `name` in the tests' virtualenv.
///
/// # Panics
/// When it is not installed (run `cargo xtask test`, which installs it).
pub fn server(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/py-servers/bin")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: `cargo xtask test` installs gunicorn, uvicorn and aioquic into target/py-servers",
        path.display()
    );
    path
}

/// A WSGI app answering `slot=S pid=P`, written as `wsgi_app.py` in `dir`.
pub const WSGI_APP: &str = r#"import os
def app(environ, start_response):
    body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()}\n".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"#;

/// An ASGI app answering `slot=S pid=P`, written as `asgi_app.py` in `dir`.
pub const ASGI_APP: &str = r#"import os
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = f"slot={os.environ.get('CK_SLOT')} pid={os.getpid()}\n".encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
"#;

/// Writes both apps into `dir`.
pub fn write_apps(dir: &TempDir) {
    dir.write("wsgi_app.py", WSGI_APP, false);
    dir.write("asgi_app.py", ASGI_APP, false);
}
