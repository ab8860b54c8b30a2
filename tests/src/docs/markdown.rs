//! A Markdown page as the docs tests see it, read with `pulldown-cmark` (CommonMark with GitHub's
//! tables and mdBook's `{#id}` heading attributes): its fenced code blocks with their info
//! strings and line numbers, its headings with their anchors, its links, and its tables' rows.

use std::ops::Range;
use std::path::{Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// The parser options every docs check uses: what GitHub and mdBook render.
fn options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_HEADING_ATTRIBUTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_TASKLISTS
}

/// A Markdown file, read and parsed.
#[derive(Debug, Clone)]
pub struct Markdown {
    /// Its path.
    pub path: PathBuf,
    /// Its text.
    pub text: String,
    /// Its fenced and indented code blocks, in order.
    pub blocks: Vec<CodeBlock>,
    /// Its headings, in order.
    pub headings: Vec<Heading>,
    /// Its links and images, in order.
    pub links: Vec<Link>,
    /// The rows of its tables (header row first), each with its line and source text.
    pub tables: Vec<Vec<Row>>,
    /// Byte offsets where each line starts.
    line_starts: Vec<usize>,
}

/// One code block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeBlock {
    /// 1-based line of its opening fence in the file.
    pub line: usize,
    /// The info string after the fence (`sh`, `js file=app.js`, `sh,norun: needs k8s`); empty
    /// for an indented block.
    pub info: String,
    /// Its contents, with the fence's indentation removed.
    pub text: String,
    /// The heading it sits under (the nearest before it, any level), if any.
    pub section: Option<String>,
}

/// One heading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading {
    /// 1-based line.
    pub line: usize,
    /// Level, 1 for `#`.
    pub level: usize,
    /// Its text (inline code included, without the backticks).
    pub text: String,
    /// Its anchor: the `{#id}` given, else the slug of its text ([`slug`]), made unique within
    /// the page as GitHub and mdBook do (`-1`, `-2`... for repeats).
    pub anchor: String,
}

/// One link or image destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// 1-based line.
    pub line: usize,
    /// Its destination as written.
    pub dest: String,
}

/// One table row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// 1-based line.
    pub line: usize,
    /// The row's source line.
    pub source: String,
}

impl Markdown {
    /// Reads and parses `path`.
    ///
    /// # Panics
    /// When the file cannot be read.
    pub fn read(path: &Path) -> Markdown {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        Markdown::parse(path, text)
    }

    /// Parses `text` as the contents of `path`.
    pub fn parse(path: &Path, text: String) -> Markdown {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let mut page = Markdown {
            path: path.to_path_buf(),
            text: String::new(),
            blocks: Vec::new(),
            headings: Vec::new(),
            links: Vec::new(),
            tables: Vec::new(),
            line_starts,
        };
        page.collect(&text);
        page.text = text;
        page
    }

    /// Walks the parser's events once and fills the lists.
    fn collect(&mut self, text: &str) {
        let mut block: Option<CodeBlock> = None;
        let mut heading: Option<(usize, usize, Option<String>, String)> = None;
        let mut seen_anchors: Vec<String> = Vec::new();
        for (event, range) in Parser::new_ext(text, options()).into_offset_iter() {
            let line = self.line_of(range.start);
            match event {
                Event::Start(Tag::CodeBlock(kind)) => {
                    let info = match kind {
                        CodeBlockKind::Fenced(info) => info.trim().to_string(),
                        CodeBlockKind::Indented => String::new(),
                    };
                    let section = self.headings.last().map(|h| h.text.clone());
                    block = Some(CodeBlock {
                        line,
                        info,
                        text: String::new(),
                        section,
                    });
                }
                Event::End(TagEnd::CodeBlock) => self.blocks.extend(block.take()),
                Event::Start(Tag::Heading { level, id, .. }) => {
                    heading = Some((
                        line,
                        level_number(level),
                        id.map(|i| i.to_string()),
                        String::new(),
                    ));
                }
                Event::End(TagEnd::Heading(_)) => {
                    if let Some((line, level, id, text)) = heading.take() {
                        let text = text.trim().to_string();
                        let anchor = id.unwrap_or_else(|| unique(&slug(&text), &seen_anchors));
                        seen_anchors.push(anchor.clone());
                        self.headings.push(Heading {
                            line,
                            level,
                            text,
                            anchor,
                        });
                    }
                }
                Event::Text(t) | Event::Code(t) => {
                    if let Some(block) = block.as_mut() {
                        block.text.push_str(&t);
                    } else if let Some((_, _, _, text)) = heading.as_mut() {
                        text.push_str(&t);
                    }
                }
                Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                    self.links.push(Link {
                        line,
                        dest: dest_url.to_string(),
                    });
                }
                Event::Start(Tag::Table(_)) => self.tables.push(Vec::new()),
                Event::Start(Tag::TableHead | Tag::TableRow) => {
                    let row = self.row(text, range);
                    if let Some(table) = self.tables.last_mut() {
                        table.push(row);
                    }
                }
                _ => {}
            }
        }
    }

    /// The row whose source starts at `range.start`.
    fn row(&self, text: &str, range: Range<usize>) -> Row {
        let line = self.line_of(range.start);
        let start = self.line_starts[line - 1];
        let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        Row {
            line,
            source: text[start..end].to_string(),
        }
    }

    /// The 1-based line holding byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    /// Lines (1-based) that lie inside a fenced or indented code block, as ranges.
    pub fn code_lines(&self) -> Vec<Range<usize>> {
        self.blocks
            .iter()
            .map(|b| {
                // The fence, the contents, the closing fence (an indented block has no fences:
                // one line too many at its end does no harm).
                b.line..b.line + b.text.lines().count() + 2
            })
            .collect()
    }

    /// The file's path relative to `root`, for messages.
    pub fn shown(&self, root: &Path) -> String {
        self.path
            .strip_prefix(root)
            .unwrap_or(&self.path)
            .display()
            .to_string()
    }
}

