//! `ck top`'s terminal view (ratatui): the header, the slot table with the selected slot
//! highlighted and the totals under it, and the last action's outcome above the key help.
use ratatui::{
    Frame as Screen,
    layout::{Constraint, Layout},
    style::{Color, Modifier, Style},
    text::Line,
    widgets::{Cell, Paragraph, Row, Table, TableState},
};

use super::{
    keys::{HELP, Selection},
    model::{COLUMNS, Frame},
};

/// Everything the view draws.
#[derive(Debug, Default)]
pub struct View {
    /// The instance's name.
    pub name: String,
    /// The last frame computed (kept on screen while the instance cannot be reached).
    pub frame: Option<Frame>,
    /// Why the last report could not be had (the instance went away), if it could not.
    pub problem: Option<String>,
    /// The outcome of the last drain, undrain or reload (or that one is under way).
    pub message: Option<String>,
    /// The selected slot.
    pub selection: Selection,
}

impl View {
    /// The slot indices of the rows on screen.
    pub fn slots(&self) -> Vec<u32> {
        self.frame
            .as_ref()
            .map_or_else(Vec::new, |f| f.rows.iter().map(|r| r.slot).collect())
    }
}

fn cells(texts: [String; COLUMNS.len()]) -> Vec<Cell<'static>> {
    texts
        .into_iter()
        .zip(COLUMNS.iter())
        .map(|(text, col)| {
            let line = Line::from(text);
            Cell::from(if col.right {
                line.right_aligned()
            } else {
                line
            })
        })
        .collect()
}

/// Draws `view` on the whole screen.
pub fn draw(screen: &mut Screen<'_>, view: &mut View) {
    let mut header: Vec<Line> = match &view.frame {
        Some(frame) => frame.header.iter().map(|l| Line::from(l.clone())).collect(),
        None => vec![Line::from(format!("ck top: waiting for {}", view.name))],
    };
    if let Some(problem) = &view.problem {
        header.push(
            Line::from(format!(
                "NOT REACHABLE, retrying every second (the table is the last report): {problem}"
            ))
            .style(Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)),
        );
    }
    // The table as tall as its rows (titles, slots, totals), within what the screen has left.
    let header_height = header.len() as u16 + 1;
    let rows_height = view.frame.as_ref().map_or(0, |f| f.rows.len()) as u16 + 2;
    let room = screen.area().height.saturating_sub(header_height + 2);
    let [top, middle, _, bottom] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Length(rows_height.min(room)),
        Constraint::Fill(1),
        Constraint::Length(2),
    ])
    .areas(screen.area());
    screen.render_widget(Paragraph::new(header), top);

    let slots = view.slots();
    let mut state = TableState::default().with_selected(view.selection.row(&slots));
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let titles = cells(COLUMNS.map(|c| c.title.to_string()));
    let (rows, footer) = match &view.frame {
        Some(frame) => (
            frame
                .rows
                .iter()
                .map(|r| Row::new(cells(r.cells())))
                .collect(),
            Some(Row::new(cells(frame.totals.cells())).style(bold)),
        ),
        None => (Vec::new(), None),
    };
    let mut table = Table::new(rows, COLUMNS.map(|c| Constraint::Length(c.width)))
        .header(Row::new(titles).style(bold.add_modifier(Modifier::UNDERLINED)))
        .column_spacing(2)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED));
    if let Some(footer) = footer {
        table = table.footer(footer);
    }
    screen.render_stateful_widget(table, middle, &mut state);

    let mut lines = vec![Line::from(view.message.clone().unwrap_or_default())];
    let rates = match view.frame.as_ref().and_then(|f| f.interval_s) {
        Some(s) => format!("rates over {s:.1} s"),
        None => "rates from the next report".to_string(),
    };
    lines.push(Line::from(format!("{HELP}   ({rates})")).style(Style::new().fg(Color::DarkGray)));
    screen.render_widget(Paragraph::new(lines), bottom);
}
