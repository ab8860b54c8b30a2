//! `ck run --config FILE`: the file's settings under the command line. Which options the
//! command line gave comes from clap (`ArgMatches::value_source`); the file supplies the others
//! as arguments that the same clap command ([`run_command`]) parses, so a flag on the command
//! line always wins and every value meets the same checks. Done again at every reload
//! (`ck reload`, SIGHUP): the supervisor keeps the [`RunCommandLine`] and calls
//! [`RunCommandLine::load`].
use std::{
    collections::BTreeSet,
    ffi::OsString,
    path::{Path, PathBuf},
};

use anyhow::{anyhow, bail};
use clap::{ArgMatches, FromArgMatches as _, parser::ValueSource};

use crate::settings::{
    config_file::ConfigFile,
    run_args::{RunArgs, run_command},
    run_config::RunConfig,
    usage,
};

/// The configuration `ck run` starts with, and with `--config`, the command line to lay over
/// the file again at a reload. `matches` are the parsed arguments of `run`, `args` the same
/// as [`RunArgs`].
///
/// # Errors
/// When the options (with the file's) do not make a valid configuration, or the file cannot
/// be read or checked.
pub fn configure(
    args: RunArgs,
    matches: &ArgMatches,
) -> anyhow::Result<(RunConfig, Option<RunCommandLine>)> {
    let Some(file) = args.config.clone() else {
        return Ok((args.into_config()?, None));
    };
    let command_line = RunCommandLine::of_this_process(matches, file)?;
    let cfg = command_line.load()?;
    Ok((cfg, Some(command_line)))
}

/// `ck run`'s command line, kept to be laid over the config file again at each reload.
pub struct RunCommandLine {
    /// The arguments after `run`.
    args: Vec<OsString>,
    /// Clap ids of the options the command line gave.
    given: BTreeSet<String>,
    /// `--config FILE`.
    file: PathBuf,
}

impl RunCommandLine {
    /// This process's `ck run` command line (`matches`: its parsed arguments), over `file`.
    fn of_this_process(matches: &ArgMatches, file: PathBuf) -> anyhow::Result<RunCommandLine> {
        // `ck` has no options of its own, so `run` is the first argument.
        let mut argv = std::env::args_os().skip(1);
        if argv.next().is_none_or(|first| first != "run") {
            bail!("--config is an option of `ck run`: ck run --config FILE");
        }
        Ok(RunCommandLine::new(argv.collect(), matches, file))
    }

