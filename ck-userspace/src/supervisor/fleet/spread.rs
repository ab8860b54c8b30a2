//! Balanced from the first connection: while the fleet boots, its starting workers are chosen
//! beside the ready ones, so clients that connect as the first worker turns ready (a balancer's
//! pool, a keep-alive agent reconnecting after a restart) spread over every worker instead of
//! all landing, for good, on the first one.
//!
//! The window opens when ck starts and whenever the fleet has no ready worker left; it closes
//! once no worker of the fleet is starting, or [`SPREAD_FOR`] after the first worker turned
//! ready, whichever comes first. A connection given to a starting worker waits in its queue
//! until that worker accepts: with workers whose boots differ by more than the window, a few
//! connections of the window's first moments wait for the slow one. Outside the window only
//! ready workers are chosen: a roll's replacements (standbys) and a scale-up's new workers never
//! are, since ready workers are serving beside them.
use std::time::{Duration, Instant};

use ck_common::ActiveSet;

use crate::supervisor::lifecycle::{Life, active_set};

/// How long after the first worker turned ready the starting ones are still chosen.
pub const SPREAD_FOR: Duration = Duration::from_secs(2);

/// The boot window's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spread {
    /// The fleet is booting: at start, or since it lost every ready worker.
    open: bool,
    /// When the first worker of this boot turned ready (as the window saw it).
    first_ready: Option<Instant>,
}

impl Default for Spread {
    /// Open: a fleet starts by booting.
    fn default() -> Spread {
        Spread {
            open: true,
            first_ready: None,
        }
    }
}

impl Spread {
    /// Closed: a fleet that is not booting (taken over from an earlier ck).
    pub fn closed() -> Spread {
        Spread {
            open: false,
            first_ready: None,
        }
    }

    /// Brings the window up to date with `lives` at `now`: whether the starting workers are
    /// chosen now, and when to look again: the window's end, told once, when the first worker
    /// of the boot turns ready. While no worker is ready the window stays open and spreads
    /// nothing: the program's fallback already chooses among every live worker then.
    pub fn update<'a>(
        &mut self,
        lives: impl Iterator<Item = (u32, &'a Life)> + Clone,
        now: Instant,
    ) -> (bool, Option<Instant>) {
        if !lives.clone().any(|(_, l)| l.selectable()) {
            *self = Spread::default();
            return (false, None);
        }
        if !self.open {
            return (false, None);
        }
        let first = self.first_ready.is_none();
        let until = *self.first_ready.get_or_insert(now) + SPREAD_FOR;
        if now >= until || !lives.into_iter().any(|(_, l)| l.booting()) {
            self.open = false;
            return (false, None);
        }
        (true, first.then_some(until))
    }

    /// Whether the window is open (the fleet booting).
    pub fn is_open(&self) -> bool {
        self.open
    }
}

/// The active set to publish for `lives` at `now` (see [`active_set`]), the window brought up
/// to date first; and when to publish again, told once per window (see [`Spread::update`]).
pub fn chosen_set<'a>(
    spread: &mut Spread,
    lives: impl Iterator<Item = (u32, &'a Life)> + Clone,
    stopping: bool,
    now: Instant,
) -> (ActiveSet, Option<Instant>) {
    let (spreading, until) = spread.update(lives.clone(), now);
    (active_set(lives, stopping, spreading), until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::restart_policy::RestartPolicy;
    use crate::supervisor::lifecycle::{Run, State};

    fn life(state: State) -> Life {
        Life {
            state,
            socket_open: true,
            ..Life::new(RestartPolicy::default(), false)
        }
    }

    fn run() -> Run {
        Run {
            id: 1,
            started: Instant::now(),
            ready_at: None,
            adopted: false,
        }
    }

    /// One ready worker and three starting: all four chosen, the ready one first; the window
    /// ends when the others are ready, or [`SPREAD_FOR`] after the first turned ready.
    #[test]
    fn starting_workers_are_chosen_until_all_are_ready_or_the_window_ends() {
        let t0 = Instant::now();
        let mut lives = vec![life(State::Ready(run()))];
        lives.extend((0..3).map(|_| life(State::Starting(run()))));
        let of = |lives: &[Life]| -> Vec<(u32, Life)> {
            lives
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, l)| (i as u32, l))
                .collect()
        };
        let slots = of(&lives);
        let mut spread = Spread::default();
        let (set, until) = chosen_set(&mut spread, slots.iter().map(|(i, l)| (*i, l)), false, t0);
        assert_eq!(set.ready_len, 4);
        assert_eq!(set.slots[..4], [0, 1, 2, 3]);
        assert_eq!(until, Some(t0 + SPREAD_FOR));
        // Still within the window a second later (its end told once already).
        let (set, until) = chosen_set(
            &mut spread,
            slots.iter().map(|(i, l)| (*i, l)),
            false,
            t0 + Duration::from_secs(1),
        );
        assert_eq!((set.ready_len, until), (4, None));
        // At its end: the ready one only, the others in the fallback; closed for good.
        let (set, until) = chosen_set(
            &mut spread,
            slots.iter().map(|(i, l)| (*i, l)),
            false,
            t0 + SPREAD_FOR,
        );
        assert_eq!((set.ready_len, set.live_len, until), (1, 4, None));
        assert!(!spread.is_open());
        // A later boot of a worker (a scale-up, a crash's replacement) is not chosen.
        let (set, _) = chosen_set(
            &mut spread,
            slots.iter().map(|(i, l)| (*i, l)),
            false,
            t0 + SPREAD_FOR * 3,
        );
        assert_eq!(set.ready_len, 1);
    }

    /// Once nothing is ready, the window opens again (and spreads nothing until one is).
    #[test]
    fn losing_every_ready_worker_opens_the_window_again() {
        let t0 = Instant::now();
        let mut spread = Spread::default();
        let all_ready: Vec<Life> = (0..2).map(|_| life(State::Ready(run()))).collect();
        let (_, until) =
            spread.update(all_ready.iter().enumerate().map(|(i, l)| (i as u32, l)), t0);
        assert_eq!(until, None, "nothing booting: closed");
        assert!(!spread.is_open());
        let none_ready: Vec<Life> = (0..2).map(|_| life(State::Starting(run()))).collect();
        let at = t0 + Duration::from_secs(60);
        let (spreading, _) = spread.update(
            none_ready.iter().enumerate().map(|(i, l)| (i as u32, l)),
            at,
        );
        assert!(!spreading && spread.is_open());
        let one_ready = [life(State::Ready(run())), life(State::Starting(run()))];
        let later = at + Duration::from_millis(300);
        let (spreading, until) = spread.update(
            one_ready.iter().enumerate().map(|(i, l)| (i as u32, l)),
            later,
        );
        assert_eq!((spreading, until), (true, Some(later + SPREAD_FOR)));
    }

    /// A roll's replacement (standby), a drained or a spare worker is never spread to.
    #[test]
    fn standbys_spares_and_drained_workers_are_not_booting() {
        let mut standby = life(State::Starting(run()));
        standby.standby = true;
        let mut drained = life(State::Starting(run()));
        drained.drained = true;
        let spare = Life {
            state: State::Starting(run()),
            socket_open: true,
            ..Life::spare(RestartPolicy::default())
        };
        let mut closed = life(State::Starting(run()));
        closed.socket_open = false;
        for l in [standby, drained, spare, closed] {
            assert!(!l.booting(), "{l:?}");
        }
        assert!(life(State::Starting(run())).booting());
    }
}
