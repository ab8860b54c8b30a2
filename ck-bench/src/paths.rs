//! Where things are: the workspace root, cargo's target directory, and commands described and
//! run with an error that names them and says what to do.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, anyhow, bail};

/// The workspace root: the parent of this crate's directory.
pub fn workspace_root() -> Result<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| anyhow!("ck-bench's manifest dir has no parent"))
}

/// The cargo target directory: `$CARGO_TARGET_DIR` (made absolute) or `<workspace>/target`.
pub fn target_dir() -> Result<PathBuf> {
    match env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                Ok(dir)
            } else {
                Ok(env::current_dir()
                    .context("reading the current directory")?
                    .join(dir))
            }
        }
        None => Ok(workspace_root()?.join("target")),
    }
}

/// A shell-like rendering of `cmd` for messages, including the environment it sets (other
/// than `PATH`), e.g. `CORK=1 ck run ...`.
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

/// Whether `name` is a program on `PATH`.
pub fn has_program(name: &str) -> bool {
    which::which(name).is_ok()
}

/// Runs `cmd` with inherited stdio and fails, naming the command and adding `hint` (what the
/// user should do), if it cannot be started or exits unsuccessfully.
pub fn run(cmd: &mut Command, hint: &str) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("could not start `{}`: {hint}", describe(cmd)))?;
    if !status.success() {
        bail!("`{}` failed ({status}): {hint}", describe(cmd));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_workspace() {
        assert!(
            workspace_root()
                .unwrap()
                .join("ck-bench/Cargo.toml")
                .is_file()
        );
    }

    #[test]
    fn commands_are_described_with_their_environment() {
        let mut cmd = Command::new("ck");
        cmd.env("CORK", "1").args(["run", "-w", "4"]);
        assert_eq!(describe(&cmd), "CORK=1 ck run -w 4");
    }
}
