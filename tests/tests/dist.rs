//! `cargo xtask dist`: the tarball's static ck, unpacked into a directory of its own and run
//! with an empty environment, serves the demo worker and drains a slot to 0; the `.deb`
//! installs, its `/usr/bin/ck` serves, and purging it leaves no file it brought; `ck --version`
//! names the version, the commit and the hash of the embedded BPF object.
//!
//! The artifacts are built once per run (a release build for musl: minutes the first time) into
//! `target/dist-tests/`, which this file owns and empties before building.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use ck_tests::http::burst_without;
use ck_tests::sys::{self, TempDir, free_port, output_within};
use ck_tests::{Ck, READY_TIMEOUT, Status, burst_pinned, instance_name, local, probe_base_for};
use sha2::{Digest as _, Sha256};

/// Sequential new connections per burst.
const N: u32 = 400;
/// The static target `cargo xtask dist` builds for.
const MUSL: &str = "x86_64-unknown-linux-musl";

/// What `cargo xtask dist` made, and what it was made from.
struct Dist {
    tarball: PathBuf,
    deb: PathBuf,
    /// The SHA-256 of the BPF object the static build embedded, in hex.
    bpf_sha256: String,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Runs `cargo xtask dist --out target/dist-tests` once for every test of this file.
fn dist() -> &'static Dist {
    static DIST: OnceLock<Dist> = OnceLock::new();
    DIST.get_or_init(|| {
        let root = workspace();
        let out = root.join("target/dist-tests");
        let _ = std::fs::remove_dir_all(&out);
        let status = cargo()
            .args(["run", "-q", "-p", "xtask", "--", "dist", "--out"])
            .arg(&out)
            .status()
            .expect("running cargo xtask dist");
        assert!(status.success(), "cargo xtask dist failed: {status}");
        let found = |ext: &str| {
            let mut files: Vec<PathBuf> = std::fs::read_dir(&out)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(ext))
                .collect();
            assert_eq!(files.len(), 1, "one {ext} in {}: {files:?}", out.display());
            files.pop().unwrap()
        };
        Dist {
            tarball: found("-x86_64-linux.tar.gz"),
            deb: found(".deb"),
            bpf_sha256: embedded_object_sha256(&root),
        }
    })
}

/// The cargo that runs these tests, in the workspace root.
fn cargo() -> Command {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.current_dir(workspace());
    cargo
}

