//! Real servers no one here wrote, set up for ck's tests (`tests/tests/servers*.rs`): Go
//! net/http servers (`tests/servers/go-hello/main.go`, graceful on SIGTERM, and
//! `tests/servers/go-bare/main.go`, a bare `ListenAndServe`, built with `go build` into the
//! target directory), nginx (its own master and worker, one config per worker from a template), and
//! puma (Debian's, with a rack `config.ru`). Each answers `/` with `slot=S pid=P`, like ck's
//! demo worker, so the harness counts answers per slot. `cargo xtask test` installs golang-go,
//! nginx-light, puma and ruby-rack when missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::app::script;
use crate::sys::TempDir;

/// The workspace's `target` directory.
fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// Path of the built Go server `tests/servers/go-hello` (graceful on SIGTERM).
///
/// # Panics
/// When `go` is missing or the build fails (the message says how to fix it).
pub fn go_hello() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| go_build("go-hello")).clone()
}

/// Path of the built Go server `tests/servers/go-bare` (a bare `http.ListenAndServe`: SIGTERM
/// kills it).
///
/// # Panics
/// As [`go_hello`].
pub fn go_bare() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| go_build("go-bare")).clone()
}

/// Builds `tests/servers/NAME` into `target/go-servers/NAME` (once per test binary) and
/// returns its path.
fn go_build(name: &str) -> PathBuf {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("servers")
        .join(name);
    go_build_in(&source, name)
}

/// Builds the Go program in the directory `source` (one package, no dependencies) into
/// `target/go-servers/NAME`, with its build cache and GOPATH under `target/`, and returns its
/// path. Call it once per test binary and name (the build goes to a name of its own, then is
/// renamed into place).
///
/// # Panics
/// When `go` is missing or the build fails (the message says how to fix it).
pub fn go_build_in(source: &Path, name: &str) -> PathBuf {
    let out_dir = target_dir().join("go-servers");
    std::fs::create_dir_all(&out_dir).expect("creating target/go-servers");
    // One build per test binary: a name of its own, then an atomic rename.
    let tmp = out_dir.join(format!("{name}.{}", std::process::id()));
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&tmp)
        .arg(".")
        .current_dir(source)
        .env("GOCACHE", out_dir.join("cache"))
        .env("GOPATH", out_dir.join("gopath"))
        .env("GO111MODULE", "off")
        .env("CGO_ENABLED", "0")
        .output()
        .expect("running go (install it: apt-get install golang-go)");
    assert!(
        out.status.success(),
        "go build failed in {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let built = out_dir.join(name);
    std::fs::rename(&tmp, &built).expect("installing the built server");
    built
}

/// Size of nginx's slow file `/slow.bin`: served at [`SLOW_RATE`] bytes a second, each
/// response takes a few seconds (what is sent before the rate applies fills the socket's
/// buffers first).
pub const SLOW_BYTES: usize = 64 * 1024;
/// nginx's `limit_rate` for `/slow.bin`, bytes a second.
pub const SLOW_RATE: usize = 16 * 1024;

/// nginx's configuration; `@SLOT@`, `@PORT@` and `@ID@` are filled in per worker. Its master
/// binds the port (ck's bind hook adds SO_REUSEPORT) and hands the socket to its worker; `/`
/// answers `slot=S pid=P` (`$pid`: the nginx worker's), `/slow.bin` takes about a second.
const NGINX_CONF: &str = r#"user root;
worker_processes 1;
error_log stderr warn;
pid @DIR@/nginx.@ID@.pid;
events { worker_connections 1024; }
http {
  access_log off;
  server {
    listen 0.0.0.0:@PORT@;
    location = / { default_type text/plain; return 200 "slot=@SLOT@ pid=$pid\n"; }
    location = /slow.bin { root @DIR@/www; limit_rate @RATE@; }
  }
}
"#;

/// Writes nginx's config template, its slow file and `nginx.sh` (the APP for `ck run --adopt`:
/// it fills in the template for its worker and runs nginx in the foreground) in `dir`; returns
/// the script's path.
pub fn nginx_app(dir: &TempDir) -> PathBuf {
    let path = dir.path().display().to_string();
    let conf = NGINX_CONF
        .replace("@DIR@", &path)
        .replace("@RATE@", &SLOW_RATE.to_string());
    dir.write("nginx.conf.in", &conf, false);
    std::fs::create_dir_all(dir.path().join("www")).expect("creating www");
    std::fs::write(dir.path().join("www/slow.bin"), vec![b'x'; SLOW_BYTES]).expect("slow.bin");
    script(
        dir,
        "nginx.sh",
        &format!(
            "conf='{path}'/nginx.$CK_WORKER_ID.conf\n\
             sed -e \"s/@SLOT@/$CK_SLOT/g\" -e \"s/@PORT@/$PORT/g\" -e \"s/@ID@/$CK_WORKER_ID/g\" \
             '{path}/nginx.conf.in' > \"$conf\"\n\
             exec nginx -p '{path}' -e stderr -c \"$conf\" -g 'daemon off;'"
        ),
    )
}

/// A rack app answering `slot=S pid=P`.
const CONFIG_RU: &str = r#"run lambda { |env|
  body = "slot=#{ENV['CK_SLOT']} pid=#{Process.pid}\n"
  [200, {"Content-Type" => "text/plain", "Content-Length" => body.bytesize.to_s}, [body]]
}
"#;

/// Writes `config.ru` in `dir`; returns puma's command line on ck's socket ([`puma_args`]).
pub fn puma_command(dir: &TempDir) -> Vec<String> {
    let ru = dir.write("config.ru", CONFIG_RU, false);
    puma_args(path_text(&ru))
}

/// puma's command line for the rack app `config_ru` on ck's socket (socket activation:
/// `--bind-to-activated-sockets only`, single mode, 4 threads, production).
pub fn puma_args(config_ru: &str) -> Vec<String> {
    [
        "puma",
        "--no-config",
        "--bind-to-activated-sockets",
        "only",
        "-w",
        "0",
        "-t",
        "4:4",
        "-e",
        "production",
        config_ru,
    ]
    .map(str::to_string)
    .to_vec()
}

fn path_text(path: &Path) -> &str {
    path.to_str().expect("UTF-8 path")
}
