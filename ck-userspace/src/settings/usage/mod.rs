//! Usage errors: what a command line (or a line of the config file) got wrong, said in ck's
//! words with the fix. The facts come from clap: its error's context (the option, the value,
//! the accepted values) and its own did-you-mean (clap's `SuggestedArg` and
//! `SuggestedSubcommand`), which the config file's keys get through [`similar_option`] too, so
//! a typo is caught by the same rule wherever it is made. A usage error makes ck exit with
//! [`EXIT_USAGE`], as clap's own errors do.
use std::ffi::OsString;

use clap::{
    Arg, Command,
    error::{ContextKind, ContextValue, ErrorKind},
};

/// The exit status of a command line ck refuses (clap's own for its errors).
pub const EXIT_USAGE: u8 = 2;

/// A command line ck refuses before it does anything; the message names the problem and the
/// fix. `main` exits with [`EXIT_USAGE`] for it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl UsageError {
    /// `error` as a usage error, its message as `ck: error:` prints it (causes included).
    pub fn from_error(error: &anyhow::Error) -> anyhow::Error {
        UsageError(format!("{error:#}")).into()
    }
}

/// Whether `error`, or an error it wraps, is a [`UsageError`].
pub fn is_usage(error: &anyhow::Error) -> bool {
    error.chain().any(|e| e.is::<UsageError>())
}

/// clap's did-you-mean for the long option `--word` among `cmd`'s options: the nearest one's
/// name without its dashes (`wokers` -> `workers`), or None when none is near or `word` is an
/// option already.
pub fn similar_option(cmd: &Command, word: &str) -> Option<String> {
    if word.is_empty() || word.starts_with('-') || word.contains('=') {
        return None;
    }
    // A positional that takes hyphens would take `--word` as its value.
    let err = cmd
        .clone()
        .mut_args(|arg| match arg.is_positional() {
            true => arg.allow_hyphen_values(false),
            false => arg,
        })
        .no_binary_name(true)
        .try_get_matches_from([format!("--{word}")])
        .err()?;
    suggested_option(&err).map(|s| s.trim_start_matches('-').to_string())
}

/// The option clap suggests in `err` (`--workers`).
fn suggested_option(err: &clap::Error) -> Option<String> {
    match err.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(s)) => s.first().cloned(),
        _ => None,
    }
}

/// A string of `err`'s context.
fn context_string(err: &clap::Error, kind: ContextKind) -> Option<String> {
    match err.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::Strings(s)) => Some(s.join(", ")),
        Some(ContextValue::StyledStr(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// Whether `arg`'s value parser gives an integer (a config key that takes a whole number):
/// the one test the errors of values and the generated ck.toml reference use.
pub fn takes_whole_number(arg: &Arg) -> bool {
    whole_number_max(arg).is_some()
}

/// The largest value of `arg`'s integer type, if its parser gives one.
fn whole_number_max(arg: &Arg) -> Option<u64> {
    use std::any::TypeId;
    let parser = arg.get_value_parser().type_id();
    [
        (TypeId::of::<u8>(), u64::from(u8::MAX)),
        (TypeId::of::<u16>(), u64::from(u16::MAX)),
        (TypeId::of::<u32>(), u64::from(u32::MAX)),
        (TypeId::of::<u64>(), u64::MAX),
        (TypeId::of::<usize>(), usize::MAX as u64),
        (TypeId::of::<i64>(), i64::MAX as u64),
    ]
    .into_iter()
    .find_map(|(t, max)| (parser == t).then_some(max))
}

/// What is wrong with the value `err` is about and what `arg` accepts, without clap's framing:
/// the accepted values of an enumerated option (and clap's nearest one), a whole number's
/// range, else the parser's own message (which says what to give).
pub fn value_reason(err: &clap::Error, arg: Option<&Arg>) -> String {
    if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
        let near = context_string(err, ContextKind::SuggestedValue)
            .map_or(String::new(), |near| format!(" (did you mean {near}?)"));
        return format!("expected one of: {}{near}", valid.join(", "));
    }
    let source = std::error::Error::source(err);
    let reason = source.map_or_else(|| first_line(err), |source| source.to_string());
    let Some(max) = arg.and_then(whole_number_max) else {
        return reason;
    };
    // clap's own integer parser: not a number, or outside the option's range (`5 is not in
    // 0..=39`); an option's own parser says what to give itself.
    if source.is_some_and(|s| s.is::<std::num::ParseIntError>()) {
        return format!("expected a whole number from 0 to {max}");
    }
    match reason
        .rsplit_once(" is not in ")
        .and_then(|(_, range)| clap_range(range, max))
    {
        Some((low, high)) => format!("expected a whole number from {low} to {high}"),
        None => reason,
    }
}

/// The lowest and highest value of clap's range text (`0..=39`; `1..N`, with N the end's bound
/// or, for a range without one, the largest i64 or u64), for a type whose largest value is
/// `max`.
fn clap_range(range: &str, max: u64) -> Option<(u64, u64)> {
    let (low, high) = range.split_once("..")?;
    let (inclusive, high) = match high.strip_prefix('=') {
        Some(high) => (true, high),
        None => (false, high),
    };
    let (low, high): (u64, u64) = (low.parse().ok()?, high.parse().ok()?);
    let unbounded = high == u64::MAX || high == i64::MAX as u64;
    let high = match inclusive || unbounded {
        true => high,
        false => high.checked_sub(1)?,
    };
    Some((low, high.min(max)))
}

/// clap's own first line of `err`, without its `error: `.
fn first_line(err: &clap::Error) -> String {
    let rendered = err.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    first.trim_start_matches("error: ").to_string()
}

/// ck's message for clap's `err`, raised while parsing `args` (the arguments after the
/// program's name) against `root` (the `ck` command): what is wrong, named as the user wrote
/// it, and the fix.
pub fn message(err: &clap::Error, root: &Command, args: &[OsString]) -> String {
    let sub = subcommand_of(root, args);
    let cmd = sub.unwrap_or(root);
    let place = match sub {
        Some(sub) => format!("{} {}", root.get_name(), sub.get_name()),
        None => root.get_name().to_string(),
    };
    // The command named later on the line (`ck --name web status`): where an option given
    // before it belongs.
    let later = args
        .iter()
        .filter_map(|a| a.to_str())
        .find_map(|a| root.find_subcommand(a));
    match err.kind() {
        ErrorKind::UnknownArgument => unknown_argument(err, root, cmd, later, &place),
        ErrorKind::InvalidSubcommand => unknown_command(err, root),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => invalid_value(err, cmd, &place),
        ErrorKind::MissingRequiredArgument => {
            let missing = context_string(err, ContextKind::InvalidArg).unwrap_or_default();
            format!("`{place}` needs {missing}{}", usage_of(err))
        }
        ErrorKind::ArgumentConflict => conflict(err, &place),
        _ => format!("{}; see `{place} --help`", first_line(err)),
    }
}

/// The subcommand of `root` that `args` name (the first argument that is not an option), if
/// it is one.
fn subcommand_of<'a>(root: &'a Command, args: &[OsString]) -> Option<&'a Command> {
    let word = args
        .iter()
        .filter_map(|a| a.to_str())
        .find(|a| !a.starts_with('-'))?;
    root.find_subcommand(word)
}

