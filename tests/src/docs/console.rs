//! ```` ```console ```` blocks: `$ cmd` lines with the output shown after each, and the masked
//! comparison of that output with what the command printed (every run of digits is `0`, every
//! run of blanks one space, trailing blanks dropped; a line holding only `...` matches any
//! number of lines).

/// One `$ ` command of a console block and the output the page shows for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleCommand {
    /// Offset of its `$ ` line within the block (0 for the block's first line).
    pub offset: usize,
    /// The command (continuation lines ending in `\` joined with newlines).
    pub command: String,
    /// The lines shown after it, up to the next `$ ` line.
    pub expected: Vec<String>,
}

/// Splits a console block into its commands.
///
/// # Errors
/// When text comes before the first `$ ` line, or the block has no command.
pub fn commands(block: &str) -> Result<Vec<ConsoleCommand>, String> {
    let mut out: Vec<ConsoleCommand> = Vec::new();
    let mut continued = false;
    for (offset, line) in block.lines().enumerate() {
        if continued {
            let current = out.last_mut().expect("a continued command exists");
            current.command.push('\n');
            current.command.push_str(line);
            continued = line.ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            out.push(ConsoleCommand {
                offset,
                command: command.to_string(),
                expected: Vec::new(),
            });
            continued = command.ends_with('\\');
        } else if let Some(current) = out.last_mut() {
            current.expected.push(line.to_string());
        } else if !line.trim().is_empty() {
            return Err(format!(
                "a console block starts with a `$ ` command line, not {line:?} (use a text \
                 block for output alone)"
            ));
        }
    }
    if out.is_empty() {
        return Err("a console block holds at least one `$ ` command line".to_string());
    }
    Ok(out)
}

/// Whether `command` runs in the background (ends with a lone `&`): what it prints arrives
/// while later commands run, so it cannot be compared.
pub fn is_background(command: &str) -> bool {
    let trimmed = command.trim_end();
    trimmed.ends_with('&') && !trimmed.ends_with("&&")
}

/// `line` masked: each run of ASCII digits becomes `0`, each run of blanks one space, and
/// trailing blanks go.
pub fn mask(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let (mut in_digits, mut in_blanks) = (false, false);
    for c in line.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('0');
            }
            (in_digits, in_blanks) = (true, false);
        } else if c == ' ' || c == '\t' {
            if !in_blanks {
                out.push(' ');
            }
            (in_digits, in_blanks) = (false, true);
        } else {
            out.push(c);
            (in_digits, in_blanks) = (false, false);
        }
    }
    out.trim_end().to_string()
}

/// Masked lines of `text`, without the empty lines at its end.
pub fn masked_lines<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    let mut out: Vec<String> = lines.iter().map(|l| mask(l.as_ref())).collect();
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

/// Whether the output `actual` matches the `expected` lines, both masked; an expected line
/// holding only `...` matches any number of lines (none too).
pub fn matches<S: AsRef<str>, T: AsRef<str>>(expected: &[S], actual: &[T]) -> bool {
    let expected = masked_lines(expected);
    let actual = masked_lines(actual);
    glob(&expected, &actual)
}

/// Line-wise matching with `...` as a wildcard over lines (dynamic programming: `ok[j]` says
/// whether the expected lines so far match the first `j` actual lines).
fn glob(expected: &[String], actual: &[String]) -> bool {
    let mut ok = vec![false; actual.len() + 1];
    ok[0] = true;
    for e in expected {
        if e.trim() == "..." {
            // A prefix match extends to every longer prefix.
            for j in 1..=actual.len() {
                ok[j] = ok[j] || ok[j - 1];
            }
        } else {
            for j in (1..=actual.len()).rev() {
                ok[j] = ok[j - 1] && *e == actual[j - 1];
            }
            ok[0] = false;
        }
    }
    ok[actual.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_digits_and_blanks() {
        assert_eq!(mask("slot 12   pid 4711\tready  "), "slot 0 pid 0 ready");
        assert_eq!(mask("  x"), " x");
        assert_eq!(mask("1.25ms"), "0.0ms");
    }

    #[test]
    fn splits_commands_and_output() {
        let block = "$ ck status\nname ck-8080\n\n$ curl \\\n  localhost:8080\nhello\n";
        let cmds = commands(block).unwrap();
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0].command, "ck status");
        assert_eq!(cmds[0].expected, ["name ck-8080", ""]);
        assert_eq!(cmds[1].offset, 3);
        assert_eq!(cmds[1].command, "curl \\\n  localhost:8080");
        assert_eq!(cmds[1].expected, ["hello"]);
        assert!(commands("output first\n$ ls\n").is_err());
        assert!(commands("\n").is_err());
    }

    #[test]
    fn background_commands() {
        assert!(is_background("ck run -- node app.js &"));
        assert!(!is_background("a && b"));
        assert!(!is_background("ck status"));
    }

    #[test]
    fn ellipsis_matches_any_number_of_lines() {
        let actual = ["a 1", "b", "c", "d 22"];
        assert!(matches(&["a 9", "...", "d 3"], &actual));
        assert!(matches(&["...", "c", "d 0"], &actual));
        assert!(matches(&["a 0", "b", "...", "c", "...", "d 0"], &actual));
        assert!(matches(&["..."], &[] as &[&str]));
        assert!(matches(&["a 0", "b", "c", "d 0", "..."], &actual));
        assert!(!matches(&["a 0", "c", "d 0"], &actual));
        assert!(!matches(&["b", "..."], &actual));
        assert!(matches(&["x", ""], &["x"]));
    }
}
