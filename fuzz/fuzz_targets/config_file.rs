//! The `--config` file parser: any text as the file, checked against `ck run`'s own command
//! ([`run_command`]: every option, its parser and its range, the switches and the trailing app).
//! It must accept or name the problem, never panic; a file it accepts must turn into arguments
//! the command itself accepts, and every problem must name a line of the file.
#![no_main]

use std::path::Path;

use ck::settings::{
    config_file::{ConfigFile, ConfigFileError},
    run_args::run_command,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let cmd = run_command();
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