/// 1 for `#`, ..., 6 for `######`.
fn level_number(level: HeadingLevel) -> usize {
    match level {
        HeadingLevel::H1 => 1,
        HeadingLevel::H2 => 2,
        HeadingLevel::H3 => 3,
        HeadingLevel::H4 => 4,
        HeadingLevel::H5 => 5,
        HeadingLevel::H6 => 6,
    }
}

/// The anchor GitHub and mdBook give a heading: lowercase, letters, digits, `-` and `_` kept,
/// each blank a `-`, everything else dropped (mdBook's `normalize_id`, GitHub's slugger).
pub fn slug(text: &str) -> String {
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// `anchor`, or `anchor-1`, `anchor-2`... when it is already in `seen`.
fn unique(anchor: &str, seen: &[String]) -> String {
    if !seen.iter().any(|s| s == anchor) {
        return anchor.to_string();
    }
    (1..)
        .map(|n| format!("{anchor}-{n}"))
        .find(|a| !seen.contains(a))
        .expect("some suffix is free")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Markdown {
        Markdown::parse(Path::new("t.md"), text.to_string())
    }

    #[test]
    fn blocks_carry_info_line_and_section() {
        let page = parse(
            "# Top\n\ntext\n\n## Quick start\n\n```sh\nck run &\n```\n\n- item\n\n  ```js file=app.js\n  x()\n  ```\n",
        );
        assert_eq!(page.blocks.len(), 2);
        assert_eq!(page.blocks[0].line, 7);
        assert_eq!(page.blocks[0].info, "sh");
        assert_eq!(page.blocks[0].text, "ck run &\n");
        assert_eq!(page.blocks[0].section.as_deref(), Some("Quick start"));
        assert_eq!(page.blocks[1].info, "js file=app.js");
        assert_eq!(page.blocks[1].text, "x()\n");
    }

    #[test]
    fn headings_get_github_anchors() {
        let page =
            parse("# Using `ck run` (the basics)\n\n## FAQ\n\n## FAQ\n\n## Custom {#mine}\n");
        let anchors: Vec<_> = page.headings.iter().map(|h| h.anchor.as_str()).collect();
        assert_eq!(anchors, ["using-ck-run-the-basics", "faq", "faq-1", "mine"]);
        assert_eq!(
            slug("Servers that bind the port themselves (`--adopt`)"),
            "servers-that-bind-the-port-themselves---adopt"
        );
    }

    #[test]
    fn tables_rows_and_links() {
        let page = parse("See [a](a.md#x).\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n| cut |\n");
        assert_eq!(
            page.links,
            [Link {
                line: 1,
                dest: "a.md#x".into()
            }]
        );
        // `| cut |` has no delimiter row: a paragraph, not a table.
        assert_eq!(page.tables.len(), 1, "{:?}", page.tables);
        let lines: Vec<_> = page.tables[0].iter().map(|r| r.line).collect();
        assert_eq!(lines, [3, 5]);
    }
}
