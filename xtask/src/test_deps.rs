//! What the integration tests run besides ck: Node.js and npm, Python 3, a C compiler, tmux (the
//! terminal `ck top` is tested in), tini, `systemd-analyze`, setpriv, the real servers Go,
//! nginx, puma and rack, the fleet's haproxy, nft, ip and nsenter, dnsmasq, dnsperf and ngtcp2's
//! example server and client (Debian packages, installed when missing), the real Python servers
//! gunicorn and uvicorn and the QUIC stack aioquic from PyPI in a virtualenv of the workspace
//! (`target/py-servers`), the Kubernetes schema validator `kubernetes-validate` from PyPI
//! (`target/k8s-validate`), and cargo-nextest, which runs the tests. [`ensure`] is idempotent
//! and prints one `xtask: ...` line per thing it does.

use std::path::Path;

use anyhow::{Result, bail};

use crate::cmd::{self, command};

/// Programs the tests start, and the Debian package that has each: tmux is the terminal `ck top`
/// is tested in, tini runs ck in the container image (`deploy/Dockerfile`), `systemd-analyze
/// verify` checks `deploy/ck.service`, setpriv runs ck and its clients as `nobody` with chosen
/// capabilities (`least_privilege.rs`, `control_peer.rs`); go, nginx, puma and rackup (rack,
/// which puma runs apps with) are the real servers of `servers.rs` and `servers_adopt.rs`;
/// haproxy and nft are the fleet's fronts, ip makes its network namespaces and nsenter runs ck
/// in them (`fleet_*.rs`, `cargo xtask fleet`); puma also serves a Ruby app that boots slowly
/// and waits in `pselect6` (`ready_slow.rs`); `file` and `man` check the static binary and the installed man pages of
/// `cargo xtask dist` (`dist.rs`); npm packs and installs its npm packages there (Debian's
/// nodejs comes without it; NodeSource's has it); dnsmasq is the unmodified DNS server adopted in
/// a UDP group (`udp_dns.rs`, `bench dns`) and dnsperf its load (`bench dns`); gtlsserver and
/// gtlsclient are ngtcp2's example HTTP/3 server, an unmodified QUIC server (`quic_stacks.rs`,
/// `bench quic`), and client (the guide's UDP page).
const PROGRAMS: [(&str, &str); 22] = [
    ("node", "nodejs"),
    ("npm", "npm"),
    ("python3", "python3"),
    ("cc", "gcc"),
    ("tmux", "tmux"),
    ("tini", "tini"),
    ("systemd-analyze", "systemd"),
    ("setpriv", "util-linux"),
    ("go", "golang-go"),
    ("nginx", "nginx-light"),
    ("puma", "puma"),
    ("rackup", "ruby-rack"),
    ("haproxy", "haproxy"),
    ("nft", "nftables"),
    ("ip", "iproute2"),
    ("nsenter", "util-linux"),
    ("file", "file"),
    ("man", "man-db"),
    ("dnsmasq", "dnsmasq-base"),
    ("dnsperf", "dnsperf"),
    ("gtlsserver", "ngtcp2-server"),
    ("gtlsclient", "ngtcp2-client"),
];

/// How to tell that a PyPI package is installed in a virtualenv.
#[derive(Debug, Clone, Copy)]
enum Installed {
    /// It installs this program in the virtualenv's `bin`.
    Binary(&'static str),
    /// The virtualenv's Python imports this module (a library with no program).
    Module(&'static str),
}

impl Installed {
    /// Whether it is installed in the virtualenv `venv`.
    fn in_venv(self, venv: &Path) -> bool {
        match self {
            Installed::Binary(name) => venv.join("bin").join(name).is_file(),
            Installed::Module(name) => std::process::Command::new(venv.join("bin/python"))
                .args(["-c", &format!("import {name}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        }
    }
}

/// PyPI packages the tests run: gunicorn and uvicorn serve the Python web apps, aioquic is the
/// HTTP/3 stack of `examples/python/h3_server.py` (`quic_stacks.rs`, `bench quic`).
const PY_SERVERS: [(&str, Installed); 3] = [
    ("gunicorn", Installed::Binary("gunicorn")),
    ("uvicorn", Installed::Binary("uvicorn")),
    ("aioquic", Installed::Module("aioquic")),
];

/// The Kubernetes manifests' validator (it bundles the API schemas, so it works offline); the
/// version is pinned so that the schemas checked against do not change under the tests.
const K8S_VALIDATE: [(&str, Installed); 1] = [(
    "kubernetes-validate==1.37.0",
    Installed::Binary("kubernetes-validate"),
)];

/// Installs whatever of the above is missing (Debian packages need root), and cargo-nextest,
/// which runs the tests.
pub fn ensure(workspace: &Path) -> Result<()> {
    ensure_nextest()?;
    ensure_programs()?;
    ensure_py_servers(workspace)?;
    ensure_venv(&workspace.join("target/k8s-validate"), &K8S_VALIDATE)
}

/// Installs cargo-nextest (`cargo install cargo-nextest --locked`) when `cargo nextest` is
/// missing: `cargo xtask test` runs the tests with it.
pub fn ensure_nextest() -> Result<()> {
    let present = cmd::cargo()
        .args(["nextest", "--version"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-nextest, which runs the tests (cargo install --locked)");
    cmd::run(
        cmd::cargo().args(["install", "cargo-nextest", "--locked"]),
        "see the cargo output above; installing cargo-nextest needs access to crates.io",
    )
}

/// Installs the missing [`PY_SERVERS`] into `target/py-servers` (the benches run aioquic).
pub fn ensure_py_servers(workspace: &Path) -> Result<()> {
    ensure_venv(&workspace.join("target/py-servers"), &PY_SERVERS)
}

/// Installs the missing [`PROGRAMS`] (Debian packages: root), not the PyPI ones.
pub fn ensure_programs() -> Result<()> {
    let missing = cmd::missing_packages(&PROGRAMS, &["/usr/sbin", "/sbin"]);
    if !missing.is_empty() {
        let packages = missing.join(" ");
        if !cmd::is_root() {
            bail!(
                "the tests run {packages}: install them with `sudo apt-get install -y {packages}`"
            );
        }
        eprintln!("xtask: installing {packages} for the tests (apt-get update && apt-get install)");
        let hint = format!("run `apt-get update && apt-get install -y {packages}` by hand");
        cmd::apt_install(&missing, &hint)?;
    }
    Ok(())
}

/// Installs `packages` (pip requirement, how to tell it is there) that are missing into the
/// virtualenv `venv`, creating it first if needed.
fn ensure_venv(venv: &Path, packages: &[(&str, Installed)]) -> Result<()> {
    let bin = venv.join("bin");
    let absent: Vec<&str> = packages
        .iter()
        .filter(|(_, installed)| !installed.in_venv(venv))
        .map(|(package, _)| *package)
        .collect();
    if absent.is_empty() {
        return Ok(());
    }
    eprintln!(
        "xtask: installing {} from PyPI into {} (python3 -m venv, pip install)",
        absent.join(" and "),
        venv.display()
    );
    if !bin.join("pip").is_file() {
        cmd::run(
            command("python3").args(["-m", "venv"]).arg(venv),
            "python3 -m venv failed: install the venv module (`apt-get install -y python3-venv`)",
        )?;
    }
    cmd::run(
        command(bin.join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(&absent),
        &format!(
            "check access to PyPI, or install them by hand into {}",
            venv.display()
        ),
    )
}
