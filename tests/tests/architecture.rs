//! ARCHITECTURE.md stays a map, not an inventory, checked without running anything: it has at
//! most 5,000 words; no table cell holds more than 60 words; every numbered invariant under
//! `## Invariants` names the test that checks it, as ``(checked by: `test_fn`)`` or
//! `(checked by: none yet)`; and every test so named is a function (`fn NAME(`) in the
//! workspace's Rust sources, at least one of them. The detail a map leaves out belongs in the
//! guide's docs/src/design.md or in the modules' `//!` comments. Each failure says
//! `ARCHITECTURE.md:LINE: what` and what to fix.

use ck_tests::{docs, layers};

/// The page's length limit, in words (split on whitespace).
const MAX_WORDS: usize = 5_000;

/// The most words one table cell may hold.
const MAX_CELL_WORDS: usize = 60;

/// What opens an invariant's reference to its test.
const MARKER: &str = "(checked by:";

/// What an invariant no test checks yet says after [`MARKER`].
const NONE_YET: &str = "none yet)";

/// The directories (relative to the repository) whose `.rs` files may hold the named tests.
const SOURCE_DIRS: &[&str] = &[
    "ck-userspace",
    "ck-common",
    "ck-worker",
    "ck-bench",
    "tests",
    "xtask",
];

