//! The `ck` binary under test and the files of one instance: where the binary is, a `ck`
//! command with searchable log lines, one-shot `ck ARGS` runs, and the pin directory, control
//! socket, lock and state files of an instance (taken from the library, as ck finds them), with
//! their removal.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Result, ensure};

use crate::sys;

/// Path of the `ck` binary: `$CK_BIN`, else `target/debug/ck` of this workspace.
///
/// # Panics
/// When the binary does not exist (it is built by `cargo xtask test`, not by `cargo test`).
pub fn ck_bin() -> PathBuf {
    find_ck_bin().unwrap_or_else(|e| panic!("{e}"))
}

/// [`ck_bin`], or the error that names how to build it.
pub fn find_ck_bin() -> Result<PathBuf> {
    let path = match std::env::var_os("CK_BIN").filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => {
            let target = option_env!("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target"));
            target.join("debug").join("ck")
        }
    };
    ensure!(
        path.is_file(),
        "{} does not exist: run `cargo xtask test` (it builds ck first), or \
         `cargo build -p ck-userspace --bin ck`, or set CK_BIN",
        path.display()
    );
    Ok(path)
}

/// A `ck` command (no arguments yet).
pub fn ck_command() -> Command {
    ck_command_at(&ck_bin())
}

/// A command of the ck binary `bin` (a copy of [`ck_bin`], for example one that another user can
/// reach), with no arguments yet and plain log lines (no ANSI colours, no `CK_LOG` of the
/// caller) that can be searched.
pub fn ck_command_at(bin: &Path) -> Command {
    let mut cmd = Command::new(bin);
    cmd.env_remove("CK_LOG").env("NO_COLOR", "1");
    cmd
}

/// Runs `ck ARGS` to completion (at most 20 s) and returns its output.
///
/// # Panics
/// When it does not exit in time (it is killed first).
pub fn ck_output(args: &[&str]) -> Output {
    sys::output_within(ck_command().args(args), Duration::from_secs(20))
        .unwrap_or_else(|| panic!("`ck {}` did not exit within 20 s", args.join(" ")))
}

/// What a `ck` command printed: its stdout, then its stderr.
pub fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Pin directory of instance `name`: under `$CK_PIN_DIR`, else `/sys/fs/bpf/ck`, as ck itself
/// finds it.
pub fn pins_dir(name: &str) -> PathBuf {
    ::ck::bpf::pins::instance_dir(name)
}

/// Control socket of instance `name`: under `$CK_RUN_DIR`, else `/run/ck`.
pub fn control_socket(name: &str) -> PathBuf {
    ::ck::os::instance::control_path(name)
}

/// Lock file of instance `name`.
pub fn lock_file(name: &str) -> PathBuf {
    ::ck::os::instance::lock_path(name)
}

/// The `--survive-supervisor` state file of instance `name`.
pub fn state_file(name: &str) -> PathBuf {
    ::ck::os::instance::state_path(name)
}

/// Removes whatever instance `name` may have left: cgroups, pins, control socket, lock file,
/// state file.
pub fn remove_leftovers(name: &str) {
    if let Some(dir) = sys::cgroup_dir(name) {
        sys::remove_cgroup(&dir);
    }
    let _ = fs::remove_dir_all(pins_dir(name));
    let _ = fs::remove_file(control_socket(name));
    let _ = fs::remove_file(lock_file(name));
    let _ = fs::remove_file(state_file(name));
}
