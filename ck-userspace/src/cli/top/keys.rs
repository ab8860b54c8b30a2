//! `ck top`'s keys: what each key press asks for, and the selected slot (which follows its slot
//! index when rows come and go).
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Leave `ck top` (`q`, Esc, Ctrl-C).
    Quit,
    /// Select the slot above (Up, `k`).
    Up,
    /// Select the slot below (Down, `j`).
    Down,
    /// `ck drain` the selected slot (`d`).
    Drain,
    /// `ck undrain` the selected slot (`u`).
    Undrain,
    /// `ck reload` the instance (`r`).
    Reload,
}

/// The action of a key press, if it has one (key releases and repeats of other keys do not).
pub fn action_of(key: KeyEvent) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    Some(match key.code {
        KeyCode::Char('c') if ctrl => Action::Quit,
        _ if ctrl => return None,
        KeyCode::Char('q') | KeyCode::Esc => Action::Quit,
        KeyCode::Up | KeyCode::Char('k') => Action::Up,
        KeyCode::Down | KeyCode::Char('j') => Action::Down,
        KeyCode::Char('d') => Action::Drain,
        KeyCode::Char('u') => Action::Undrain,
        KeyCode::Char('r') => Action::Reload,
        _ => return None,
    })
}

/// The one line of help the view shows.
pub const HELP: &str = "↑/↓ j/k select   d drain   u undrain   r reload   q quit";

/// The selected slot, by index (so it stays on its slot when rows before it come or go).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    slot: Option<u32>,
}

impl Selection {
    /// The selected row among `slots` (the rows' slot indices, ascending): the selected slot's
    /// row, or, when it is gone, the row of the next slot (the last row if none), or the first
    /// row when nothing was selected yet. Remembers that slot.
    pub fn row(&mut self, slots: &[u32]) -> Option<usize> {
        let row = match self.slot {
            _ if slots.is_empty() => return None,
            None => 0,
            Some(want) => slots
                .iter()
                .position(|&s| s >= want)
                .unwrap_or(slots.len() - 1),
        };
        self.slot = Some(slots[row]);
        Some(row)
    }

    /// The selected slot among `slots`, if any.
    pub fn slot(&mut self, slots: &[u32]) -> Option<u32> {
        self.row(slots).map(|row| slots[row])
    }

    /// Moves the selection `by` rows (negative: up), staying within `slots`.
    pub fn step(&mut self, slots: &[u32], by: isize) {
        if let Some(row) = self.row(slots) {
            let to = row.saturating_add_signed(by).min(slots.len() - 1);
            self.slot = Some(slots[to]);
        }
    }
}
