//! `config.md` and `ck.toml(5)`: the keys of `ck run --config FILE`, read from `ck run`'s clap
//! definition as the config file's parser reads them ([`config_file::keys`]): every long option
//! is a key, with the option's type, default and help, so the page cannot drift from the parser.
use std::{fmt::Write as _, time::Duration};

use clap::{Arg, ArgAction, Command};

use super::text::{GENERATED, cell};
use crate::settings::{config_file, run_args::HEADINGS};

/// A short, valid example file (checked by a test with the real parser).
pub const EXAMPLE: &str = r#"# /etc/ck/ck.toml: `ck run --config /etc/ck/ck.toml`
port = [8080]
workers = 4
adopt = true
stop-signal = "QUIT"
drain-timeout = "30s"
metrics = "127.0.0.1:9100"
app = ["node", "server.js"]
"#;

/// One key of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    /// The key (`ready-timeout`).
    pub name: String,
    /// The matching option of `ck run` (`--ready-timeout`, `-w, --workers`, `APP...`).
    pub option: String,
    /// Its TOML type, in words.
    pub kind: String,
    /// Its default, if it has one.
    pub default: Option<String>,
    /// One line (the short help).
    pub summary: String,
    /// The whole help.
    pub meaning: String,
    /// The group of `ck run --help` it is in (None: the first, ungrouped options).
    pub heading: Option<String>,
}

/// Every key of a config file for `run` (`ck run`'s clap command), in the order of `--help`.
pub fn keys(run: &Command) -> Vec<Key> {
    config_file::keys(run)
        .into_iter()
        .filter_map(|name| {
            let arg = run.get_arguments().find(|a| match a.get_long() {
                Some(long) => long == name,
                None => a.is_positional() && name == config_file::APP_KEY,
            })?;
            Some(key(name, arg))
        })
        .collect()
}

fn key(name: String, arg: &Arg) -> Key {
    let summary = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
    let meaning = arg
        .get_long_help()
        .map(|h| h.to_string())
        .unwrap_or_else(|| summary.clone());
    let option = match (arg.get_short(), arg.get_long()) {
        (Some(s), Some(l)) => format!("-{s}, --{l}"),
        (None, Some(l)) => format!("--{l}"),
        _ => format!(
            "{}... (after --)",
            arg.get_value_names()
                .and_then(|n| n.first())
                .map_or("APP".to_string(), |n| n.to_string())
        ),
    };
    let default = match arg.get_action() {
        ArgAction::SetTrue => Some("false".to_string()),
        _ => arg
            .get_default_values()
            .first()
            .map(|d| d.to_string_lossy().into_owned()),
    };
    Key {
        name,
        option,
        kind: toml_type(arg),
        default,
        summary,
        meaning,
        heading: arg.get_help_heading().map(str::to_string),
    }
}

/// The TOML type of `arg`'s value, in words.
fn toml_type(arg: &Arg) -> String {
    if arg.is_positional() {
        return "array of strings (program, then its arguments)".into();
    }
    if matches!(arg.get_action(), ArgAction::SetTrue) {
        return "boolean".into();
    }
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let one = if !values.is_empty() {
        format!("string: {}", values.join(", "))
    } else {
        let parser = arg.get_value_parser().type_id();
        let name = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.to_string());
        let integer = crate::settings::usage::takes_whole_number(arg);
        match name.as_deref() {
            Some("SIZE") => "string: a size (`512M`, `2G`) or bytes".into(),
            _ if parser == std::any::TypeId::of::<Duration>() => {
                "string: a duration (`500ms`, `30s`, `2m`; a bare number is seconds)".into()
            }
            _ if integer => "integer".into(),
            _ => "string".into(),
        }
    };
    match arg.get_action() {
        ArgAction::Append => format!("array of {one} (or one value)"),
        _ => one,
    }
}

/// The keys of `run` by group: the ungrouped ones first, then [`HEADINGS`] in order.
fn grouped(run: &Command) -> Vec<(String, Vec<Key>)> {
    let keys = keys(run);
    let mut groups = vec![("General".to_string(), Vec::new())];
    groups.extend(HEADINGS.iter().map(|h| (h.to_string(), Vec::new())));
    for key in keys {
        let at = match &key.heading {
            None => 0,
            Some(h) => groups.iter().position(|(g, _)| g == h).unwrap_or(0),
        };
        groups[at].1.push(key);
    }
    groups.retain(|(_, keys)| !keys.is_empty());
    groups
}

