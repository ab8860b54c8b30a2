//! What every page of the reference shares: the line that marks it generated and the
//! escaping of a Markdown table cell.

/// The first line of every generated Markdown page.
pub const GENERATED: &str =
    "<!-- Generated from ck's code by `ck reference`: do not edit; run `cargo xtask docs`. -->";

/// `text` as one Markdown table cell: no line breaks, `|` escaped, and `<` and `>` outside code
/// spans written as entities (`ck-<first port>` is not an HTML tag).
pub(crate) fn cell(text: &str) -> String {
    let line = text
        .split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|");
    line.split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            0 => part.replace('<', "&lt;").replace('>', "&gt;"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join("`")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_one_line_without_tags() {
        assert_eq!(
            cell("a | b\n  ck-<port> `<x>`"),
            "a \\| b ck-&lt;port&gt; `<x>`"
        );
    }
}
