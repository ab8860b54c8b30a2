//! Checks of the Markdown itself, each failure as `FILE:LINE: what`: relative links that point
//! nowhere or at an anchor no heading has, tables cut apart or with rows of the wrong width, and
//! words that name how the work was organised (`issue 12`, `round 3`, `session`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::markdown::Markdown;

/// Reads Markdown files once each.
#[derive(Debug, Default)]
pub struct Pages {
    read: HashMap<PathBuf, Markdown>,
}

impl Pages {
    /// An empty cache.
    pub fn new() -> Pages {
        Pages::default()
    }

    /// The parsed file at `path` (read on first use).
    pub fn get(&mut self, path: &Path) -> &Markdown {
        self.read
            .entry(path.to_path_buf())
            .or_insert_with(|| Markdown::read(path))
    }
}

/// Whether `dest` names a scheme (`https:`, `mailto:`...): not a file of the repository.
fn has_scheme(dest: &str) -> bool {
    dest.split_once(':').is_some_and(|(scheme, _)| {
        !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `text` with `%XX` escapes decoded (what a browser does with a link's path).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every relative link of `page` checked: its file exists (relative to the page, or to `root`
/// for a link starting with `/`), and its `#anchor`, in a Markdown target, is a heading's
/// anchor (or an HTML `id`/`name`) there.
pub fn check_links(page_path: &Path, root: &Path, pages: &mut Pages) -> Vec<String> {
    let page = pages.get(page_path).clone();
    let shown = page.shown(root);
    let dir = page_path.parent().unwrap_or(root);
    let mut failures = Vec::new();
    for link in &page.links {
        let dest = link.dest.trim();
        let at = format!("{shown}:{}: link `{dest}`", link.line);
        if dest.is_empty() {
            failures.push(format!("{at}: empty destination"));
            continue;
        }
        if has_scheme(dest) {
            continue;
        }
        let (path, anchor) = dest
            .split_once('#')
            .map_or((dest, None), |(p, a)| (p, Some(a)));
        let path = percent_decode(path.split('?').next().unwrap_or(""));
        let target = if path.is_empty() {
            page_path.to_path_buf()
        } else if let Some(from_root) = path.strip_prefix('/') {
            root.join(from_root)
        } else {
            normalize(&dir.join(&path))
        };
        // mdBook renders `page.md` as `page.html`: a link to either finds the Markdown file.
        let target = match target.extension() {
            Some(e) if e == "html" && !target.exists() => target.with_extension("md"),
            _ => target,
        };
        if !target.exists() {
            failures.push(format!("{at}: no such file {}", shown_path(&target, root)));
            continue;
        }
        let Some(anchor) = anchor.map(percent_decode) else {
            continue;
        };
        if target.extension().is_none_or(|e| e != "md") || anchor.is_empty() {
            continue;
        }
        let target_page = pages.get(&target);
        let known = target_page.headings.iter().any(|h| h.anchor == anchor)
            || target_page.text.contains(&format!("id=\"{anchor}\""))
            || target_page.text.contains(&format!("name=\"{anchor}\""));
        if !known {
            let close: Vec<&str> = target_page
                .headings
                .iter()
                .map(|h| h.anchor.as_str())
                .filter(|a| {
                    let words = anchor.split('-').filter(|w| w.len() > 3);
                    words.into_iter().any(|w| a.contains(w))
                })
                .take(5)
                .collect();
            let hint = if close.is_empty() {
                String::new()
            } else {
                format!(
                    " (anchors there with a word in common: #{})",
                    close.join(", #")
                )
            };
            failures.push(format!(
                "{at}: no heading in {} has the anchor #{anchor} (a heading's anchor is its \
                 text in lowercase, blanks as -, punctuation dropped){hint}",
                shown_path(&target, root),
            ));
        }
    }
    failures
}

/// `path` relative to `root` when inside it, `..` resolved.
fn shown_path(path: &Path, root: &Path) -> String {
    let path = normalize(path);
    path.strip_prefix(root)
        .unwrap_or(&path)
        .display()
        .to_string()
}

/// `path` with `.` and `..` resolved by name (a link's meaning: symlinks are not followed).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The number of cells of a table row: `|`s not escaped, less the leading and trailing ones.
pub fn cell_count(row: &str) -> usize {
    let row = row.trim();
    let row = row.strip_prefix('|').unwrap_or(row);
    let row = match row.strip_suffix('|') {
        Some(inner) if !inner.ends_with('\\') => inner,
        _ => row,
    };
    let mut count = 1;
    let mut escaped = false;
    for c in row.chars() {
        match c {
            '\\' if !escaped => escaped = true,
            '|' if !escaped => count += 1,
            _ => escaped = false,
        }
        if c != '\\' {
            escaped = false;
        }
    }
    count
}

/// The tables of `page` checked: a line starting with `|` outside every table and code block
/// is a table cut apart (a blank line inside it, a row before its delimiter row...), and every
/// row has as many cells as its header.
pub fn check_tables(page: &Markdown, root: &Path) -> Vec<String> {
    let shown = page.shown(root);
    let mut failures = Vec::new();
    let mut table_lines = Vec::new();
    for table in &page.tables {
        let (Some(header), Some(last)) = (table.first(), table.last()) else {
            continue;
        };
        table_lines.push(header.line..last.line + 1);
        let width = cell_count(&header.source);
        for row in &table[1..] {
            let cells = cell_count(&row.source);
            if cells != width {
                failures.push(format!(
                    "{shown}:{}: a table row of {cells} cells under a header of {width} \
                     (line {}; a `|` inside a cell is written `\\|`)",
                    row.line, header.line
                ));
            }
        }
    }
    let code = page.code_lines();
    for (i, line) in page.text.lines().enumerate() {
        let n = i + 1;
        let inside = |ranges: &[std::ops::Range<usize>]| ranges.iter().any(|r| r.contains(&n));
        if line.trim_start().starts_with('|') && !inside(&table_lines) && !inside(&code) {
            failures.push(format!(
                "{shown}:{n}: a table line outside any table: the table is cut (a blank line \
                 or a missing `|---|` delimiter row above it)"
            ));
        }
    }
    failures
}

/// Words before `session` that make it a work log's (`this session`, `a later session`), not
/// a technical term (`TCP session`, `sessions held in memory`).
const SESSION_BEFORE: &[&str] = &[
    "this", "that", "later", "earlier", "next", "previous", "prior", "last", "latest", "same",
    "another", "first", "second", "third",
];

/// The lines of `page` that name the development history: `issue 12`, `issue #12`, `round 3`,
/// and a `session` of the work (`this session`, `the session's build`; not `TCP session` or
/// `sessions held in worker memory`).
pub fn check_history(page: &Markdown, root: &Path) -> Vec<String> {
    let shown = page.shown(root);
    let mut failures = Vec::new();
    for (i, line) in page.text.lines().enumerate() {
        let lower = line.to_lowercase();
        // Words of one table cell at a time: `each round | 254` is a table's, not a log's.
        for cell in lower.split('|') {
            failures.extend(history_words(cell).into_iter().map(|named| {
                format!(
                    "{shown}:{}: `{named}` names the development history; say what ck \
                     does instead",
                    i + 1
                )
            }));
        }
    }
    failures
}

/// The words of `text` (lowercase) that name the development history, as [`check_history`]
/// finds them.
fn history_words(text: &str) -> Vec<String> {
    let is_word = |c: char| c.is_alphanumeric() || c == '#' || c == '\'';
    // Each word with whether only spaces part it from the next: `round 3` is a log's, while
    // `per round, 15 rounds` and `--rounds=2` are a measurement's.
    let mut words: Vec<(&str, bool)> = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(is_word) {
        let tail = &rest[start..];
        let end = tail.find(|c: char| !is_word(c)).unwrap_or(tail.len());
        let after = &tail[end..];
        let gap = after.find(is_word).map_or(after, |next| &after[..next]);
        words.push((&tail[..end], !gap.is_empty() && gap.trim().is_empty()));
        rest = after;
    }
    let numbered = |w: &str| {
        let n = w.trim_start_matches('#');
        !n.is_empty() && n.chars().all(|c| c.is_ascii_digit())
    };
    let mut found = Vec::new();
    for (j, &(word, spaced)) in words.iter().enumerate() {
        let next = words.get(j + 1).map_or("", |w| w.0);
        let named = match word {
            "issue" | "issues" | "round" | "rounds" if spaced && numbered(next) => {
                Some(format!("{word} {next}"))
            }
            "session's" | "sessions'" => Some(word.to_string()),
            "session" | "sessions" => {
                let before = j.checked_sub(1).map_or("", |k| words[k].0);
                SESSION_BEFORE
                    .contains(&before)
                    .then(|| format!("{before} {word}"))
            }
            _ => None,
        };
        found.extend(named);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_cells() {
        assert_eq!(cell_count("| a | b |"), 2);
        assert_eq!(cell_count("a | b"), 2);
        assert_eq!(cell_count("| `a\\|b` | c |"), 2);
        assert_eq!(cell_count("| a | b | c |"), 3);
        assert_eq!(cell_count("|a|"), 1);
    }

    #[test]
    fn schemes_and_escapes() {
        assert!(has_scheme("https://x.org/a#b"));
        assert!(has_scheme("mailto:a@b"));
        assert!(!has_scheme("docs/src/faq.md#what-is-ck"));
        assert!(!has_scheme("#anchor"));
        assert_eq!(percent_decode("a%20b.md"), "a b.md");
    }

    fn page(text: &str) -> Markdown {
        Markdown::parse(Path::new("/r/p.md"), text.to_string())
    }

    #[test]
    fn cut_and_ragged_tables() {
        let p = page(
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n```\n| in code |\n```\n\n| x | y |\n|---|---|\n| 1 | 2 | 3 |\n",
        );
        let failures = check_tables(&p, Path::new("/r"));
        assert_eq!(failures.len(), 2, "{failures:#?}");
        assert!(
            failures[0].starts_with("p.md:13: a table row of 3 cells"),
            "{failures:#?}"
        );
        assert!(
            failures[1].starts_with("p.md:5: a table line outside"),
            "{failures:#?}"
        );
    }

    #[test]
    fn history_words() {
        let p = page(
            "Fixed in issue #12.\nAs of round 3.\nThis session.\nsession affinity and TCP sessions.\nissue tracker\nthe session's first build\nsessions held in worker memory\n| each round | 254/327 ms |\nper round, 15 rounds\n`--rounds=2`\n",
        );
        let failures = check_history(&p, Path::new("/r"));
        let lines: Vec<_> = failures
            .iter()
            .map(|f| f.split(':').nth(1).unwrap())
            .collect();
        assert_eq!(lines, ["1", "2", "3", "6"], "{failures:#?}");
    }
}
