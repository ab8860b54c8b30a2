//! The Python wheel `ck-supervisor` of `cargo xtask dist`: the static `ck` as the wheel's script,
//! built by maturin with `bindings = "bin"` (the way ruff ships), from
//! `packaging/python/pyproject.toml`. maturin has no way to take an already-built binary: it
//! runs cargo itself, for the same package, binary, target and release profile as the tarball's
//! build, into the same target directory, so cargo finds everything built already and only
//! copies. The wheel is tagged both `manylinux_2_17` and `musllinux_1_1`: the binary links no C
//! library, so pip installs it on glibc and musl systems alike. maturin is installed from PyPI
//! into a virtualenv of the target directory (`target/maturin`) when missing.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use super::cross::Arch;
use super::fresh_dir;
use crate::cmd::{self, command};

/// maturin's requirement: 1.x has `bindings = "bin"`, `--compatibility` with several tags and
/// `manifest-path` in `pyproject.toml`.
const MATURIN: &str = "maturin>=1.5,<2";

/// The platform tags of the wheel: a static binary runs on any glibc or musl Linux.
const COMPATIBILITY: [&str; 2] = ["manylinux_2_17", "musllinux_1_1"];

/// Installs maturin into `target/maturin` unless it is there; returns the maturin to run.
pub fn ensure_maturin(target: &Path) -> Result<PathBuf> {
    let venv = target.join("maturin");
    let maturin = venv.join("bin/maturin");
    if maturin.is_file() {
        return Ok(maturin);
    }
    eprintln!(
        "xtask: installing maturin from PyPI into {} (python3 -m venv, pip install)",
        venv.display()
    );
    if !venv.join("bin/pip").is_file() {
        cmd::run(
            command("python3").args(["-m", "venv"]).arg(&venv),
            "python3 -m venv failed: install Python 3 and its venv module \
             (`apt-get install -y python3-venv`)",
        )?;
    }
    cmd::run(
        command(venv.join("bin/pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            MATURIN,
        ]),
        &format!(
            "check access to PyPI, or run `{}/bin/pip install '{MATURIN}'`",
            venv.display()
        ),
    )?;
    Ok(maturin)
}

/// `maturin build` of the wheel for `arch` into `out`; returns the wheel it wrote.
pub fn build(
    maturin: &Path,
    workspace: &Path,
    target: &Path,
    out: &Path,
    arch: Arch,
) -> Result<PathBuf> {
    let project = workspace.join("packaging/python");
    // maturin writes into a directory of its own, so that the wheel it made is the one there.
    let stage = out.join("wheel-stage");
    fresh_dir(&stage)?;
    let mut build = command(maturin);
    build
        .current_dir(&project)
        .env("CARGO_TARGET_DIR", target)
        .envs(arch.cargo_env())
        .args(["build", "--release", "--quiet", "--target", arch.triple()])
        .arg("--compatibility")
        .args(COMPATIBILITY)
        .arg("--out")
        .arg(&stage);
    cmd::run(&mut build, "see maturin's output above")?;
    let made = wheels(&stage)?;
    let [wheel] = &made[..] else {
        bail!(
            "maturin built {} wheels in {}, not one: {made:?}",
            made.len(),
            stage.display()
        );
    };
    let name = wheel.file_name().expect("a wheel's file name");
    if !is_for(name, arch) {
        bail!(
            "maturin built {}, not a ck_supervisor wheel for {}",
            wheel.display(),
            arch.name()
        );
    }
    let moved = out.join(name);
    fs::rename(wheel, &moved)
        .with_context(|| format!("moving {} to {}", wheel.display(), moved.display()))?;
    fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    Ok(moved)
}

/// Whether the wheel file `name` is ck's for `arch`.
fn is_for(name: &std::ffi::OsStr, arch: Arch) -> bool {
    let name = name.to_string_lossy();
    name.starts_with("ck_supervisor-") && name.ends_with(&format!("_{}.whl", arch.name()))
}

/// The wheels in `dir`.
fn wheels(dir: &Path) -> Result<Vec<PathBuf>> {
    Ok(fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn a_wheel_is_told_by_its_machine() {
        let x86 = OsStr::new(
            "ck_supervisor-0.1.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.\
             musllinux_1_1_x86_64.whl",
        );
        assert!(is_for(x86, Arch::X86_64));
        assert!(!is_for(x86, Arch::Aarch64));
        assert!(!is_for(
            OsStr::new("other-0.1.0-py3-none-any.whl"),
            Arch::X86_64
        ));
    }
}
