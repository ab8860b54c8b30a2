//! Helpers for spawning external programs from xtask: a `PATH` that always includes the cargo
//! bin directory, program lookup, running a command with an error that names it and says what to
//! do, and the effective-uid check.

use std::env;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::process::{Command, ExitStatus};

use anyhow::{Context as _, Result, bail};

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments, touches no memory we own and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The directory `cargo install` puts binaries in: `$CARGO_HOME/bin`, else `$HOME/.cargo/bin`.
pub fn cargo_bin_dir() -> Option<PathBuf> {
    if let Some(home) = env::var_os("CARGO_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(home).join("bin"));
    }
    env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cargo").join("bin"))
}

/// The `PATH` handed to every child process: ours, with the cargo bin directory put in front
/// when it is not already on it (so a freshly installed `bpf-linker` is found).
pub fn child_path() -> OsString {
    let current = env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = env::split_paths(&current).collect();
    if let Some(bin) = cargo_bin_dir()
        && !dirs.contains(&bin)
    {
        dirs.insert(0, bin);
    }
    env::join_paths(dirs).unwrap_or(current)
}

/// A [`Command`] for `program` whose `PATH` is [`child_path`].
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new(program);
    cmd.env("PATH", child_path());
    cmd
}

/// The cargo to run nested builds with: the one that ran us (`$CARGO`), else `cargo` on `PATH`.
pub fn cargo() -> Command {
    command(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Looks `name` up on [`child_path`], then in `extra_dirs` (e.g. sbin directories that a
/// non-root `PATH` may lack).
pub fn find_program(name: &str, extra_dirs: &[&str]) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = env::split_paths(&child_path()).collect();
    dirs.extend(extra_dirs.iter().map(PathBuf::from));
    let joined = env::join_paths(dirs).ok()?;
    which::which_in_global(name, Some(joined)).ok()?.next()
}

/// A shell-like rendering of `cmd` for messages, including any environment it sets
/// (other than `PATH`), e.g. `LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker`.
pub fn describe(cmd: &Command) -> String {
    let mut parts: Vec<String> = cmd
        .get_envs()
        .filter(|(k, _)| *k != "PATH")
        .filter_map(|(k, v)| v.map(|v| format!("{}={}", k.to_string_lossy(), v.to_string_lossy())))
        .collect();
    parts.push(cmd.get_program().to_string_lossy().into_owned());
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs `cmd` with inherited stdio and fails, naming the command and adding `hint` (what the
/// user should do), if it cannot be started or exits unsuccessfully.
pub fn run(cmd: &mut Command, hint: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`: {hint}", describe(cmd)))?;
    if !status.success() {
        bail!(
            "`{}` failed ({}): {hint}",
            describe(cmd),
            status_text(status)
        );
    }
    Ok(())
}

/// The Debian packages of `programs` (`(program, package)` pairs) whose program is not found
/// on `PATH` or in `extra_dirs`.
pub fn missing_packages<'a>(programs: &[(&str, &'a str)], extra_dirs: &[&str]) -> Vec<&'a str> {
    programs
        .iter()
        .filter(|(program, _)| find_program(program, extra_dirs).is_none())
        .map(|(_, package)| *package)
        .collect()
}

/// `apt-get update` then `apt-get install -y PACKAGES` (non-interactive), failing with `hint`.
pub fn apt_install(packages: &[&str], hint: &str) -> Result<()> {
    run(command("apt-get").arg("update"), hint)?;
    run(
        command("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y"])
            .args(packages),
        hint,
    )
}

/// Runs `cmd` capturing its stdout (stderr is inherited) and returns it, failing like [`run`].
pub fn output(cmd: &mut Command, hint: &str) -> Result<String> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start `{}`: {hint}", describe(cmd)))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {hint}",
            describe(cmd),
            status_text(out.status)
        );
    }
    String::from_utf8(out.stdout)
        .with_context(|| format!("`{}` printed non-UTF-8 output", describe(cmd)))
}

/// The exit code a shell would report for `status` (128 + signal number when killed).
pub fn exit_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    }
}

fn status_text(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_env_program_and_args() {
        let mut cmd = command("cargo");
        cmd.env("LLVM_PREFIX", "/usr/lib/llvm-22")
            .args(["install", "bpf-linker"]);
        assert_eq!(
            describe(&cmd),
            "LLVM_PREFIX=/usr/lib/llvm-22 cargo install bpf-linker"
        );
    }

    #[test]
    fn child_path_contains_cargo_bin() {
        if let Some(bin) = cargo_bin_dir() {
            assert!(env::split_paths(&child_path()).any(|d| d == bin));
        }
    }

    #[test]
    fn run_reports_failing_command() {
        let err = run(&mut command("false"), "do something").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("`false` failed"), "{msg}");
        assert!(msg.contains("do something"), "{msg}");
    }

    #[test]
    fn run_reports_missing_program() {
        let err = run(&mut command("/nonexistent/xtask-test"), "install it").unwrap_err();
        assert!(format!("{err:#}").contains("could not start"), "{err:#}");
    }
}
