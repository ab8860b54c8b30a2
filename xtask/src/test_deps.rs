//! What the integration tests run besides ck: Node.js, Python 3, a C compiler and tmux (the
//! terminal `ck top` is tested in), Debian packages installed when missing, and the real Python
//! servers gunicorn and uvicorn from PyPI, in a virtualenv of the workspace
//! (`target/py-servers`). [`ensure`] is idempotent and prints one `xtask: ...` line per thing it
//! does.

use std::path::Path;

use anyhow::{Result, bail};

use crate::cmd::{self, command};

/// Programs the tests start, and the Debian package that has each.
const PROGRAMS: [(&str, &str); 4] = [
    ("node", "nodejs"),
    ("python3", "python3"),
    ("cc", "gcc"),
    ("tmux", "tmux"),
];

/// PyPI packages the tests run, and a binary each installs.
const PY_SERVERS: [(&str, &str); 2] = [("gunicorn", "gunicorn"), ("uvicorn", "uvicorn")];

/// Installs whatever of the above is missing (Debian packages need root).
pub fn ensure(workspace: &Path) -> Result<()> {
    let missing: Vec<&str> = PROGRAMS
        .iter()
        .filter(|(program, _)| cmd::find_program(program, &[]).is_none())
        .map(|(_, package)| *package)
        .collect();
    if !missing.is_empty() {
        let packages = missing.join(" ");
        if !cmd::is_root() {
            bail!(
                "the tests run {packages}: install them with `sudo apt-get install -y {packages}`"
            );
        }
        eprintln!("xtask: installing {packages} for the tests (apt-get install)");
        cmd::run(
            command("apt-get")
                .env("DEBIAN_FRONTEND", "noninteractive")
                .args(["install", "-y"])
                .args(&missing),
            &format!("run `apt-get update && apt-get install -y {packages}` by hand"),
        )?;
    }
    let venv = workspace.join("target/py-servers");
    let bin = venv.join("bin");
    let absent: Vec<&str> = PY_SERVERS
        .iter()
        .filter(|(_, binary)| !bin.join(binary).is_file())
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
            command("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv failed: install the venv module (`apt-get install -y python3-venv`)",
        )?;
    }
    cmd::run(
        command(bin.join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check"])
            .args(&absent),
        "check access to PyPI, or install them by hand into target/py-servers",
    )
}
