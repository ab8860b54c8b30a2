//! The `ck run --config FILE` file: TOML whose keys are the long options of `ck run` without
//! their dashes (`workers = 4`, `ready-timeout = "30s"`, `adopt = true`, repeatable ones as
//! arrays: `port = [8080, 8081]`) and `app`, the worker command (`app = ["node", "server.js"]`).
//!
//! The keys are read from the clap [`Command`] of `ck run`, so every option is a key and none can
//! drift, and every value is checked by that option's own clap parser: the file and the command
//! line share one set of rules and messages. A key that is not an option, or a value its option
//! refuses, is an error naming the key, its line and what is accepted. [`ConfigFile::args`] turns
//! the file into arguments for the options the command line leaves unset, so a flag given on
//! the command line always wins.
use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command, error::ErrorKind};
use toml::{Spanned, Value};

use crate::settings::usage;

/// Options that are not keys: the file cannot name itself, and help and version are not
/// settings.
const NOT_KEYS: [&str; 3] = ["config", "help", "version"];

/// The key of the worker command (`ck run`'s trailing `APP [ARGS...]`).
pub const APP_KEY: &str = "app";

/// A config file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("cannot read the config file {}: {error}; check the path given to --config", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (part of the message, not a separate cause).
        error: std::io::Error,
    },
    /// The file is not TOML.
    #[error("the config file {} is not valid TOML: {message}", path.display())]
    NotToml {
        /// The file.
        path: PathBuf,
        /// The TOML parser's message (line, column and what it expected).
        message: String,
    },
    /// Keys that are not options of `ck run`, or values their options refuse.
    #[error("{}", render_problems(path, problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every problem found, in the order of the file.
        problems: Vec<Problem>,
    },
}

/// One bad `key = value` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Its line (from 1).
    pub line: usize,
    /// The key as written.
    pub key: String,
    /// What is wrong and what is accepted.
    pub message: String,
}

fn render_problems(path: &Path, problems: &[Problem]) -> String {
    let path = path.display();
    match problems {
        [one] => format!("{path} line {}: {}", one.line, one.message),
        many => {
            let lines: Vec<String> = many
                .iter()
                .map(|p| format!("  line {}: {}", p.line, p.message))
                .collect();
            format!("{path} has {} errors:\n{}", many.len(), lines.join("\n"))
        }
    }
}

/// What a key sets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SettingValue {
    /// An on/off option (`adopt = true`).
    Switch(bool),
    /// An option's values as they would be written after `--key=` (one for most options, one
    /// per occurrence for repeatable ones).
    Values(Vec<String>),
    /// The worker command: program and arguments.
    App(Vec<String>),
}

/// One checked `key = value` line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    /// The key (a long option's name, or [`APP_KEY`]).
    pub key: String,
    /// The option's clap id (for `ArgMatches::value_source`).
    pub id: String,
    /// Its line (from 1).
    pub line: usize,
    /// The line as it reads (`workers = 4`), for messages.
    pub text: String,
    /// What it sets.
    pub value: SettingValue,
}

/// The file's settings as arguments of `ck run` (see [`ConfigFile::args`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileArgs {
    /// `--key=value` and `--switch` arguments.
    pub options: Vec<String>,
    /// The worker command, when the file sets it and the command line does not.
    pub app: Option<Vec<String>>,
}

/// A checked config file.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    path: PathBuf,
    settings: Vec<Setting>,
}

/// The keys a config file for `cmd` accepts: every long option (but `config`, `help` and
/// `version`) and, for the positional argument, its id in kebab-case (`app`).
pub fn keys(cmd: &Command) -> Vec<String> {
    options(cmd).into_iter().map(|(key, _)| key).collect()
}

fn options(cmd: &Command) -> Vec<(String, &Arg)> {
    cmd.get_arguments()
        .filter_map(|arg| match arg.get_long() {
            Some(long) if NOT_KEYS.contains(&long) => None,
            Some(long) => Some((long.to_string(), arg)),
            None if arg.is_positional() => Some((arg.get_id().as_str().replace('_', "-"), arg)),
            None => None,
        })
        .collect()
}

