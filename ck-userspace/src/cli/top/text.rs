//! `ck top --once`: one [`Frame`] as plain text (header, slot table, totals), for scripts.
use std::fmt::Write as _;

use super::model::{COLUMNS, Frame};

/// Cells padded to their column widths, two spaces apart, trailing blanks trimmed.
pub fn line(cells: &[String]) -> String {
    let mut out = String::new();
    for (i, (cell, col)) in cells.iter().zip(COLUMNS.iter()).enumerate() {
        if i > 0 {
            out.push_str("  ");
        }
        let width = usize::from(col.width);
        let _ = if col.right {
            write!(out, "{cell:>width$}")
        } else {
            write!(out, "{cell:<width$}")
        };
    }
    out.trim_end().to_string()
}

/// The whole frame as text.
pub fn render(frame: &Frame) -> String {
    let mut out = String::new();
    for header in &frame.header {
        out.push_str(header);
        out.push('\n');
    }
    let titles: Vec<String> = COLUMNS.iter().map(|c| c.title.to_string()).collect();
    out.push_str(&line(&titles));
    out.push('\n');
    for row in &frame.rows {
        out.push_str(&line(&row.cells()));
        out.push('\n');
    }
    out.push_str(&line(&frame.totals.cells()));
    out.push('\n');
    match frame.interval_s {
        Some(s) => {
            let _ = writeln!(out, "rates over the last {s:.2} s");
        }
        None => out.push_str("rates need two reports: none yet\n"),
    }
    out
}
