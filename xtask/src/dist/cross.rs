//! The machines `cargo xtask dist` builds the static `ck` for, and what building for each needs:
//! x86_64 (the build machine's own) always, aarch64 on request (`--target aarch64`), cross-built
//! with Debian's `gcc-aarch64-linux-gnu` as the linker (Rust's musl target brings its own C
//! runtime, so the GNU cross toolchain only links) and run under `qemu-aarch64-static`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, bail};
use clap::ValueEnum;

use crate::cmd::{self, command};

/// A machine the static `ck` is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Arch {
    /// `x86_64-unknown-linux-musl`: npm's `x64`, Debian's `amd64`.
    #[value(name = "x86_64")]
    X86_64,
    /// `aarch64-unknown-linux-musl`: npm's `arm64`, cross-built and run under qemu.
    #[value(name = "aarch64")]
    Aarch64,
}

/// The Debian package that has the aarch64 linker.
const AARCH64_GCC: (&str, &str) = ("aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu");
/// The Debian package that runs aarch64 programs on x86_64.
const QEMU: (&str, &str) = ("qemu-aarch64-static", "qemu-user-static");

impl Arch {
    /// The Rust target triple.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-musl",
            Arch::Aarch64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The machine's name in file names (`ck-VERSION-<name>-linux.tar.gz`, wheel tags).
    pub fn name(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// Node's `process.arch` (the `cpu` field of the npm platform package).
    pub fn npm_cpu(self) -> &'static str {
        match self {
            Arch::X86_64 => "x64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// Where cargo puts the release `ck` for this machine under the target directory `target`.
    pub fn release_dir(self, target: &Path) -> PathBuf {
        target.join(self.triple()).join("release")
    }

    /// Environment for cargo (and maturin, which runs cargo) to build for this machine.
    pub fn cargo_env(self) -> Vec<(&'static str, &'static str)> {
        match self {
            Arch::X86_64 => vec![],
            Arch::Aarch64 => vec![
                (
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER",
                    AARCH64_GCC.0,
                ),
                // cc-rs (C code in dependencies, if any) compiles with the same cross compiler.
                ("CC_aarch64_unknown_linux_musl", AARCH64_GCC.0),
            ],
        }
    }

    /// A command that runs `binary` (built for this machine) here: itself on x86_64, under qemu
    /// on aarch64.
    pub fn runner(self, binary: &Path) -> Command {
        match self {
            Arch::X86_64 => command(binary),
            Arch::Aarch64 => {
                let mut cmd = command(QEMU.0);
                cmd.arg(binary);
                cmd
            }
        }
    }

    /// Installs what building for (and running) this machine needs, when missing: the Rust
    /// target, and for aarch64 the cross linker and qemu; one `xtask: ...` line per install.
    pub fn ensure_tools(self) -> Result<()> {
        ensure_rust_target(self.triple())?;
        if self == Arch::Aarch64 {
            let missing = cmd::missing_packages(&[AARCH64_GCC, QEMU], &[]);
            if !missing.is_empty() {
                let packages = missing.join(" ");
                if !cmd::is_root() {
                    bail!(
                        "building ck for aarch64 needs {packages}: install them with \
                         `sudo apt-get install -y {packages}`"
                    );
                }
                eprintln!("xtask: installing {packages} to build ck for aarch64 (apt-get install)");
                let hint = format!("run `apt-get update && apt-get install -y {packages}`");
                cmd::apt_install(&missing, &hint)?;
            }
        }
        Ok(())
    }
}

/// Adds the Rust target `triple` to the toolchain that builds the workspace, unless it has it.
fn ensure_rust_target(triple: &str) -> Result<()> {
    let installed = cmd::output(
        command("rustup").args(["target", "list", "--installed"]),
        "install rustup (https://rustup.rs) and make sure it is on PATH",
    )?;
    if installed.lines().any(|t| t.trim() == triple) {
        return Ok(());
    }
    eprintln!("xtask: adding the {triple} target (rustup target add {triple})");
    cmd::run(
        command("rustup").args(["target", "add", triple]),
        &format!("check network access, or run `rustup target add {triple}` by hand"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_machine_has_its_names() {
        assert_eq!(Arch::X86_64.npm_cpu(), "x64");
        assert_eq!(Arch::Aarch64.npm_cpu(), "arm64");
        assert!(Arch::Aarch64.triple().starts_with(Arch::Aarch64.name()));
        assert!(Arch::X86_64.triple().starts_with(Arch::X86_64.name()));
        assert!(
            Arch::Aarch64
                .cargo_env()
                .iter()
                .any(|(k, v)| k.ends_with("_LINKER") && *v == "aarch64-linux-gnu-gcc")
        );
    }
}