/// The text of ARCHITECTURE.md at the repository's root.
fn architecture() -> String {
    let path = docs::repo_root().join("ARCHITECTURE.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Fails with every message of `failures`, one a line.
fn assert_none(what: &str, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} {what} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The lines of `text` outside fenced code blocks, each with its 1-based number.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// The cells of a table row, split on `|` but not on an escaped `\|`. The empty pieces before
/// the leading `|` and after the trailing one are kept: they hold no word.
fn cells(row: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push('|');
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

/// What follows each [`MARKER`] in `text`, whitespace (line breaks included) collapsed to
/// single spaces, so a reference broken over two lines still reads as one.
fn marker_references(text: &str) -> Vec<String> {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    flat.match_indices(MARKER)
        .map(|(at, _)| flat[at + MARKER.len()..].trim_start().to_string())
        .collect()
}

/// The test name a reference (the text after [`MARKER`]) gives: `Ok(None)` for
/// `none yet)`, `Ok(Some(NAME))` for `` `NAME`) ``, else `Err` with what was found.
fn referenced_name(after: &str) -> Result<Option<String>, String> {
    if after.starts_with(NONE_YET) {
        return Ok(None);
    }
    let shown: String = after.chars().take(60).collect();
    let Some(rest) = after.strip_prefix('`') else {
        return Err(shown);
    };
    let Some(end) = rest.find('`') else {
        return Err(shown);
    };
    let name = &rest[..end];
    let well_formed = !name.is_empty()
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && rest[end + 1..].starts_with(')');
    if well_formed {
        Ok(Some(name.to_string()))
    } else {
        Err(shown)
    }
}

/// The text of every `.rs` file under [`SOURCE_DIRS`].
fn rust_sources() -> Vec<String> {
    let root = docs::repo_root();
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        layers::rust_files(&root.join(dir), &mut files);
    }
    assert!(
        !files.is_empty(),
        "no .rs file found under {SOURCE_DIRS:?} in {}",
        root.display()
    );
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .collect()
}

/// The numbered invariants under `## Invariants`: each item's first line number, its number
/// as written and its text (the item's line and its continuation lines).
fn invariants(text: &str) -> Vec<(usize, String, String)> {
    let lines = prose_lines(text);
    let heading = lines
        .iter()
        .position(|(_, l)| l.trim_end() == "## Invariants");
    let Some(start) = heading else {
        return Vec::new();
    };
    let mut items: Vec<(usize, String, String)> = Vec::new();
    let mut in_item = false;
    for &(n, line) in &lines[start + 1..] {
        if line.starts_with("## ") || line.starts_with("# ") {
            break;
        }
        let trimmed = line.trim_start();
        let digits: String = trimmed.chars().take_while(|c| c.is_ascii_digit()).collect();
        if !digits.is_empty() && trimmed[digits.len()..].starts_with(". **") {
            items.push((n, digits, trimmed.to_string()));
            in_item = true;
        } else if trimmed.is_empty() {
            in_item = false;
        } else if in_item && line.starts_with(char::is_whitespace) {
            if let Some(item) = items.last_mut() {
                item.2.push(' ');
                item.2.push_str(trimmed);
            }
        } else {
            in_item = false;
        }
    }
    items
}

#[test]
fn architecture_is_a_map_of_at_most_5000_words() {
    let words = architecture().split_whitespace().count();
    eprintln!("ARCHITECTURE.md: {words} words (at most {MAX_WORDS})");
    assert!(
        words <= MAX_WORDS,
        "ARCHITECTURE.md has {words} words, over {MAX_WORDS}: keep it a map; move the detail to \
         docs/src/design.md (the guide's \"How ck works inside\") or to the modules' `//!` \
         comments"
    );
}

#[test]
fn no_table_cell_of_architecture_holds_more_than_60_words() {
    let text = architecture();
    let mut failures = Vec::new();
    for (n, line) in prose_lines(&text) {
        if !line.starts_with('|') {
            continue;
        }
        for cell in cells(line) {
            let words = cell.split_whitespace().count();
            if words > MAX_CELL_WORDS {
                let start: Vec<&str> = cell.split_whitespace().take(8).collect();
                failures.push(format!(
                    "ARCHITECTURE.md:{n}: a table cell of {words} words (at most \
                     {MAX_CELL_WORDS}), `{} ...`: shorten it to what the piece is for, and move \
                     the detail to docs/src/design.md or the module's `//!` comment",
                    start.join(" ")
                ));
            }
        }
    }
    assert_none("table cell", &failures);
}

#[test]
fn every_test_architecture_names_for_an_invariant_exists() {
    let text = architecture();
    let mut names = Vec::new();
    let mut failures = Vec::new();
    for after in marker_references(&text) {
        match referenced_name(&after) {
            Ok(Some(name)) => names.push(name),
            Ok(None) => {}
            Err(found) => failures.push(format!(
                "ARCHITECTURE.md: `{MARKER} {found}` is neither ``{MARKER} `test_fn`)`` nor \
                 `{MARKER} {NONE_YET}`: write the bare name of the test function in backticks"
            )),
        }
    }
    assert!(
        !names.is_empty(),
        "ARCHITECTURE.md names no test: end each invariant with ``{MARKER} `test_fn`)``, the \
         bare name of a #[test] or property-test function that checks it"
    );
    let sources = rust_sources();
    for name in &names {
        let needle = format!("fn {name}(");
        if !sources.iter().any(|s| s.contains(&needle)) {
            failures.push(format!(
                "ARCHITECTURE.md: ``{MARKER} `{name}`)`` names no function: no .rs file under \
                 {SOURCE_DIRS:?} has `{needle}`; name the test that checks the invariant as it \
                 is now (found with `grep -rn \"fn NAME\" --include=*.rs`), or write \
                 `{MARKER} {NONE_YET}`"
            ));
        }
    }
    eprintln!("ARCHITECTURE.md: {} tests named", names.len());
    assert_none("named test", &failures);
}

#[test]
fn every_invariant_of_architecture_says_what_checks_it() {
    let text = architecture();
    let items = invariants(&text);
    assert!(
        !items.is_empty(),
        "ARCHITECTURE.md has no numbered invariant under `## Invariants` (lines `N. **...**`): \
         the section is missing or its list lost its numbers"
    );
    let failures: Vec<String> = items
        .iter()
        .filter(|(_, _, item)| !item.contains(MARKER))
        .map(|(n, number, _)| {
            format!(
                "ARCHITECTURE.md:{n}: invariant {number} says nothing of its test: end it with \
                 ``{MARKER} `test_fn`)`` (the test that checks it) or `{MARKER} {NONE_YET}`"
            )
        })
        .collect();
    eprintln!("ARCHITECTURE.md: {} invariants", items.len());
    assert_none("invariant", &failures);
}
