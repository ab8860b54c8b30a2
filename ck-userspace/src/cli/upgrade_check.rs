//! `ck upgrade-check`: whether this binary accepts the running instance's command line (the
//! new image parses it again after the exec).
use std::ffi::OsString;

use anyhow::bail;
use ck::settings::{layers, usage};
use clap::{CommandFactory as _, FromArgMatches as _};

/// `upgrade-check -- ARGS`: whether this binary accepts the running ck's command line (the new
/// image parses it again after the exec, and could not start the fleet otherwise).
pub fn check_run_args(args: Vec<OsString>) -> anyhow::Result<()> {
    let argv: Vec<OsString> = std::iter::once(OsString::from("ck")).chain(args).collect();
    let matches = crate::Cli::command()
        .try_get_matches_from(&argv)
        .map_err(|e| {
            let message = usage::message(&e, &crate::Cli::command(), &argv[1..]);
            anyhow::anyhow!("the instance's command line: {message}")
        })?;
    let crate::Command::Run(run_args) = crate::Cli::from_arg_matches(&matches)?.command else {
        bail!("the instance's command line is not `ck run ...`");
    };
    let run_matches = matches.subcommand_matches("run").expect("`run` was parsed");
    layers::configure(*run_args, run_matches)
        .map(drop)
        .map_err(|e| e.context("the instance's command line"))
}
