//! Makes sure everything building and running ck needs is present: the nightly toolchain with
//! `rust-src`, LLVM 22 (`llvm-22-dev`), `bpftool`, `bpf-linker` and a bpffs at `/sys/fs/bpf`.
//!
//! [`ensure`] is idempotent: each step checks first and prints exactly one `xtask: ...` line
//! only when it has to act. Steps that need root and cannot be done are collected and reported
//! together, with the commands to run.

use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command};

/// Where Debian's `llvm-22-dev` puts `llvm-config`; also the `LLVM_PREFIX` for bpf-linker.
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// The mount point ck pins its maps under.
const BPFFS: &str = "/sys/fs/bpf";
/// sbin directories a non-root `PATH` may lack (Debian installs `bpftool` in `/usr/sbin`).
const SBIN_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin"];

/// Whether the caller needs the bpffs mounted at `/sys/fs/bpf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bpffs {
    /// Fail when it is missing and cannot be mounted (loading the BPF program, tests).
    Required,
    /// Mount it if we can, otherwise only say how (building).
    Optional,
}

/// Installs or sets up whatever is missing; see the module docs. Fails, naming the command and
/// what to do, when a step fails or needs root that we do not have.
pub fn ensure(bpffs: Bpffs) -> Result<()> {
    let root = cmd::is_root();
    // Commands the user must run as root before we can go on.
    let mut need_root: Vec<String> = Vec::new();

    ensure_nightly()?;
    ensure_rust_src()?;

    let llvm_ok = ensure_apt_packages(root, &mut need_root)?;
    if llvm_ok {
        ensure_bpf_linker()?;
    }

    ensure_bpffs(root, bpffs, &mut need_root)?;

    if !need_root.is_empty() {
        bail!(
            "some setup needs root; run these and try again:\n  {}",
            need_root.join("\n  ")
        );
    }
    Ok(())
}

/// Prints the one line a step prints when it acts.
fn announce(what: &str) {
    eprintln!("xtask: {what}");
}

fn ensure_nightly() -> Result<()> {
    let list = cmd::output(
        command("rustup").args(["toolchain", "list"]),
        "install rustup (https://rustup.rs) and make sure it is on PATH",
    )?;
    if has_nightly(&list) {
        return Ok(());
    }
    announce("installing the nightly Rust toolchain (rustup toolchain install nightly)");
    cmd::run(
        command("rustup").args(["toolchain", "install", "nightly", "--profile", "minimal"]),
        "check network access, or install it by hand with \
         `rustup toolchain install nightly --profile minimal`",
    )
}

fn ensure_rust_src() -> Result<()> {
    let list = cmd::output(
        command("rustup").args(["component", "list", "--toolchain", "nightly", "--installed"]),
        "check that the nightly toolchain works: `rustup run nightly rustc --version`",
    )?;
    if has_component(&list, "rust-src") {
        return Ok(());
    }
    announce("adding rust-src to the nightly toolchain (rustup component add)");
    cmd::run(
        command("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]),
        "check network access, or run `rustup component add rust-src --toolchain nightly`",
    )
}

/// Installs `llvm-22-dev` and `bpftool` with one apt-get call if either is missing. Returns
/// whether LLVM 22 is present afterwards (bpf-linker cannot be built without it).
fn ensure_apt_packages(root: bool, need_root: &mut Vec<String>) -> Result<bool> {
    let llvm_config = Path::new(LLVM_PREFIX).join("bin/llvm-config");
    let mut missing: Vec<&str> = Vec::new();
    if !llvm_config.exists() {
        missing.push("llvm-22-dev");
    }
    if cmd::find_program("bpftool", SBIN_DIRS).is_none() {
        missing.push("bpftool");
    }
    if missing.is_empty() {
        return Ok(true);
    }
    if !root {
        need_root.push(format!("sudo apt-get install -y {}", missing.join(" ")));
        return Ok(llvm_config.exists());
    }

    let packages = missing.join(" ");
    announce(&format!(
        "installing {packages} (apt-get update && apt-get install)"
    ));
    let hint = format!(
        "check the apt sources and network access, then run \
         `apt-get update && apt-get install -y {packages}` by hand"
    );
    cmd::apt_install(&missing, &hint)?;
    if !llvm_config.exists() {
        bail!(
            "llvm-22-dev is installed but {} is missing; check `dpkg -L llvm-22-dev`",
            llvm_config.display()
        );
    }
    Ok(true)
}

fn ensure_bpf_linker() -> Result<()> {
    if cmd::find_program("bpf-linker", &[]).is_some() {
        return Ok(());
    }
    announce("building bpf-linker against LLVM 22 (cargo install bpf-linker, takes ~2 min)");
    cmd::run(
        cmd::cargo().env("LLVM_PREFIX", LLVM_PREFIX).args([
            "install",
            "bpf-linker",
            "--no-default-features",
            "--features",
            "llvm-22",
        ]),
        "see the cargo output above; bpf-linker needs llvm-22-dev \
         (`apt-get install -y llvm-22-dev`) and network access to crates.io",
    )
}

fn ensure_bpffs(root: bool, bpffs: Bpffs, need_root: &mut Vec<String>) -> Result<()> {
    let mounts = fs::read_to_string("/proc/mounts").context("reading /proc/mounts")?;
    if bpffs_mounted(&mounts) {
        return Ok(());
    }
    let mount_cmd = format!("mount -t bpf bpf {BPFFS}");
    if !root {
        match bpffs {
            Bpffs::Required => need_root.push(format!("sudo {mount_cmd}")),
            Bpffs::Optional => {
                eprintln!("xtask: note: no bpffs at {BPFFS}; ck will need `sudo {mount_cmd}`")
            }
        }
        return Ok(());
    }
    announce(&format!("mounting the bpf filesystem ({mount_cmd})"));
    let result = cmd::run(
        command("mount").args(["-t", "bpf", "bpf", BPFFS]),
        &format!("make sure {BPFFS} exists and the kernel has CONFIG_BPF_SYSCALL"),
    );
    match (result, bpffs) {
        (Ok(()), _) => Ok(()),
        (Err(e), Bpffs::Required) => Err(e),
        (Err(e), Bpffs::Optional) => {
            eprintln!("xtask: warning: {e:#}");
            Ok(())
        }
    }
}

/// Whether `rustup toolchain list` output names the `nightly` channel (not a dated nightly).
pub fn has_nightly(list: &str) -> bool {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .any(|name| {
            name == "nightly"
                || name
                    .strip_prefix("nightly-")
                    .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()))
        })
}

