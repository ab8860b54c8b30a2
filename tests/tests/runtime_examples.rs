//! The example apps of the runtime guide pages (`examples/python`, `examples/go`,
//! `examples/ruby`, `examples/rust`), each run under ck with the command line its page gives:
//! two workers both answer (an exact 20/20 split of pinned requests, two worker processes),
//! one `ck reload` under a keep-alive load that never retries (as wrk) fails no request (for
//! uvicorn and puma, which close idle keep-alive connections at once when told to stop, under
//! the same load retrying as HTTP clients do, with what it resent printed), and `ck stop`
//! leaves nothing.
//!
//! The servers come from the tests' dependencies (`cargo xtask test` installs them): gunicorn
//! and uvicorn in `target/py-servers`, Debian's go and puma; the Go app is built with `go
//! build` and the Rust app with `cargo build` into the target directory.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use ck_tests::churn::{self, Background};
use ck_tests::load::Mode;
use ck_tests::pyservers::server;
use ck_tests::real_servers::{go_build_in, puma_args};
use ck_tests::server_checks::stops_clean;
use ck_tests::{burst_pinned, local, start_ready};

/// Requests a second for the Python and Ruby servers (two shared CPUs, and two workers booting
/// beside two serving ones during the roll).
const SLOW_RATE: f64 = 300.0;

/// The repository's `examples/DIR`.
fn example_dir(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(dir)
}

/// A path as an argument.
fn text(path: PathBuf) -> String {
    path.to_str().expect("UTF-8 path").to_string()
}

/// How one example runs under ck, and how it is checked.
struct Example {
    /// Its name in the output and in the instance name.
    label: &'static str,
    /// ck's options (before `--`).
    flags: &'static [&'static str],
    /// The app's command line.
    command: Vec<String>,
    /// Whether the roll's keep-alive load retries a request whose idle connection closed
    /// before any answer (for servers that close idle keep-alive connections at once when
    /// told to stop; a client that never retries loses such a request, as without ck).
    retry: bool,
    /// Requests a second of the roll's load.
    rate: f64,
}

/// Runs `example` under ck with `-w 2 --policy round-robin`: both workers answer, one roll
/// under a keep-alive load fails nothing, and the stop is clean.
fn check(example: Example) {
    let label = example.label;
    let mut args = vec!["--policy", "round-robin"];
    args.extend_from_slice(example.flags);
    args.push("--");
    args.extend(example.command.iter().map(String::as_str));
    let (mut ck, port, status) = start_ready(label, 2, &args).expect("start a ready ck");

    let tally = burst_pinned(local(port), 40);
    eprintln!("{label}: {tally:?}");
    assert_eq!(tally.ok, 40, "{label}: {tally:?}");
    let slots: Vec<u32> = status.ready().map(|s| s.slot).collect();
    for slot in &slots {
        assert_eq!(tally.slot(*slot), 20, "{label}: slot {slot}: {tally:?}");
    }
    assert_eq!(tally.per_pid.len(), 2, "{label}: two processes: {tally:?}");

    let load = Background::start_with(port, Mode::KeepAlive, example.retry, example.rate);
    let run = churn::reload_times_under(&mut ck, load, 1);
    run.assert_all_succeeded(&ck);
    churn::print_report(&format!("{label} roll"), &run.report);
    churn::assert_served(&run.report);
    if example.retry {
        eprintln!(
            "{label}: {} request(s) resent on a new connection (their idle keep-alive \
             connection closed at the stop signal)",
            run.report.retried
        );
    } else {
        assert_eq!(run.report.retried, 0, "{label}: the client retried");
    }
    assert!(
        run.after.worker_pids().is_disjoint(&run.reloads[0].before),
        "{label}: old workers still listed: {:#?}",
        run.after
    );
    stops_clean(ck, port, label);
}

/// gunicorn (sync workers) on ck's socket, `examples/python/app.py`'s WSGI app: it says
/// READY=1 itself, and closes every connection after its answer.
#[test]
fn python_app_under_gunicorn() {
    check(Example {
        label: "rt-gunicorn",
        flags: &[],
        command: vec![
            text(server("gunicorn")),
            "-w".into(),
            "1".into(),
            "--no-control-socket".into(),
            "--chdir".into(),
            text(example_dir("python")),
            "app:app".into(),
        ],
        retry: false,
        rate: SLOW_RATE,
    });
}

/// uvicorn on fd 3, `examples/python/app.py`'s ASGI app. uvicorn closes its idle keep-alive
/// connections at once when told to stop (whatever its timeouts say): a client that never
/// retries loses the request it sends on one at that moment (15 of about 900 in one roll of
/// two workers under this load, every time), so the roll's load retries as HTTP clients do.
#[test]
fn python_app_under_uvicorn() {
    check(Example {
        label: "rt-uvicorn",
        flags: &[],
        command: vec![
            text(server("uvicorn")),
            "--fd".into(),
            "3".into(),
            "--app-dir".into(),
            text(example_dir("python")),
            "--no-access-log".into(),
            "app:asgi".into(),
        ],
        retry: true,
        rate: SLOW_RATE,
    });
}

/// `examples/go`: net/http binding `:$PORT` itself under `--adopt`, closing keep-alive
/// connections gracefully on SIGTERM.
#[test]
fn go_app_under_adopt() {
    check(Example {
        label: "rt-go",
        flags: &["--adopt"],
        command: vec![text(go_build_in(&example_dir("go"), "ck-example-go"))],
        retry: false,
        rate: churn::RATE,
    });
}

/// `examples/ruby/config.ru` under puma on its activated socket. Once told to stop, puma
/// answers with `Connection: close`, but closes at once the keep-alive connections idle in its
/// reactor (those with no request for more than its 0.2 s inline wait): at this load none is,
/// at 30 requests a second a client that never retries lost 9 in one roll. So the roll's load
/// retries, as HTTP clients do.
#[test]
fn ruby_app_under_puma() {
    let config = text(example_dir("ruby").join("config.ru"));
    check(Example {
        label: "rt-puma",
        flags: &["--probe", "http"],
        command: puma_args(&config),
        retry: true,
        rate: SLOW_RATE,
    });
}

/// `examples/rust`: hyper on the `ck-worker` crate.
#[test]
fn rust_app_on_ck_worker() {
    check(Example {
        label: "rt-rust",
        flags: &[],
        command: vec![text(rust_example())],
        retry: false,
        rate: churn::RATE,
    });
}

/// Builds `examples/rust` (the crate `ck-example-rust`) into the target directory, with
/// ck-worker's examples as `cargo xtask build` does (so that the dependencies they share are
/// not built again with other features; ck itself is left alone while other tests run it);
/// returns the binary's path.
fn rust_example() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let out = Command::new(cargo)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .args(["build", "-p", "ck-worker", "-p", "ck-example-rust"])
                .args(["--bin", "ck-example-rust", "--examples"])
                .output()
                .expect("running cargo");
            assert!(
                out.status.success(),
                "cargo build -p ck-example-rust failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
            let bin = target.join("debug/ck-example-rust");
            assert!(bin.is_file(), "{} was not built", bin.display());
            bin
        })
        .clone()
}