/// The SHA-256 of `OUT_DIR/ck` of the static build's build script (the object `bpf` embeds),
/// found in cargo's own report of that (already built, so instant) build.
fn embedded_object_sha256(root: &Path) -> String {
    let out = cargo()
        .args([
            "build",
            "--release",
            "--target",
            MUSL,
            "-p",
            "ck-userspace",
            "--bin",
            "ck",
        ])
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
    hex(&Sha256::digest(&object))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `bin ARGS` with an empty environment (`env -i`), run from `dir`.
fn bare(bin: &Path, dir: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_clear().current_dir(dir);
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = output_within(cmd, Duration::from_secs(30)).expect("a command that exits");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(cmd: &mut Command) -> String {
    String::from_utf8_lossy(&run(cmd).stdout).into_owned()
}

/// The tarball unpacked into a directory of its own; returns it with the unpacked top folder.
fn unpack(dist: &Dist) -> (TempDir, PathBuf) {
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

/// `ck status --json` of instance `name` through `bin`, once it has `n` ready slots and steers.
fn wait_ready(bin: &Path, dir: &Path, name: &str, n: usize) -> Status {
    let mut last = String::new();
    let ready = sys::poll_until(READY_TIMEOUT, Duration::from_millis(50), || {
        let Some(out) = output_within(
            bare(bin, dir).args(["status", "--json", "--name", name]),
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

#[test]
fn the_tarballs_static_ck_serves_and_drains_from_an_empty_environment() {
    let dist = dist();
    let (_dir, top) = unpack(dist);
    let listed = stdout(Command::new("tar").arg("-tzf").arg(&dist.tarball));
    for file in ["ck", "ck.service", "man/ck.1", "man/ck-run.1", "README.md"]
        .iter()
        .chain(&[
            "completions/ck.bash",
            "completions/_ck",
            "completions/ck.fish",
        ])
    {
        assert!(
            top.join(file).is_file(),
            "{file} missing from the tarball:\n{listed}"
        );
    }
    let ck = top.join("ck");

    // Statically linked: no program interpreter, and `file` says so.
    assert_eq!(ck_tests::elf::interpreter(&ck).unwrap(), None);
    let file = stdout(Command::new("file").arg("-L").arg(&ck));
    assert!(
        file.contains("statically linked") || file.contains("static-pie linked"),
        "{file}"
    );
    // The man pages are the real command line's, and the completions parse.
    let run_page = std::fs::read_to_string(top.join("man/ck-run.1")).unwrap();
    assert!(run_page.contains("drain\\-timeout"), "{run_page}");
    run(Command::new("bash")
        .arg("-n")
        .arg(top.join("completions/ck.bash")));

    let port = free_port();
    let name = instance_name("dist-tar", port);
    let mut cmd = bare(Path::new("./ck"), &top);
    cmd.args(["run", "--name", &name, "-w", "4", "--policy", "round-robin"])
        .args(["--port", &port.to_string()])
        .args(["--probe-port-base", &probe_base_for(port).to_string()]);
    let mut instance = Ck::spawn(&name, cmd);
    let ctl = |args: &[&str]| stdout(bare(&ck, &top).args(args).args(["--name", &name]));
    wait_ready(&ck, &top, &name, 4);
    let addr = local(port);

    let all = burst_pinned(addr, N);
    assert_eq!(all.ok, N, "{all:?}");
    for slot in 0..4 {
        assert_eq!(all.slot(slot), N / 4, "slot {slot}: {all:?}");
    }

    ctl(&["drain", "1"]);
    let status: Status = serde_json::from_str(&ctl(&["status", "--json"])).unwrap();
    assert_eq!(status.slot(1).state, "draining", "{status:#?}");
    assert_eq!(status.active, [0, 2, 3], "{status:#?}");
    let drained = burst_without(burst_pinned, addr, N, 1, "drained");
    for slot in [0, 2, 3] {
        assert!(drained.slot(slot) > 0, "slot {slot}: {drained:?}");
    }

    ctl(&["undrain", "1"]);
    let back = burst_pinned(addr, N);
    for slot in 0..4 {
        assert_eq!(
            back.slot(slot),
            N / 4,
            "slot {slot} after undrain: {back:?}"
        );
    }
    ctl(&["stop"]);
    instance.wait_clean_exit();
}

#[test]
fn version_names_the_version_the_commit_and_the_bpf_object() {
    let dist = dist();
    let (_dir, top) = unpack(dist);
    let said = stdout(bare(Path::new("./ck"), &top).arg("--version"));
    let head = stdout(
        Command::new("git")
            .args(["rev-parse", "--short", "HEAD"])
            .current_dir(workspace()),
    );
    let want = format!("ck {} (commit {}", env!("CARGO_PKG_VERSION"), head.trim());
    assert!(
        said.starts_with(&want),
        "{said:?} does not start with {want:?}"
    );
    let bpf = format!("bpf {})", &dist.bpf_sha256[..12]);
    assert!(
        said.trim_end().ends_with(&bpf),
        "{said:?} does not end with {bpf:?}"
    );

    // `ck upgrade` shows the candidate's version as `--version` prints it.
    let compat: serde_json::Value =
        serde_json::from_str(&stdout(bare(Path::new("./ck"), &top).arg("upgrade-check"))).unwrap();
    assert_eq!(
        format!("ck {}", compat["ck"].as_str().unwrap()),
        said.trim_end()
    );
}

/// Purges the package `ck` when dropped, also when the test failed half-way.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if installed() {
            let _ = Command::new("dpkg").args(["--purge", "ck"]).status();
        }
    }
}

/// Whether dpkg has the package `ck` installed.
fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f", "${db:Status-Status}", "ck"])
        .output()
        .is_ok_and(|o| o.stdout == b"installed")
}

/// One `.deb` install at a time (a machine has one /usr/bin/ck).
static DPKG: Mutex<()> = Mutex::new(());

#[test]
fn the_deb_installs_serves_from_usr_bin_and_purges_to_no_file() {
    let dist = dist();
    let _one = DPKG.lock().unwrap_or_else(|e| e.into_inner());
    assert!(
        !installed(),
        "a package named ck is installed already: `dpkg --purge ck` first"
    );
    assert!(
        !Path::new("/usr/bin/ck").exists(),
        "/usr/bin/ck exists and is not from a package"
    );

    // What the package brings, and which of those paths the system had before.
    let contents = stdout(Command::new("dpkg-deb").arg("-c").arg(&dist.deb));
    let paths: Vec<PathBuf> = contents
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .map(|p| PathBuf::from(p.trim_start_matches('.').trim_end_matches('/')))
        .filter(|p| p != Path::new(""))
        .collect();
    let existed: BTreeSet<&PathBuf> = paths.iter().filter(|p| p.exists()).collect();

    let guard = Installed;
    run(Command::new("dpkg").arg("-i").arg(&dist.deb));
    let listed = stdout(Command::new("dpkg").args(["-L", "ck"]));
    let listed: BTreeSet<PathBuf> = listed
        .lines()
        .filter(|l| *l != "/.")
        .map(PathBuf::from)
        .collect();
    for want in [
        "/usr/bin/ck",
        "/lib/systemd/system/ck.service",
        "/usr/share/bash-completion/completions/ck",
        "/usr/share/zsh/vendor-completions/_ck",
        "/usr/share/fish/vendor_completions.d/ck.fish",
    ] {
        assert!(
            listed.contains(Path::new(want)),
            "{want} not installed: {listed:?}"
        );
    }
    let unit = std::fs::read_to_string("/lib/systemd/system/ck.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/ck run"), "{unit}");
    let page = stdout(Command::new("man").args(["-w", "ck"]));
    assert!(page.starts_with("/usr/share/man/man1/ck.1"), "{page}");
    let page = stdout(Command::new("man").args(["-w", "ck-run"]));
    assert!(
        listed.contains(Path::new(page.trim())),
        "{page} not the package's"
    );

    // `ck run` from /usr/bin/ck serves on every slot.
    let port = free_port();
    let name = instance_name("dist-deb", port);
    let mut cmd = Command::new("/usr/bin/ck");
    cmd.env_clear()
        .args([
            "run",
            "--name",
            &name,
            "-w",
            "2",
            "--port",
            &port.to_string(),
        ])
        .args(["--probe-port-base", &probe_base_for(port).to_string()]);
    let mut instance = Ck::spawn(&name, cmd);
    let status = wait_ready(Path::new("/usr/bin/ck"), Path::new("/"), &name, 2);
    let exe = std::fs::read_link(format!("/proc/{}/exe", status.pid)).unwrap();
    assert_eq!(exe, Path::new("/usr/bin/ck"));
    let all = burst_pinned(local(port), N);
    assert_eq!(all.ok, N, "{all:?}");
    for slot in 0..2 {
        assert!(all.slot(slot) > 0, "slot {slot}: {all:?}");
    }
    run(Command::new("/usr/bin/ck").args(["stop", "--name", &name]));
    instance.wait_clean_exit();
    drop(instance);

    run(Command::new("dpkg").args(["--purge", "ck"]));
    drop(guard);
    let left: Vec<&PathBuf> = listed
        .iter()
        .chain(&paths)
        .filter(|p| !existed.contains(p) && p.exists())
        .collect();
    assert!(left.is_empty(), "left after dpkg --purge: {left:?}");
}
