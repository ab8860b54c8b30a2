//! What the tests of `cargo xtask dist` share: the build (once per test run, whichever test
//! process comes first, into `target/dist-tests/`, which this file owns and empties first), running a packaged `ck` with a
//! chosen environment, and the fleet every package's `ck` must run: the demo worker served on
//! every slot, a slot drained to 0 new connections and back, a clean stop.

pub mod packages;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use ck_tests::http::burst_without;
use ck_tests::sys::{self, TempDir, free_port, output_within};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst_pinned, instance_name, local, probe_base_for};
use sha2::{Digest as _, Sha256};

/// Sequential new connections per burst.
pub const N: u32 = 400;
/// The static target `cargo xtask dist` builds for.
const MUSL: &str = "x86_64-unknown-linux-musl";

/// What `cargo xtask dist` made, and what it was made from.
pub struct Dist {
    /// `ck-VERSION-x86_64-linux.tar.gz`.
    pub tarball: PathBuf,
    /// `ck_VERSION-1_amd64.deb`.
    pub deb: PathBuf,
    /// The npm packages (`ck-supervisor-VERSION.tgz`, `ck-supervisor-linux-x64-VERSION.tgz`,
    /// `ck-listen-VERSION.tgz`).
    pub npm: Vec<PathBuf>,
    /// The wheel `ck_supervisor-VERSION-py3-none-...x86_64.whl`.
    pub wheel: PathBuf,
    /// The SHA-256 of the BPF object the static build embedded, in hex.
    pub bpf_sha256: String,
}

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs `cargo xtask dist --out target/dist-tests` once for every test of this binary in a test
/// run (the tests run in processes of their own: [`ck_tests::once::per_run`]).
pub fn dist() -> &'static Dist {
    static DIST: OnceLock<Dist> = OnceLock::new();
    DIST.get_or_init(|| {
        let root = workspace();
        let out = root.join("target/dist-tests");
        ck_tests::once::per_run(&out, || {
            let status = cargo()
                .args(["run", "-q", "-p", "xtask", "--", "dist", "--out"])
                .arg(&out)
                .status()
                .expect("running cargo xtask dist");
            assert!(status.success(), "cargo xtask dist failed: {status}");
        });
        let found = |suffix: &str| -> Vec<PathBuf> {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(suffix))
                .collect();
            files.sort();
            files
        };
        let one = |suffix: &str| {
            let mut files = found(suffix);
            assert_eq!(
                files.len(),
                1,
                "one {suffix} in {}: {files:?}",
                out.display()
            );
            files.pop().unwrap()
        };
        Dist {
            tarball: one("-x86_64-linux.tar.gz"),
            deb: one(".deb"),
            npm: found(".tgz"),
            wheel: one("_x86_64.whl"),
            bpf_sha256: embedded_object_sha256(&root),
        }
    })
}

/// The cargo that runs these tests, in the workspace root.
pub fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.current_dir(workspace());
    cargo
}

