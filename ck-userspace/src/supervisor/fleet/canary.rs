//! A canary roll (`ck reload --canary P`): the reload's first batch is ceil(N x P / 100)
//! replacements (at least one). Once all are ready they go into the active set as canaries
//! beside the whole current release, which keeps serving, and get P % of new connections: the
//! ready list lists them in that proportion (the program picks positions of it as always; by
//! client, the consistent table is built from the same list and the program steers by it). At
//! the window's end the verdict promotes them: they become the roll's first batch, the old
//! workers they replace leave, and the roll goes on as any roll. A canary worker that dies,
//! turns unhealthy or drains before the verdict withdraws the canary: its workers retire, the
//! current release never left, and the roll ends aborted (`roll::abort`). So does one that
//! crosses a limit the user set on the kernel's counters ([`crossed`]).
use std::time::Duration;

use ck_common::{ActiveSet, MAX_SLOTS};

use super::Lives;
use crate::settings::choices::{CanaryAsk, CanaryBy, CanaryLimits};

/// A canary in a roll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanaryRoll {
    /// As asked.
    pub ask: CanaryAsk,
    /// How many replacements it starts.
    pub size: usize,
    /// (old slot, canary slot) once they went in; empty while they start.
    pub pairs: Vec<(u32, u32)>,
}

impl CanaryRoll {
    /// The canary of a reload of `workers` workers.
    pub fn new(ask: CanaryAsk, workers: usize) -> CanaryRoll {
        let size = (workers * usize::from(ask.percent)).div_ceil(100).max(1);
        CanaryRoll {
            ask,
            size,
            pairs: Vec::new(),
        }
    }

    /// Its workers are in the active set, judged.
    pub fn judging(&self) -> bool {
        !self.pairs.is_empty()
    }

    /// How long it is judged.
    pub fn window(&self) -> Duration {
        Duration::from_millis(self.ask.for_ms)
    }

    /// Whether `slot` is one of its workers.
    pub fn has(&self, slot: u32) -> bool {
        self.pairs.iter().any(|(_, new)| *new == slot)
    }

    /// Its choice is by client: the program steers by the consistent table meanwhile.
    pub fn by_client(&self) -> bool {
        self.ask.by == CanaryBy::Client
    }
}

/// Entries of the ready list a canary's weights are spread over (a fallback keeps its room).
const ENTRIES: usize = 100;

/// `set` with its ready list rewritten so that the canary slots of `lives` get `percent` % of
/// its entries and the others the rest, each side spread evenly over its slots; None when
/// there is no canary slot or no other ready slot in it.
pub fn weigh(set: &ActiveSet, lives: &Lives, percent: u8) -> Option<ActiveSet> {
    let ready = &set.slots[..set.ready_len as usize];
    let rest = &set.slots[set.ready_len as usize..set.live_len as usize];
    let is_canary = |slot: &u32| lives.get(slot).is_some_and(|l| l.canary);
    let (canary, current): (Vec<u32>, Vec<u32>) = ready.iter().partition(|s| is_canary(s));
    if canary.is_empty() || current.is_empty() {
        return None;
    }
    let room = ENTRIES.min(MAX_SLOTS as usize - rest.len());
    let wanted = (room * usize::from(percent) + 50) / 100;
    let to_canary = wanted.clamp(canary.len(), room - current.len());
    // Interleaved evenly, not in two blocks: a program's cursor (one per CPU) that walks only
    // part of the list between two publishes still gives the canary its share.
    let (mut canary_turn, mut current_turn) = (canary.iter().cycle(), current.iter().cycle());
    let listed: Vec<u32> = (0..room)
        .map(
            |i| match (i + 1) * to_canary / room > i * to_canary / room {
                true => *canary_turn.next().expect("not empty"),
                false => *current_turn.next().expect("not empty"),
            },
        )
        .collect();
    let mut out = ActiveSet::EMPTY;
    out.slots[..listed.len()].copy_from_slice(&listed);
    out.slots[listed.len()..listed.len() + rest.len()].copy_from_slice(rest);
    out.ready_len = listed.len() as u32;
    out.live_len = (listed.len() + rest.len()) as u32;
    Some(out)
}

/// What the kernel counted for one canary slot: resets its connections sent and connections
/// its sockets dropped (both running totals), and the longest wait seen at the head of its
/// accept queue since its watch started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Resets sent (None: not counted here).
    pub resets: Option<u64>,
    /// Connections dropped (None: not readable).
    pub drops: Option<u64>,
    /// The longest queue wait (None: not watched here).
    pub queue_age: Option<Duration>,
}

/// Why a canary slot is withdrawn, if its counts `now` cross `limits`: the totals counted
/// since `before` (when it went in), and the longest wait.
pub fn crossed(limits: &CanaryLimits, before: &Counted, now: &Counted) -> Option<String> {
    let since = |now: Option<u64>, before: Option<u64>| now?.checked_sub(before.unwrap_or(0));
    if let (Some(max), Some(sent)) = (limits.max_resets, since(now.resets, before.resets))
        && sent > max
    {
        return Some(format!(
            "sent {sent} resets since it went in, more than --canary-max-resets {max}"
        ));
    }
    if let (Some(max), Some(dropped)) = (limits.max_drops, since(now.drops, before.drops))
        && dropped > max
    {
        return Some(format!(
            "dropped {dropped} connections from its full accept queue since it went in, more \
             than --canary-max-drops {max}"
        ));
    }
    if let (Some(max_ms), Some(age)) = (limits.max_queue_age_ms, now.queue_age)
        && age > Duration::from_millis(max_ms)
    {
        return Some(format!(
            "let a connection wait {} ms in its accept queue, longer than \
             --canary-max-queue-age {max_ms}ms",
            age.as_millis()
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(resets: u64, drops: u64, age_ms: u64) -> Counted {
        Counted {
            resets: Some(resets),
            drops: Some(drops),
            queue_age: Some(Duration::from_millis(age_ms)),
        }
    }

    /// Each limit counts from the canary's start, and only past it (equal is within).
    #[test]
    fn a_limit_is_crossed_past_it_counting_from_the_start() {
        let limits = CanaryLimits {
            max_resets: Some(5),
            max_drops: Some(0),
            max_queue_age_ms: Some(200),
        };
        let before = counted(100, 7, 0);
        assert_eq!(crossed(&limits, &before, &counted(105, 7, 200)), None);
        let resets = crossed(&limits, &before, &counted(106, 7, 0)).unwrap();
        assert!(resets.contains("sent 6 resets") && resets.contains("--canary-max-resets 5"));
        let drops = crossed(&limits, &before, &counted(100, 8, 0)).unwrap();
        assert!(drops.contains("dropped 1 connections"), "{drops}");
        let age = crossed(&limits, &before, &counted(100, 7, 201)).unwrap();
        assert!(age.contains("wait 201 ms"), "{age}");
    }

    /// No limit set, or a count the kernel does not keep here: never crossed.
    #[test]
    fn no_limit_or_no_count_is_never_crossed() {
        let none = CanaryLimits::default();
        assert_eq!(
            crossed(&none, &counted(0, 0, 0), &counted(99, 99, 9_999)),
            None
        );
        let limits = CanaryLimits {
            max_resets: Some(0),
            max_drops: Some(0),
            max_queue_age_ms: Some(1),
        };
        assert_eq!(
            crossed(&limits, &Counted::default(), &Counted::default()),
            None
        );
    }
}