impl ConfigFile {
    /// Reads and checks `path` against the options of `cmd` (`ck run`'s clap command).
    ///
    /// # Errors
    /// When the file cannot be read, is not TOML, or has a key `cmd` does not know or a value
    /// its option refuses (every such line is named).
    pub fn load(path: &Path, cmd: &Command) -> Result<ConfigFile, ConfigFileError> {
        let text = std::fs::read_to_string(path).map_err(|error| ConfigFileError::Read {
            path: path.to_path_buf(),
            error,
        })?;
        ConfigFile::parse(path, &text, cmd)
    }

    /// Checks `text`, the content of `path`, against the options of `cmd`.
    ///
    /// # Errors
    /// As [`ConfigFile::load`], but for reading.
    pub fn parse(path: &Path, text: &str, cmd: &Command) -> Result<ConfigFile, ConfigFileError> {
        type Table = std::collections::BTreeMap<Spanned<String>, Spanned<Value>>;
        let table: Table = toml::from_str(text).map_err(|e| ConfigFileError::NotToml {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let mut entries: Vec<_> = table.into_iter().collect();
        entries.sort_by_key(|(key, _)| key.span().start);
        let line_of = |offset: usize| text[..offset].matches('\n').count() + 1;
        let known = options(cmd);
        let mut settings = Vec::new();
        let mut problems = Vec::new();
        for (key, value) in entries {
            let line = line_of(key.span().start);
            let key = key.into_inner();
            let value = value.into_inner();
            let text = format!("{key} = {value}");
            let checked = match known.iter().find(|(k, _)| *k == key) {
                Some((_, arg)) => check(cmd, &key, arg, &value)
                    .map(|value| (arg.get_id().as_str().to_string(), value))
                    .map_err(|why| format!("`{text}`: {why}")),
                None => Err(unknown_key(&key, &value, cmd)),
            };
            match checked {
                Ok((id, value)) => settings.push(Setting {
                    key,
                    id,
                    line,
                    text,
                    value,
                }),
                Err(message) => problems.push(Problem { line, key, message }),
            }
        }
        if problems.is_empty() {
            Ok(ConfigFile {
                path: path.to_path_buf(),
                settings,
            })
        } else {
            Err(ConfigFileError::Invalid {
                path: path.to_path_buf(),
                problems,
            })
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The settings, in the order of the file.
    pub fn settings(&self) -> &[Setting] {
        &self.settings
    }

    /// The settings as `ck run` arguments, leaving out the options for which `on_command_line`
    /// (given a clap id) is true: the command line wins over the file.
    pub fn args(&self, on_command_line: impl Fn(&str) -> bool) -> FileArgs {
        let mut args = FileArgs::default();
        for setting in self.settings.iter().filter(|s| !on_command_line(&s.id)) {
            match &setting.value {
                SettingValue::Switch(true) => args.options.push(format!("--{}", setting.key)),
                SettingValue::Switch(false) => {}
                SettingValue::Values(values) => args.options.extend(
                    values
                        .iter()
                        .map(|value| format!("--{}={value}", setting.key)),
                ),
                SettingValue::App(app) => args.app = Some(app.clone()),
            }
        }
        args
    }

    /// Which lines of the file an error message of `ck run`'s checks is about: the settings
    /// (not overridden, per `on_command_line`) whose option it names (`--workers 0 is out of
    /// range`), or whose program it names (`cannot run "node"`); e.g. `` `workers = 0` at
    /// ck.toml line 3 ``. `None` when it names none.
    pub fn blame(&self, message: &str, on_command_line: impl Fn(&str) -> bool) -> Option<String> {
        let named: Vec<String> = self
            .settings
            .iter()
            .filter(|s| !on_command_line(&s.id))
            .filter(|s| match &s.value {
                SettingValue::App(app) => message.contains(&format!("{:?}", app[0])),
                _ => names_option(message, &s.key),
            })
            .map(|s| format!("`{}` at {} line {}", s.text, self.path.display(), s.line))
            .collect();
        (!named.is_empty()).then(|| named.join(", "))
    }
}

/// Whether `message` names `--key` (and not a longer option that starts the same way).
fn names_option(message: &str, key: &str) -> bool {
    let flag = format!("--{key}");
    message.match_indices(&flag).any(|(at, _)| {
        message[at + flag.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'))
    })
}

/// The message for a key that is not an option.
fn unknown_key(key: &str, value: &Value, cmd: &Command) -> String {
    if NOT_KEYS.contains(&key) {
        return format!("`{key}` cannot be set in a config file");
    }
    if value.is_table() {
        return format!(
            "unknown section or table `{key}`: the config file has no sections; write \
             `key = value` lines at the top (the keys are ck run's long options, see \
             `ck run --help`)"
        );
    }
    let nearest = usage::similar_option(cmd, key);
    match nearest {
        Some(near) => format!(
            "unknown key `{key}`: did you mean `{near}`? (the keys are ck run's long options \
             without the dashes, and `{APP_KEY}`; see `ck run --help`)"
        ),
        None => format!(
            "unknown key `{key}`: the keys are ck run's long options without the dashes, and \
             `{APP_KEY}`; see `ck run --help`"
        ),
    }
}

/// Checks one value against its option: its shape (switch, one value, a list, the app), then
/// each value with the option's own clap parser.
fn check(cmd: &Command, key: &str, arg: &Arg, value: &Value) -> Result<SettingValue, String> {
    if arg.is_positional() {
        return app_of(value).map(SettingValue::App).ok_or_else(|| {
            format!("expected the program and its arguments as a list of strings, e.g. {key} = [\"node\", \"server.js\"]")
        });
    }
    let values = match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => {
            return value
                .as_bool()
                .map(SettingValue::Switch)
                .ok_or_else(|| "expected true or false".to_string());
        }
        ArgAction::Set => vec![scalar(value, cmd)?],
        ArgAction::Append => match value {
            Value::Array(items) => items
                .iter()
                .map(|item| scalar(item, cmd))
                .collect::<Result<_, _>>()?,
            one => vec![scalar(one, cmd)?],
        },
        _ => return Err("cannot be set in a config file".to_string()),
    };
    let args = values.iter().map(|v| format!("--{key}={v}"));
    match cmd.clone().no_binary_name(true).try_get_matches_from(args) {
        Err(e) if e.kind() != ErrorKind::MissingRequiredArgument => {
            Err(usage::value_reason(&e, Some(arg)))
        }
        _ => Ok(SettingValue::Values(values)),
    }
}

/// A single value as command-line text: strings as they are, numbers in decimal.
fn scalar(value: &Value, cmd: &Command) -> Result<String, String> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Integer(n) => Ok(n.to_string()),
        Value::Float(x) => Ok(x.to_string()),
        Value::Boolean(_) => {
            let switches: Vec<&str> = cmd
                .get_arguments()
                .filter(|a| matches!(a.get_action(), ArgAction::SetTrue))
                .filter_map(Arg::get_long)
                .collect();
            Err(format!(
                "true and false are for on/off options only ({})",
                switches.join(", ")
            ))
        }
        Value::Array(_) => Err("takes one value, not a list".to_string()),
        Value::Table(_) | Value::Datetime(_) => Err("expected a string or a number".to_string()),
    }
}

/// A non-empty list of strings.
fn app_of(value: &Value) -> Option<Vec<String>> {
    let items = value.as_array()?;
    let app: Option<Vec<String>> = items
        .iter()
        .map(|item| item.as_str().map(str::to_string))
        .collect();
    app.filter(|app| !app.is_empty())
}

#[cfg(test)]
mod tests;