/// The SHA-256 of `OUT_DIR/ck` of the static build's build script (the object `bpf` embeds),
/// found in cargo's own report of that (already built, so instant) build.
fn embedded_object_sha256(root: &Path) -> String {
    let out = cargo()
        .args(["build", "--release", "--target", MUSL])
        .args(["-p", "ck-userspace", "--bin", "ck"])
        .arg("--message-format=json")
        .output()
        .expect("cargo build");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out_dir = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "build-script-executed")
        .filter(|m| {
            m["package_id"]
                .as_str()
                .is_some_and(|p| p.contains("ck-userspace"))
        })
        .find_map(|m| m["out_dir"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| {
            panic!(
                "no build script report of ck-userspace in {}",
                root.display()
            )
        });
    let object = std::fs::read(out_dir.join("ck")).expect("the embedded BPF object");
    Sha256::digest(&object)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `bin ARGS` with an empty environment (`env -i`), run from `dir`.
pub fn bare(bin: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear().current_dir(dir);
    cmd
}

/// `PATH` without the Rust toolchain: every directory of ours that holds no `cargo`, `rustc`
/// or `rustup` (so `~/.cargo/bin` goes); what a user without Rust has.
pub fn path_without_rust() -> OsString {
    let ours = std::env::var_os("PATH").unwrap_or_default();
    let kept: Vec<PathBuf> = std::env::split_paths(&ours)
        .filter(|dir| {
            ["cargo", "rustc", "rustup"]
                .iter()
                .all(|tool| !dir.join(tool).exists())
        })
        .collect();
    assert!(!kept.is_empty(), "no directory of PATH is left: {ours:?}");
    std::env::join_paths(kept).unwrap()
}

/// `bin` with only `PATH` (without Rust, [`path_without_rust`]) and `HOME` (`home`) set.
pub fn without_rust(bin: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear()
        .env("PATH", path_without_rust())
        .env("HOME", home)
        .current_dir(home);
    cmd
}

/// Runs `cmd` (at most 120 s) and asserts that it succeeded.
pub fn run(cmd: &mut Command) -> Output {
    let out = output_within(cmd, Duration::from_secs(120)).expect("a command that exits");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stdout of `cmd`, which must succeed.
pub fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

/// The names `tar -tzf` lists in `archive`.
pub fn listing(archive: &Path) -> Vec<String> {
    stdout(Command::new("tar").arg("-tzf").arg(archive))
        .lines()
        .map(str::to_string)
        .collect()
}

/// Every file and link under `dir`, at any depth (relative paths); directories are walked, not
/// listed (a package manager may leave the empty `bin/` and `lib/` of a prefix it created).
pub fn tree(dir: &Path) -> BTreeSet<PathBuf> {
    let mut all = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(here) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&here) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.is_symlink() {
                todo.push(path);
            } else {
                all.insert(path.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    all
}

/// The tarball unpacked into a directory of its own; returns it with the unpacked top folder.
pub fn unpack(dist: &Dist) -> (TempDir, PathBuf) {
    let dir = TempDir::new("dist-unpacked");
    run(Command::new("tar")
        .arg("-xzf")
        .arg(&dist.tarball)
        .arg("-C")
        .arg(dir.path()));
    let name = dist.tarball.file_name().unwrap().to_string_lossy();
    let top = dir.path().join(name.trim_end_matches(".tar.gz"));
    (dir, top)
}

/// `ck status --json` of instance `name` through `ck` (a command that runs ck), once it has
/// `n` ready slots and steers.
pub fn wait_ready(ck: &dyn Fn() -> Command, name: &str, n: usize) -> Status {
    let mut last = String::new();
    let ready = sys::poll_until(READY_TIMEOUT, Duration::from_millis(50), || {
        let Some(out) = output_within(
            ck().args(["status", "--json", "--name", name]),
            Duration::from_secs(10),
        ) else {
            return false;
        };
        last = String::from_utf8_lossy(&out.stdout).into_owned();
        serde_json::from_str::<Status>(&last).is_ok_and(|s| s.ready_count() >= n && s.bpf)
    });
    assert!(ready, "{n} ready slots and steering, last status: {last}");
    serde_json::from_str(&last).unwrap()
}

/// Runs the demo worker on `workers` slots (round-robin) with the `ck` that `ck` runs (the
/// packaged binary, or a launcher of it) as instance `t-LABEL-PORT`, and checks it as a user
/// would: every slot answers an equal share of a burst; slot 1 drained gets 0 new connections
/// while the others answer all; undrained, the shares are equal again; `ck stop` ends `ck run`
/// with status 0. `while_running` is given the status seen once it was ready, while it runs.
pub fn serve_and_drain(
    ck: &dyn Fn() -> Command,
    label: &str,
    workers: u32,
    while_running: &dyn Fn(&Status),
) {
    let port = free_port();
    let name = instance_name(label, port);
    let mut cmd = ck();
    cmd.args(["run", "--name", &name, "--policy", "round-robin"])
        .args(["-w", &workers.to_string(), "--port", &port.to_string()])
        .args(["--probe-port-base", &probe_base_for(port).to_string()]);
    let mut instance = Ck::spawn(&name, cmd).expect("start ck");
    let ctl = |args: &[&str]| stdout(ck().args(args).args(["--name", &name]));
    while_running(&wait_ready(ck, &name, workers as usize));
    let addr = local(port);

    let all = burst_pinned(addr, N);
    assert_eq!(all.ok, N, "{all:?}");
    for slot in 0..workers {
        assert_eq!(all.slot(slot), N / workers, "slot {slot}: {all:?}");
    }

    ctl(&["drain", "1"]);
    let status: Status = serde_json::from_str(&ctl(&["status", "--json"])).unwrap();
    assert_eq!(status.slot(1).state, "draining", "{status:#?}");
    let others: Vec<u32> = (0..workers).filter(|s| *s != 1).collect();
    assert_eq!(status.active, others, "{status:#?}");
    let drained = burst_without(burst_pinned, addr, N, 1, "drained");
    for slot in others {
        assert!(drained.slot(slot) > 0, "slot {slot}: {drained:?}");
    }

    ctl(&["undrain", "1"]);
    let back = burst_pinned(addr, N);
    for slot in 0..workers {
        assert_eq!(
            back.slot(slot),
            N / workers,
            "slot {slot} after undrain: {back:?}"
        );
    }
    ctl(&["stop"]);
    instance.wait_clean_exit().expect("ck exits cleanly");
}
