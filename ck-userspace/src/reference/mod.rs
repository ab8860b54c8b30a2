//! The reference pages, generated from the code so that nothing is typed twice: every
//! command's `--help` ([`cli`]), the config file's keys from `ck run`'s options ([`config`], also
//! `ck.toml(5)`), the metric families `/metrics` serves ([`metrics`]), JSON Schemas of `ck status
//! --json` and `ck maps --json` from their serde types ([`json`]), and the environment variables
//! ck reads or sets for its workers ([`environment`], one table the code's names are checked
//! against). `ck reference DIR` writes them; `cargo xtask docs` runs it into
//! `docs/src/reference/` and a test fails when the committed pages differ.
pub mod cli;
pub mod config;
pub mod environment;
pub mod json;
pub mod metrics;
mod text;

use std::path::{Path, PathBuf};

/// One generated file: its name in the reference directory and its content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// File name (`cli.md`, `status.schema.json`, ...).
    pub name: &'static str,
    /// Its content.
    pub text: String,
}

/// Every page of the reference, in a fixed order; `cli` is the `ck` command (with its
/// subcommands) whose help `cli.md` shows.
pub fn pages(cli: &clap::Command) -> anyhow::Result<Vec<Page>> {
    let run = crate::settings::run_args::run_command();
    Ok(vec![
        Page {
            name: "cli.md",
            text: cli::markdown(cli),
        },
        Page {
            name: "config.md",
            text: config::markdown(&run),
        },
        Page {
            name: "metrics.md",
            text: metrics::markdown(),
        },
        Page {
            name: "environment.md",
            text: environment::markdown(),
        },
        Page {
            name: "status-json.md",
            text: json::STATUS.markdown()?,
        },
        Page {
            name: "status.schema.json",
            text: json::STATUS.schema_text()?,
        },
        Page {
            name: "maps-json.md",
            text: json::MAPS.markdown()?,
        },
        Page {
            name: "maps.schema.json",
            text: json::MAPS.schema_text()?,
        },
    ])
}

/// Writes every page of [`pages`] into `dir` (created if missing); returns their paths.
pub fn write(cli: &clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let unwritable = |e: std::io::Error| {
        anyhow::anyhow!(
            "cannot write the reference into {} ({e}): give a directory you may write to",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(unwritable)?;
    pages(cli)?
        .into_iter()
        .map(|page| {
            let path = dir.join(page.name);
            std::fs::write(&path, page.text).map_err(unwritable)?;
            Ok(path)
        })
        .collect()
}
