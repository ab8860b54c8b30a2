//! `cargo xtask dist`: the tarball's static ck, unpacked into a directory of its own and run
//! with an empty environment, serves the demo worker and drains a slot to 0; the `.deb`
//! installs, its `/usr/bin/ck` serves, and purging it leaves no file it brought; `ck --version`
//! names the version, the commit and the hash of the embedded BPF object. The npm packages and
//! the wheel are tested in `dist_support/packages.rs`.
//!
//! The artifacts are built once per run (a release build for musl: minutes the first time) into
//! `target/dist-tests/` (see `dist_support`).

mod dist_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use ck_tests::sys::free_port;
use ck_tests::{Ck, burst_pinned, instance_name, local, probe_base_for};
use dist_support::{
    N, bare, dist, listing, run, serve_and_drain, stdout, unpack, wait_ready, workspace,
};

#[test]
fn the_tarballs_static_ck_serves_and_drains_from_an_empty_environment() {
    let dist = dist();
    let (_dir, top) = unpack(dist);
    let listed = listing(&dist.tarball);
    for file in ["ck", "ck.service", "man/ck.1", "man/ck-run.1", "README.md"]
        .iter()
        .chain(&[
            "completions/ck.bash",
            "completions/_ck",
            "completions/ck.fish",
            "examples/worker.js",
            "examples/listen.js",
            "examples/worker.py",
        ])
    {
        assert!(
            top.join(file).is_file(),
            "{file} missing from the tarball:\n{listed:?}"
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

    let unpacked = || bare(Path::new("./ck"), &top);
    serve_and_drain(&unpacked, "dist-tar", 4, &|status| {
        let exe = std::fs::read_link(format!("/proc/{}/exe", status.pid)).unwrap();
        assert_eq!(exe, ck.canonicalize().unwrap());
    });
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
        "/usr/share/doc/ck/examples/worker.js",
        "/usr/share/doc/ck/examples/listen.js",
        "/usr/share/doc/ck/examples/worker.py",
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
    let mut instance = Ck::spawn(&name, cmd).expect("start ck");
    let status = wait_ready(&|| bare(Path::new("/usr/bin/ck"), Path::new("/")), &name, 2);
    let exe = std::fs::read_link(format!("/proc/{}/exe", status.pid)).unwrap();
    assert_eq!(exe, Path::new("/usr/bin/ck"));
    let all = burst_pinned(local(port), N);
    assert_eq!(all.ok, N, "{all:?}");
    for slot in 0..2 {
        assert!(all.slot(slot) > 0, "slot {slot}: {all:?}");
    }
    run(Command::new("/usr/bin/ck").args(["stop", "--name", &name]));
    instance.wait_clean_exit().expect("ck exits cleanly");
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
