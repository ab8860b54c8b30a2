//! The real servers the promise suite runs under ck, two workers each, round-robin: how each
//! starts (on ck's socket or `--adopt`), the load it gets, and what it does with idle keep-alive
//! connections when it is told to stop, which decides what a client that never retries loses.
use std::path::PathBuf;

use crate::app::script;
use crate::ck::{Ck, ck_bin};
use crate::pyservers::{server, write_apps};
use crate::real_servers::{go_bare, go_hello, nginx_app, puma_command};
use crate::sys::TempDir;
use crate::{churn, start_ready};

/// A real server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    /// ck-worker's hyper example (closes keep-alive connections gracefully, says STOPPING=1).
    Hyper,
    /// Node, `examples/worker.js` on fd 3 (closes keep-alive connections gracefully).
    Node,
    /// gunicorn, sync workers, socket activation, `--ready notify`.
    Gunicorn,
    /// uvicorn on fd 3.
    Uvicorn,
    /// puma on its activated socket, ready at its first passing `--probe http`.
    Puma,
    /// Go net/http under `--adopt`, graceful on SIGTERM (`http.Server.Shutdown`).
    Go,
    /// Go's bare `http.ListenAndServe(":PORT")` under `--adopt`: SIGTERM kills it.
    GoBare,
    /// nginx (its own master and worker) under `--adopt`, `--stop-signal QUIT`.
    Nginx,
}

/// What a server does with its idle keep-alive connections when told to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAliveStop {
    /// Answers what comes on them with `Connection: close`, then closes them: nothing lost.
    ClosesGracefully,
    /// Closes every connection after its answer: none is ever idle.
    NoneIdle,
    /// Closes them at once: a request sent on one as it closes fails (one per connection at
    /// most), unless the client sends it again on a new connection (as HTTP clients do for
    /// idempotent requests).
    ClosesAtOnce,
}

impl Server {
    /// Every server, in the suite's order.
    pub const ALL: [Server; 8] = [
        Server::Hyper,
        Server::Node,
        Server::Gunicorn,
        Server::Uvicorn,
        Server::Puma,
        Server::Go,
        Server::GoBare,
        Server::Nginx,
    ];

    /// The README section that tells how to run it under ck (the runtime table).
    pub fn readme(self) -> &'static str {
        "Your app under ck"
    }

    /// Its name in the output.
    pub fn label(self) -> &'static str {
        match self {
            Server::Hyper => "hyper",
            Server::Node => "node",
            Server::Gunicorn => "gunicorn",
            Server::Uvicorn => "uvicorn",
            Server::Puma => "puma",
            Server::Go => "go",
            Server::GoBare => "go-bare",
            Server::Nginx => "nginx",
        }
    }

    /// Requests a second of its loads: Python and Ruby servers, and Node, serve fewer on two
    /// shared CPUs while two of them boot beside two serving ones.
    pub fn rate(self) -> f64 {
        match self {
            Server::Gunicorn | Server::Uvicorn | Server::Puma => 300.0,
            Server::Node => 600.0,
            Server::Hyper | Server::Go | Server::GoBare | Server::Nginx => churn::RATE,
        }
    }

    /// What it does with idle keep-alive connections when told to stop (from each server's
    /// own shutdown code): what a client that never retries may lose at a roll.
    pub fn keep_alive_stop(self) -> KeepAliveStop {
        match self {
            Server::Hyper | Server::Node => KeepAliveStop::ClosesGracefully,
            Server::Gunicorn => KeepAliveStop::NoneIdle,
            // uvicorn's shutdown, puma's reactor, Go's Shutdown (closeIdleConns), nginx's
            // SIGQUIT (ngx_close_idle_connections), and Go killed outright.
            Server::Uvicorn | Server::Puma | Server::Go | Server::GoBare | Server::Nginx => {
                KeepAliveStop::ClosesAtOnce
            }
        }
    }

    /// Starts ck with two workers of the server (files it needs in `dir`) and waits until both
    /// are ready: the instance and its port.
    pub fn start(self, dir: &TempDir) -> (Ck, u16) {
        let mut args: Vec<String> = ["--policy", "round-robin"].map(String::from).to_vec();
        let extra: &[&str] = match self {
            Server::Go | Server::GoBare => &["--adopt"],
            Server::Nginx => &["--adopt", "--stop-signal", "QUIT"],
            // gunicorn says READY=1: waiting for it makes ready mean gunicorn said so.
            Server::Gunicorn => &["--ready", "notify"],
            // puma says nothing: ready when it accepts, or at its first passing probe.
            Server::Puma => &["--probe", "http"],
            _ => &[],
        };
        args.extend(extra.iter().map(|a| a.to_string()));
        args.push("--".into());
        args.extend(self.command(dir));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ck, port, _) = start_ready(self.label(), 2, &args).expect("start a ready ck");
        (ck, port)
    }

    /// The worker's command line.
    fn command(self, dir: &TempDir) -> Vec<String> {
        let text = |p: PathBuf| p.to_str().expect("UTF-8 path").to_string();
        let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
        match self {
            Server::Hyper => vec![text(ck_bin().with_file_name("ck-example-rust"))],
            Server::Node => vec!["node".into(), text(examples.join("worker.js"))],
            Server::Gunicorn => {
                write_apps(dir);
                // One control socket per gunicorn master (the default path is shared).
                let app = script(
                    dir,
                    "app.sh",
                    &format!(
                        "exec '{}' -w 1 --chdir '{}' --control-socket '{}/ctl.'$CK_WORKER_ID \
                         wsgi_app:app",
                        server("gunicorn").display(),
                        dir.path().display(),
                        dir.path().display()
                    ),
                );
                vec![text(app)]
            }
            Server::Uvicorn => {
                write_apps(dir);
                vec![
                    text(server("uvicorn")),
                    "--fd".into(),
                    "3".into(),
                    "--app-dir".into(),
                    text(dir.path().to_path_buf()),
                    "--no-access-log".into(),
                    "asgi_app:app".into(),
                ]
            }
            Server::Puma => puma_command(dir),
            Server::Go => vec![text(go_hello())],
            Server::GoBare => vec![text(go_bare())],
            Server::Nginx => vec![text(nginx_app(dir))],
        }
    }
}