/// `config.md`.
pub fn markdown(run: &Command) -> String {
    let mut out = format!(
        "{GENERATED}\n\n# Config file (ck.toml)\n\n`ck run --config FILE` reads a TOML file whose \
         keys are `ck run`'s long options without the dashes, plus `app` (the worker command). \
         Options given on the command line win over the file; `ck reload` reads the file again. \
         A key that is not an option, or a value its option refuses, is an error naming the key \
         and its line. The file has no sections.\n\n```toml\n{EXAMPLE}```\n"
    );
    for (group, keys) in grouped(run) {
        let _ = write!(
            out,
            "\n## {group}\n\n| Key | Type | Default | Option | Meaning |\n| --- | --- | --- | --- | \
             --- |\n"
        );
        for k in &keys {
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | `{}` | {} |",
                k.name,
                cell(&k.kind),
                k.default
                    .as_ref()
                    .map_or("(none)".to_string(), |d| format!("`{d}`")),
                k.option,
                cell(&k.meaning)
            );
        }
    }
    out
}

/// `ck.toml(5)` in roff; `version` goes in its title line.
pub fn man_page(run: &Command, version: &str) -> String {
    use roff::{Roff, bold, italic, roman};
    let mut page = Roff::new();
    let title = format!("ck {version}");
    page.control("TH", ["ck.toml", "5", "", title.as_str()])
        .control("SH", ["NAME"])
        .text([roman("ck.toml - the config file of ck run")])
        .control("SH", ["SYNOPSIS"])
        .text([
            bold("ck run --config "),
            italic("FILE"),
            roman(" [OPTIONS] [-- APP...]"),
        ])
        .control("SH", ["DESCRIPTION"])
        .text([roman(
            "A TOML file whose keys are the long options of ck run without the dashes \
             (workers = 4, ready-timeout = \"30s\", adopt = true, repeatable options as \
             arrays: port = [8080, 8081]) and app, the worker command (app = [\"node\", \
             \"server.js\"]). Options given on the command line win over the file; ck reload \
             (or SIGHUP) reads it again. A key that is not an option, or a value its option \
             refuses, is an error naming the key and its line. The file has no sections.",
        )]);
    for (group, keys) in grouped(run) {
        page.control("SH", [group.to_uppercase().as_str()]);
        for k in keys {
            let mut head = vec![bold(k.name.as_str()), roman(": "), roman(k.kind.as_str())];
            let default = k.default.map(|d| format!("; default {d}"));
            if let Some(d) = &default {
                head.push(roman(d.as_str()));
            }
            page.control("TP", []).text(head);
            let option = format!("The option {}. ", k.option);
            page.text([roman(option.as_str()), roman(k.meaning.replace('\n', " "))]);
        }
    }
    page.control("SH", ["EXAMPLE"])
        .control("EX", [])
        .text([roman(EXAMPLE)])
        .control("EE", [])
        .control("SH", ["SEE ALSO"])
        .text([bold("ck-run"), roman("(1), "), bold("ck"), roman("(1)")]);
    page.render()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::settings::{config_file::ConfigFile, run_args::run_command};

    #[test]
    fn every_key_is_documented_with_its_option() {
        let run = run_command();
        let page = markdown(&run);
        for name in config_file::keys(&run) {
            assert!(page.contains(&format!("| `{name}` |")), "{name} missing");
        }
        assert!(
            page.contains("| `workers` | integer | (none) | `-w, --workers` |"),
            "{page}"
        );
        assert!(
            page.contains("| `adopt` | boolean | `false` | `--adopt` |"),
            "{page}"
        );
        assert!(
            page.contains("| `ready-timeout` | string: a duration"),
            "{page}"
        );
        assert!(page.contains("| `port` | array of integer"), "{page}");
        let man = man_page(&run, "1.2.3");
        assert!(man.contains(".TH ck.toml 5"), "{man}");
        assert!(man.contains("drain\\-timeout"), "{man}");
    }

    #[test]
    fn the_example_is_a_valid_file() {
        let file = ConfigFile::parse(Path::new("ck.toml"), EXAMPLE, &run_command())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(file.settings().len(), 7);
    }
}
