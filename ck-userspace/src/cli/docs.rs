//! `ck man DIR`, `ck completions SHELL` and `ck reference DIR` (hidden): the man pages
//! (clap_mangen, and `ck.toml(5)` from the config file's keys), the shell completion scripts
//! (clap_complete) and the Markdown reference ([`ck::reference`]), generated from the binary's
//! own clap definition, so what `cargo xtask dist` packages and `docs/` shows is the command
//! line as it is.
use std::{io::Write as _, path::Path};

use anyhow::Context as _;
use clap_complete::Shell;

/// The version the generated pages show: the package's, without the commit `ck --version`
/// adds (so the committed pages change only when the command line does).
const PAGE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Writes `ck.1`, one page per visible subcommand (`ck-run.1`, `ck-status.1`, ...) of `cmd`
/// and `ck.toml.5` into `dir` (created if missing) and prints each file's path.
pub fn man_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    let unwritable = |e: std::io::Error| {
        anyhow::anyhow!(
            "cannot write the man pages into {} ({e}): give a directory you may write to",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    clap_mangen::generate_to(cmd.version(PAGE_VERSION), dir).map_err(unwritable)?;
    let config =
        ck::reference::config::man_page(&ck::settings::run_args::run_command(), PAGE_VERSION);
    std::fs::write(dir.join("ck.toml.5"), config).map_err(unwritable)?;
    let mut pages: Vec<_> = std::fs::read_dir(dir)
        .map_err(unwritable)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "1" || x == "5"))
        .collect();
    pages.sort();
    let mut out = std::io::stdout().lock();
    for page in pages {
        writeln!(out, "{}", page.display())?;
    }
    Ok(())
}

/// Writes the reference pages of `cmd` ([`ck::reference::pages`]) into `dir` and prints each
/// file's path.
pub fn reference(cmd: clap::Command, dir: &Path) -> anyhow::Result<()> {
    let written = ck::reference::write(&cmd, dir)?;
    let mut out = std::io::stdout().lock();
    for path in written {
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}

/// Prints the completion script of `cmd` (named `ck`) for `shell` on stdout (an error, not a
/// panic, when stdout is closed early, as by `| head`).
pub fn completions(mut cmd: clap::Command, shell: Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut cmd, "ck", &mut script);
    std::io::stdout()
        .lock()
        .write_all(&script)
        .context("writing the completion script")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> clap::Command {
        clap::Command::new("ck")
            .version("1.2.3 (commit abc)")
            .subcommand(clap::Command::new("run").arg(clap::arg!(--workers <N> "How many")))
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn a_page_per_visible_subcommand_and_the_config_file() {
        let dir = std::env::temp_dir().join(format!("ck-man-test-{}", std::process::id()));
        man_pages(command(), &dir).unwrap();
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let run = std::fs::read_to_string(dir.join("ck-run.1")).unwrap();
        let ck = std::fs::read_to_string(dir.join("ck.1")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(names, ["ck-run.1", "ck.1", "ck.toml.5"]);
        assert!(run.contains("workers"), "{run}");
        // No commit in the pages: they change only with the command line.
        assert!(!ck.contains("commit"), "{ck}");
    }
}