    /// The command line `args` (after `run`), parsed as `matches`, over `file`.
    pub fn new(args: Vec<OsString>, matches: &ArgMatches, file: PathBuf) -> RunCommandLine {
        let given = matches
            .ids()
            .map(|id| id.as_str())
            .filter(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
            .map(str::to_string)
            .collect();
        RunCommandLine { args, given, file }
    }

    /// The config file (`--config FILE`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// Reads the config file and lays the command line over it: the configuration to run.
    ///
    /// # Errors
    /// When the file cannot be read or checked, or the options together do not make a valid
    /// configuration (the message then names the file's lines it is about).
    pub fn load(&self) -> anyhow::Result<RunConfig> {
        let cmd = run_command();
        let file = ConfigFile::load(&self.file, &cmd)?;
        let given = |id: &str| self.given.contains(id);
        let from_file = file.args(given);
        let mut argv: Vec<OsString> = vec!["run".into()];
        argv.extend(from_file.options.into_iter().map(OsString::from));
        argv.extend(self.args.iter().cloned());
        if let Some(app) = from_file.app {
            // The command line gave no app, at most a bare `--`.
            if argv.last().is_some_and(|last| last == "--") {
                argv.pop();
            }
            argv.push("--".into());
            argv.extend(app.into_iter().map(OsString::from));
        }
        let matches = cmd.clone().try_get_matches_from(&argv).map_err(|e| {
            let ck = clap::Command::new("ck").subcommand(cmd);
            anyhow!("{}", usage::message(&e, &ck, &argv))
        })?;
        let run = RunArgs::from_arg_matches(&matches)?;
        run.into_config().map_err(|e| {
            let message = format!("{e:#}");
            match file.blame(&message, given) {
                Some(lines) => anyhow!("{message}; set by {lines}"),
                None => e,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::settings::{config_file, defaults, run_config::Policy};

    use super::*;

    /// A config file in a directory of its own, removed on drop.
    struct File {
        dir: PathBuf,
        path: PathBuf,
    }

    impl File {
        fn new(what: &str, text: &str) -> File {
            let dir = std::env::temp_dir().join(format!("ck-cfg-{what}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("ck.toml");
            std::fs::write(&path, text).unwrap();
            File { dir, path }
        }
    }

    impl Drop for File {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    /// `ck run ARGS` over `file`.
    fn load(file: &File, args: &[&str]) -> anyhow::Result<RunConfig> {
        let mut argv = vec!["run", "--config", file.path.to_str().unwrap()];
        argv.extend_from_slice(args);
        let matches = run_command().try_get_matches_from(&argv).unwrap();
        let args = argv[1..].iter().map(OsString::from).collect();
        RunCommandLine::new(args, &matches, file.path.clone()).load()
    }

    /// A value for every option that `ck run` accepts, as a TOML value.
    fn sample(key: &str, arg: &clap::Arg) -> String {
        match (key, arg.get_action()) {
            (_, clap::ArgAction::SetTrue) => "false".into(),
            ("app", _) => "[\"sh\", \"-c\", \"sleep 1\"]".into(),
            ("port", _) => "[8080, 8081]".into(),
            ("listen", _) => "[\"tcp://[::]:8080\"]".into(),
            _ => match arg.get_default_values().first() {
                Some(default) => format!("{:?}", default.to_str().unwrap()),
                None => match arg.get_value_names().and_then(|n| n.first()) {
                    Some(name) if name == "DUR" => "\"2s\"".into(),
                    Some(name) if name == "SIZE" => "\"64M\"".into(),
                    Some(name) if name == "KIND" => "\"http:/healthz\"".into(),
                    _ => "7".into(),
                },
            },
        }
    }

    #[test]
    fn every_long_option_is_a_key() {
        let cmd = run_command();
        let keys = config_file::keys(&cmd);
        let longs: Vec<&str> = cmd
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|long| *long != "config")
            .collect();
        assert!(longs.len() >= 30, "{longs:?}");
        for long in &longs {
            assert!(keys.iter().any(|k| k == long), "{long} is not a key");
        }
        assert!(keys.iter().any(|k| k == "app"));
        // One file setting every key at once is accepted and makes a valid configuration.
        let text: String = cmd
            .get_arguments()
            .filter_map(|arg| {
                let key = arg
                    .get_long()
                    .map(str::to_string)
                    .or_else(|| arg.is_positional().then(|| "app".into()))?;
                (key != "config").then(|| format!("{key} = {}\n", sample(&key, arg)))
            })
            .collect();
        let file = File::new("every", &text);
        let cfg = load(&file, &[]).unwrap_or_else(|e| panic!("{e:#}\n{text}"));
        assert_eq!(cfg.listen.len(), 3, "{text}");
        assert_eq!(cfg.workers, 7);
        assert_eq!(cfg.health.probe_interval, defaults::PROBE_INTERVAL);
        assert_eq!(cfg.app.args, ["-c", "sleep 1"]);
    }

    #[test]
    fn the_guides_example_is_a_valid_file() {
        let page = include_str!("../../../docs/src/configuration.md");
        let (_, rest) = page.split_once("```toml").expect("a TOML example");
        let (_info, rest) = rest.split_once('\n').expect("the fence's line");
        let (example, _) = rest.split_once("```").expect("its end");
        let file = ConfigFile::parse(Path::new("ck.toml"), example, &run_command())
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = example
            .lines()
            .filter(|l| l.contains(" = ") && !l.trim_start().starts_with('#'))
            .count();
        assert!(keys >= 8, "the example shows only {keys} keys");
        assert_eq!(
            file.settings().len(),
            keys,
            "every key of the example is a setting"
        );
    }

    #[test]
    fn the_fuzz_seeds_are_checked_against_the_real_command() {
        let seed = |name: &str, text: &str| {
            ConfigFile::parse(Path::new(name), text, &run_command()).map(|f| f.settings().len())
        };
        let full = include_str!("../../../fuzz/seeds/config_file/full.toml");
        assert_eq!(seed("full.toml", full).unwrap_or_else(|e| panic!("{e}")), 6);
        let bad = include_str!("../../../fuzz/seeds/config_file/bad.toml");
        let listen = include_str!("../../../fuzz/seeds/config_file/listen.toml");
        for (name, text, lines) in [("bad.toml", bad, 3), ("listen.toml", listen, 2)] {
            match seed(name, text) {
                Err(config_file::ConfigFileError::Invalid { problems, .. }) => {
                    assert_eq!(problems.len(), lines, "{name}: {problems:?}")
                }
                other => panic!("{name} was not refused for its lines: {other:?}"),
            }
        }
    }

    #[test]
    fn flags_win_over_the_file() {
        let file = File::new(
            "wins",
            "workers = 3\npolicy = \"hash\"\nport = [9000]\napp = [\"sh\", \"-c\", \"x\"]\n",
        );
        let cfg = load(&file, &[]).unwrap();
        assert_eq!((cfg.workers, cfg.policy), (3, Policy::Hash));
        assert_eq!(cfg.listen[0].addr.port(), 9000);
        assert_eq!(cfg.app.args, ["-c", "x"]);
        let cfg = load(&file, &["-w", "2", "--port", "9001", "--", "sh", "-c", "y"]).unwrap();
        assert_eq!((cfg.workers, cfg.policy), (2, Policy::Hash));
        let ports: Vec<u16> = cfg.listen.iter().map(|l| l.addr.port()).collect();
        assert_eq!(ports, [9001]);
        assert_eq!(cfg.app.args, ["-c", "y"]);
        // A bare `--` with no app leaves the file's.
        let cfg = load(&file, &["--"]).unwrap();
        assert_eq!(cfg.app.args, ["-c", "x"]);
        // A flag with its default value written out still wins.
        let cfg = load(&file, &["--policy", "round-robin"]).unwrap();
        assert_eq!(cfg.policy, Policy::RoundRobin);
    }

    #[test]
    fn checks_across_options_name_the_file_line() {
        let file = File::new("blame", "port = 9000\nworkers = 0\n");
        let err = format!("{:#}", load(&file, &[]).unwrap_err());
        assert!(err.contains("--workers 0 is out of range"), "{err}");
        assert!(err.contains("set by `workers = 0` at "), "{err}");
        assert!(err.ends_with("ck.toml line 2"), "{err}");
        // Overridden on the command line: fine.
        assert_eq!(load(&file, &["-w", "1"]).unwrap().workers, 1);
        let file = File::new("blame-app", "app = [\"/nonexistent/app\"]\n");
        let err = format!("{:#}", load(&file, &[]).unwrap_err());
        assert!(err.contains("no such file"), "{err}");
        assert!(err.contains("ck.toml line 1"), "{err}");
    }
}
