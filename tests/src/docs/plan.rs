//! What a page asks the docs test to do, from its code blocks' info strings: shell blocks to run
//! (`sh`, `bash`, `shell`), ```` ```console ```` commands to run and compare, `file=PATH` blocks
//! to write, `norun: REASON` blocks to skip, everything else to leave alone.

use super::console::{self, ConsoleCommand};
use super::markdown::{CodeBlock, Markdown};

/// One thing to do, in the page's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// 1-based line in the Markdown file: the block's fence, or the console command's `$ ` line.
    pub line: usize,
    /// What to do.
    pub kind: StepKind,
    /// The block's text, or the console command, as the page has it (before ports are
    /// substituted).
    pub text: String,
    /// The heading the block sits under.
    pub section: Option<String>,
}

/// The kinds of [`Step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    /// Run the text in the page's shell; a failure ends the page.
    Shell,
    /// Run the command in the page's shell and compare its output with `expected` (none when
    /// `background`).
    Console {
        /// The output lines the page shows.
        expected: Vec<String>,
        /// Whether the command ends with `&`.
        background: bool,
    },
    /// Write the text to `path` (relative to the page's directory).
    File {
        /// Where to.
        path: String,
    },
}

/// A page's steps, what it skips and what is wrong with its blocks.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Lines of the blocks not run (`norun: REASON`), with the reason.
    pub skipped: Vec<(usize, String)>,
    /// Problems with the blocks themselves (`LINE: what`).
    pub errors: Vec<String>,
}

/// How a block's info string reads.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Info {
    /// The language, `sh` of `sh,norun: x`.
    lang: String,
    /// `Some(reason)` for `norun: reason`; `Some("")` for a `norun` without one.
    norun: Option<String>,
    /// `file=PATH`.
    file: Option<String>,
}

/// Reads an info string: the language up to the first `,` or blank, then `norun[: REASON]`
/// and `file=PATH` anywhere after it.
fn info(text: &str) -> Info {
    let end = text.find([',', ' ', '\t']).unwrap_or(text.len());
    let (lang, rest) = text.split_at(end);
    let norun = rest.find("norun").map(|i| {
        let after = &rest[i + "norun".len()..];
        after
            .trim_start()
            .strip_prefix(':')
            .map(|r| r.trim().to_string())
            .unwrap_or_default()
    });
    let file = rest
        .split([',', ' ', '\t'])
        .find_map(|t| t.strip_prefix("file="))
        .map(str::to_string);
    Info {
        lang: lang.to_ascii_lowercase(),
        norun,
        file,
    }
}

/// Whether a block of language `lang` is a shell script to run.
fn is_shell(lang: &str) -> bool {
    matches!(lang, "sh" | "bash" | "shell")
}

/// The plan of `page`.
pub fn plan(page: &Markdown) -> Plan {
    let mut plan = Plan::default();
    for block in &page.blocks {
        add_block(&mut plan, block);
    }
    plan
}

/// Adds what `block` asks for to `plan`.
fn add_block(plan: &mut Plan, block: &CodeBlock) {
    let info = info(&block.info);
    let runnable = is_shell(&info.lang) || info.lang == "console";
    let step = |kind, text: &str| Step {
        line: block.line,
        kind,
        text: text.to_string(),
        section: block.section.clone(),
    };
    if let Some(path) = info.file {
        if path.is_empty() {
            plan.errors
                .push(format!("{}: `file=` needs a path", block.line));
        } else {
            plan.steps.push(step(StepKind::File { path }, &block.text));
        }
        return;
    }
    if !runnable {
        return;
    }
    match info.norun {
        Some(reason) if reason.is_empty() => plan.errors.push(format!(
            "{}: `{}` does not say why it is not run: write `{},norun: REASON` (e.g. `needs a \
             Kubernetes cluster`), or let it run",
            block.line, block.info, info.lang
        )),
        Some(reason) => plan.skipped.push((block.line, reason)),
        None if is_shell(&info.lang) => plan.steps.push(step(StepKind::Shell, &block.text)),
        None => match console::commands(&block.text) {
            Ok(commands) => plan
                .steps
                .extend(commands.into_iter().map(|c| console_step(block, c))),
            Err(e) => plan.errors.push(format!("{}: {e}", block.line)),
        },
    }
}

/// The step of one console command of `block`.
fn console_step(block: &CodeBlock, command: ConsoleCommand) -> Step {
    let background = console::is_background(&command.command);
    Step {
        // The fence's line, then the block's lines.
        line: block.line + 1 + command.offset,
        kind: StepKind::Console {
            expected: command.expected,
            background,
        },
        text: command.command,
        section: block.section.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn info_strings() {
        assert_eq!(
            info("sh,norun: needs a Kubernetes cluster"),
            Info {
                lang: "sh".into(),
                norun: Some("needs a Kubernetes cluster".into()),
                file: None
            }
        );
        assert_eq!(info("sh,norun").norun.as_deref(), Some(""));
        assert_eq!(info("js file=app.js").file.as_deref(), Some("app.js"));
        assert_eq!(info("console").lang, "console");
        assert_eq!(info("").lang, "");
    }

    #[test]
    fn a_page_becomes_steps() {
        let text = "# P\n\n```js file=app.js\nx\n```\n\n```sh\nck run &\n```\n\n```console\n$ ck status\nok\n$ curl x\nhi\n```\n\n```sh,norun: needs k8s\nkubectl apply\n```\n\n```sh,norun\nx\n```\n\n```toml\na = 1\n```\n";
        let page = Markdown::parse(Path::new("p.md"), text.to_string());
        let plan = plan(&page);
        let lines: Vec<_> = plan.steps.iter().map(|s| s.line).collect();
        assert_eq!(lines, [3, 7, 12, 14]);
        assert_eq!(
            plan.steps[0].kind,
            StepKind::File {
                path: "app.js".into()
            }
        );
        assert_eq!(plan.steps[1].kind, StepKind::Shell);
        assert_eq!(plan.steps[2].text, "ck status");
        assert_eq!(plan.skipped, [(18, "needs k8s".to_string())]);
        assert_eq!(plan.errors.len(), 1, "{:?}", plan.errors);
        assert!(plan.errors[0].starts_with("22: "), "{:?}", plan.errors);
    }
}
