//! The `--config` file parser: any text as the file, checked against a command shaped like
//! `ck run`'s (a number with a range, an enum, a duration, repeatable values, a switch and the
//! trailing app). It must accept or name the problem, never panic; a file it accepts must turn
//! into arguments the command itself accepts, and every problem must name a line of the file.
#![no_main]

use std::path::Path;

use ck::settings::config_file::{ConfigFile, ConfigFileError};
use clap::{Arg, ArgAction, Command, value_parser};
use libfuzzer_sys::fuzz_target;

/// Options with the shapes of `ck run`'s.
fn command() -> Command {
    Command::new("run")
        .arg(
            Arg::new("ports")
                .short('p')
                .long("port")
                .action(ArgAction::Append)
                .value_parser(value_parser!(u16)),
        )
        .arg(
            Arg::new("workers")
                .short('w')
                .long("workers")
                .value_parser(value_parser!(u32).range(1..)),
        )
        .arg(
            Arg::new("policy")
                .long("policy")
                .value_parser(["round-robin", "least-conn", "hash"]),
        )
        .arg(
            Arg::new("ready_timeout")
                .long("ready-timeout")
                .value_parser(ck_worker::units::duration::parse_duration),
        )
        .arg(
            Arg::new("listen")
                .long("listen")
                .action(ArgAction::Append)
                .value_parser(|s: &str| s.parse::<ck::settings::run_config::ListenAddr>()),
        )
        .arg(Arg::new("adopt").long("adopt").action(ArgAction::SetTrue))
        .arg(Arg::new("config").long("config"))
        .arg(
            Arg::new("app")
                .num_args(1..)
                .trailing_var_arg(true)
                .allow_hyphen_values(true),
        )
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let cmd = command();
    match ConfigFile::parse(Path::new("ck.toml"), text, &cmd) {
        Ok(file) => {
            let args = file.args(|_| false);
            let mut argv = vec!["run".to_string()];
            argv.extend(args.options);
            if let Some(app) = args.app {
                argv.push("--".into());
                argv.extend(app);
            }
            if let Err(e) = cmd.clone().try_get_matches_from(&argv) {
                panic!("a checked file gave arguments the command refuses: {argv:?}: {e}");
            }
        }
        Err(ConfigFileError::Invalid { problems, .. }) => {
            let lines = text.lines().count().max(1);
            for problem in problems {
                assert!(
                    (1..=lines).contains(&problem.line),
                    "problem on line {} of a {lines}-line file",
                    problem.line
                );
            }
        }
        Err(_) => {}
    }
});
