//! The rule that keeps measured figures out of BENCHMARKS.md's hand-written prose: outside the
//! generated blocks (`<!-- bench:NAME -->` ... `<!-- /bench:NAME -->`), no ASCII digit may
//! appear except in code (spans and blocks) and link targets. Every figure, and every setup
//! detail with a number in it, comes from the records and the scenarios, in the blocks; a name
//! with a digit in it is written as code (`p99`, `HTTP/3`). The file is read as CommonMark
//! (pulldown-cmark), so what counts as code is what a reader sees as code.

use pulldown_cmark::{Event, Parser, Tag, TagEnd};

/// The file the rule applies to, for messages.
const FILE: &str = "BENCHMARKS.md";

/// One place a figure is typed: its line (1-based) and the text holding the digit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typed {
    /// The line.
    pub line: usize,
    /// The prose around the digit.
    pub text: String,
}

/// Every digit in the hand-written prose of `text` (the generated blocks' contents left out).
pub fn typed_figures(text: &str) -> Vec<Typed> {
    let prose = blank_blocks(text);
    let mut typed = Vec::new();
    let mut in_code_block = false;
    for (event, range) in Parser::new(&prose).into_offset_iter() {
        let checked = match &event {
            Event::Start(Tag::CodeBlock(_)) => {
                in_code_block = true;
                None
            }
            Event::End(TagEnd::CodeBlock) => {
                in_code_block = false;
                None
            }
            Event::Text(t) if !in_code_block => Some(t.to_string()),
            Event::Html(t) | Event::InlineHtml(t) => Some(t.to_string()),
            _ => None,
        };
        if let Some(t) = checked.filter(|t| t.chars().any(|c| c.is_ascii_digit())) {
            typed.push(Typed {
                line: prose[..range.start].matches('\n').count() + 1,
                text: t.trim().to_string(),
            });
        }
    }
    typed
}

/// Fails, naming each place and the fix, when the prose of `text` has a typed figure.
pub fn refuse_typed(text: &str) -> anyhow::Result<()> {
    let typed = typed_figures(text);
    if typed.is_empty() {
        return Ok(());
    }
    let places: Vec<String> = typed
        .iter()
        .map(|t| format!("line {}: {:?}", t.line, t.text))
        .collect();
    anyhow::bail!(
        "{FILE}'s hand-written prose has figures typed in it ({}): figures come from the records, \
         in the generated blocks (a setup detail from its scenario's table title); write a name \
         with a digit as code (`p99`)",
        places.join("; ")
    )
}

/// `text` with the contents of every generated block replaced by blank lines (the markers and
/// the line count kept).
fn blank_blocks(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim();
        if trimmed.starts_with("<!-- /bench:") {
            inside = false;
        }
        if inside {
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            out.push_str(line);
        }
        if trimmed.starts_with("<!-- bench:") {
            inside = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_in_prose_are_typed_figures_and_code_is_not() {
        let text = "# Benchmarks\n\
                    \n\
                    Over ten runs the median was 1.94.\n\
                    \n\
                    The `p99` and `HTTP/3` are names; [a link](docs/bench/runs/2026.json).\n\
                    \n\
                    ```sh\n\
                    cargo xtask bench stall --rounds 2\n\
                    ```\n\
                    <!-- bench:stall -->\n\
                    | p99 | 63.6 ms |\n\
                    <!-- /bench:stall -->\n\
                    ## Stall, 4 workers\n";
        let typed = typed_figures(text);
        assert_eq!(
            typed,
            [
                Typed {
                    line: 3,
                    text: "Over ten runs the median was 1.94.".into()
                },
                Typed {
                    line: 13,
                    text: "Stall, 4 workers".into()
                }
            ]
        );
        let err = refuse_typed(text).unwrap_err().to_string();
        assert!(err.contains("line 3: \"Over ten runs"), "{err}");
        assert!(refuse_typed("Plain words, `code 42`.\n").is_ok());
    }

    #[test]
    fn html_outside_the_markers_is_prose_too() {
        assert!(refuse_typed("<!-- bench:method -->\n<!-- /bench:method -->\n").is_ok());
        assert_eq!(typed_figures("<b>42</b> words\n").len(), 1);
        assert_eq!(typed_figures("<!-- 42 -->\n").len(), 1);
    }
}