/// Whether `rustup component list --installed` output lists `component` by exactly that name.
/// Target-independent components such as `rust-src` are listed bare; per-target ones carry a
/// triple suffix (`rust-std-x86_64-unknown-linux-gnu`) and must be asked for by full name.
pub fn has_component(list: &str, component: &str) -> bool {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .any(|name| name == component)
}

/// Whether `/proc/mounts` content has a filesystem of type `bpf` mounted on `/sys/fs/bpf`.
pub fn bpffs_mounted(mounts: &str) -> bool {
    mounts.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (_source, target, fstype) = (fields.next(), fields.next(), fields.next());
        target == Some(BPFFS) && fstype == Some("bpf")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLCHAINS: &str = "stable-x86_64-unknown-linux-gnu (active, default)\n\
                              nightly-x86_64-unknown-linux-gnu\n\
                              1.95.0-x86_64-unknown-linux-gnu\n";

    #[test]
    fn nightly_found() {
        assert!(has_nightly(TOOLCHAINS));
        assert!(has_nightly("nightly-aarch64-unknown-linux-gnu (default)\n"));
        assert!(has_nightly("nightly\n"));
    }

    #[test]
    fn nightly_missing() {
        assert!(!has_nightly("stable-x86_64-unknown-linux-gnu (default)\n"));
        assert!(!has_nightly(
            "nightly-2024-05-01-x86_64-unknown-linux-gnu\n"
        ));
        assert!(!has_nightly("no installed toolchains\n"));
        assert!(!has_nightly(""));
    }

    const COMPONENTS: &str = "cargo-x86_64-unknown-linux-gnu\n\
                              clippy-x86_64-unknown-linux-gnu\n\
                              rust-src\n\
                              rust-std-x86_64-unknown-linux-gnu\n\
                              rustc-x86_64-unknown-linux-gnu\n";

    #[test]
    fn component_found() {
        assert!(has_component(COMPONENTS, "rust-src"));
        assert!(has_component(
            COMPONENTS,
            "rust-std-x86_64-unknown-linux-gnu"
        ));
    }

    #[test]
    fn component_missing() {
        let without = COMPONENTS.replace("rust-src\n", "");
        assert!(!has_component(&without, "rust-src"));
        // Prefixes of other components do not count.
        assert!(!has_component(&without, "rust"));
        assert!(!has_component(&without, "rust-std"));
        assert!(!has_component("", "rust-src"));
    }

    #[test]
    fn bpffs_found() {
        let mounts = "sysfs /sys sysfs rw,relatime 0 0\n\
                      bpf /sys/fs/bpf bpf rw,nosuid,nodev,noexec,relatime,mode=700 0 0\n";
        assert!(bpffs_mounted(mounts));
        assert!(bpffs_mounted("none /sys/fs/bpf bpf rw 0 0"));
    }

    #[test]
    fn bpffs_missing() {
        let mounts = "sysfs /sys sysfs rw,relatime 0 0\n\
                      tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0\n";
        assert!(!bpffs_mounted(mounts));
        // Wrong fstype on the right path, and a bpffs somewhere else.
        assert!(!bpffs_mounted("tmpfs /sys/fs/bpf tmpfs rw 0 0\n"));
        assert!(!bpffs_mounted("bpf /mnt/bpf bpf rw 0 0\n"));
        assert!(!bpffs_mounted(""));
    }
}