/// `; usage: ck scale [OPTIONS] <WORKERS>`, from clap's usage in `err` (empty without one).
fn usage_of(err: &clap::Error) -> String {
    context_string(err, ContextKind::Usage).map_or(String::new(), |usage| {
        let usage = usage.trim().trim_start_matches("Usage: ");
        format!("; usage: {usage}")
    })
}

/// An option `cmd` does not have: clap's did-you-mean, or the command it belongs to (an option
/// given before its command, `later` if it has it, or to the wrong command), and the fix.
fn unknown_argument(
    err: &clap::Error,
    root: &Command,
    cmd: &Command,
    later: Option<&Command>,
    place: &str,
) -> String {
    let Some(given) = context_string(err, ContextKind::InvalidArg) else {
        return format!("{}; see `{place} --help`", first_line(err));
    };
    if !given.starts_with('-') || given == "-" {
        return stray_argument(err, &given, cmd, place);
    }
    let flag = given.split('=').next().unwrap_or(&given).to_string();
    let is_run = cmd.get_name() == "run";
    let near = suggested_option(err).or_else(|| other_case_short(cmd, &flag));
    let mut owners = owners_of(root, &flag);
    if let Some(later) = later.filter(|l| owners.iter().any(|o| o == l.get_name())) {
        owners = vec![later.get_name().to_string()];
    }
    let mut text = format!("unknown option {flag} for `{place}`");
    let at_root = std::ptr::eq(cmd, root);
    match (&near, owners.as_slice()) {
        (Some(near), _) => text.push_str(&format!(" (did you mean {near}?)")),
        (None, []) => {}
        // Given before the command it belongs to.
        (None, [one]) if at_root => text.push_str(&format!(
            ": it is an option of `ck {one}`, given after it: ck {one} {flag} ..."
        )),
        (None, many) if at_root => text.push_str(&format!(
            ": it is an option of the commands {}, given after the command: e.g. ck {} {flag} \
             ...",
            many.join(", "),
            many[0]
        )),
        // Given to another command than its own.
        (None, owners) => {
            let owners: Vec<String> = owners.iter().map(|o| format!("`ck {o}`")).collect();
            text.push_str(&format!(": it is an option of {}", owners.join(" and ")));
        }
    }
    if is_run {
        text.push_str(
            "; an app's own options go after `--` or after the app's path: ck run [OPTIONS] \
             -- APP [ARGS]...",
        );
    } else if near.is_none() && (!at_root || owners.is_empty()) {
        text.push_str(&format!("; see `{place} --help` for its options"));
    }
    text
}

