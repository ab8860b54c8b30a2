//! `cli.md`: the `--help` of `ck` and of every visible command, verbatim, as clap renders it
//! (the options' long help, defaults and possible values, `ck run`'s groups and examples).
use std::fmt::Write as _;

use super::text::GENERATED;

/// The page for the command `cli` (`ck`).
pub fn markdown(cli: &clap::Command) -> String {
    let mut cli = cli.clone();
    cli.build();
    let mut out = format!(
        "{GENERATED}\n\n# Command line\n\nEvery command's `--help`, as this version of ck prints \
         it. `ck COMMAND -h` prints one line per option; `man ck-COMMAND` shows the same as \
         `--help`.\n"
    );
    section(&mut out, "ck", &mut cli.clone());
    for sub in cli
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("ck {}", sub.get_name());
        section(&mut out, &name, &mut sub.clone());
    }
    out
}

/// `## NAME` and its long help in a text block.
fn section(out: &mut String, name: &str, cmd: &mut clap::Command) {
    let help = cmd.render_long_help().to_string();
    let help: Vec<&str> = help.lines().map(str::trim_end).collect();
    let _ = write!(
        out,
        "\n## {name}\n\n```text\n$ {name} --help\n{}\n```\n",
        help.join("\n").trim_end()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_command_has_its_help() {
        let cli = clap::Command::new("ck")
            .subcommand(
                clap::Command::new("run")
                    .about("Run")
                    .arg(clap::arg!(--workers <N> "How many")),
            )
            .subcommand(clap::Command::new("secret").hide(true));
        let page = markdown(&cli);
        assert!(page.contains("## ck run\n"), "{page}");
        assert!(page.contains("Usage: ck run [OPTIONS]"), "{page}");
        assert!(page.contains("--workers <N>"), "{page}");
        assert!(!page.contains("secret"), "{page}");
    }
}