/// A word a command takes no place for (`ck status web`): what it takes, and `--name WORD`
/// when the command has `--name` and no arguments of its own.
fn stray_argument(err: &clap::Error, word: &str, cmd: &Command, place: &str) -> String {
    let takes_name = cmd.get_arguments().any(|a| a.get_long() == Some("name"));
    let has_positionals = cmd.get_positionals().next().is_some();
    match (takes_name, has_positionals) {
        (true, false) => format!(
            "unexpected argument {word:?} for `{place}`, which takes none (did you mean --name \
             {word}?)"
        ),
        _ => format!(
            "unexpected argument {word:?} for `{place}`{}",
            usage_of(err)
        ),
    }
}

/// The short option of `cmd` that `flag` (`-W`) is in the other case (`-w`), with its long name.
fn other_case_short(cmd: &Command, flag: &str) -> Option<String> {
    let mut chars = flag.strip_prefix('-')?.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    let swapped = match c {
        c if c.is_ascii_uppercase() => c.to_ascii_lowercase(),
        c => c.to_ascii_uppercase(),
    };
    let arg = cmd
        .get_arguments()
        .find(|a| a.get_short() == Some(swapped))?;
    Some(match arg.get_long() {
        Some(long) => format!("-{swapped} (--{long})"),
        None => format!("-{swapped}"),
    })
}

/// The visible commands of `root` that have the option `flag` (`--workers`, `-w`).
fn owners_of(root: &Command, flag: &str) -> Vec<String> {
    let has = |cmd: &Command| match flag.strip_prefix("--") {
        Some(long) => cmd.get_arguments().any(|a| a.get_long() == Some(long)),
        None => {
            let short = flag.strip_prefix('-').and_then(|s| s.chars().next());
            cmd.get_arguments()
                .any(|a| a.get_short().is_some() && a.get_short() == short)
        }
    };
    root.get_subcommands()
        .filter(|s| !s.is_hide_set() && has(s))
        .map(|s| s.get_name().to_string())
        .collect()
}

/// A command `root` does not have: clap's did-you-mean, the commands there are, and `ck run --
/// WORD` for a program named where a command goes.
fn unknown_command(err: &clap::Error, root: &Command) -> String {
    let word = context_string(err, ContextKind::InvalidSubcommand).unwrap_or_default();
    let commands: Vec<&str> = root
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(Command::get_name)
        .collect();
    match context_string(err, ContextKind::SuggestedSubcommand) {
        Some(near) => format!("unknown command {word:?} (did you mean {near}?)"),
        None => format!(
            "unknown command {word:?}: the commands are {}; to run a program under ck: ck run \
             -- {word} ...",
            commands.join(", ")
        ),
    }
}

/// A value its option refuses (or a missing one): the option, the value and what it takes.
fn invalid_value(err: &clap::Error, cmd: &Command, place: &str) -> String {
    let shown = context_string(err, ContextKind::InvalidArg).unwrap_or_default();
    // `--workers <N>`, or a positional's `<WORKERS>`.
    let (name, value_name) = match shown.split_once(' ') {
        Some((name, value)) => (name.to_string(), value.to_string()),
        None => (format!("`{place}` {shown}"), shown.clone()),
    };
    let bare = shown.trim_matches(|c| c == '<' || c == '>');
    let arg = cmd.get_arguments().find(|a| match name.strip_prefix("--") {
        Some(long) => a.get_long() == Some(long),
        None => {
            a.is_positional()
                && (a.get_id().as_str().eq_ignore_ascii_case(bare)
                    || a.get_value_names()
                        .is_some_and(|v| v.iter().any(|v| v.as_str() == bare)))
        }
    });
    let value = context_string(err, ContextKind::InvalidValue).unwrap_or_default();
    if value.is_empty() && err.kind() == ErrorKind::InvalidValue {
        let value_name = value_name.trim_matches(|c| c == '<' || c == '>');
        return format!("{name} needs a value: {name} {value_name}");
    }
    format!("{name} {value:?}: {}", value_reason(err, arg))
}

/// Two options that do not go together, or one given twice.
fn conflict(err: &clap::Error, place: &str) -> String {
    let name = |s: String| s.split(' ').next().unwrap_or_default().to_string();
    let given = context_string(err, ContextKind::InvalidArg).map(name);
    let prior = context_string(err, ContextKind::PriorArg).map(name);
    match (given, prior) {
        (Some(given), Some(prior)) if given == prior => {
            format!("{given} is given twice for `{place}`: give it once")
        }
        (Some(given), Some(prior)) => {
            format!("{given} cannot be given with {prior} for `{place}`: give one of them")
        }
        _ => format!("{}; see `{place} --help`", first_line(err)),
    }
}

#[cfg(test)]
mod tests;
