//! The flip counter of a group's active set (`config.live_half`: its low bit is the half the
//! program reads, and every publish adds one) and, per slot, the flip that took it out of the
//! ready list: a QUIC handshake in `pending` records the counter of the set that chose it, so
//! the handshakes a leaving worker was given before its flip are told from later ones.
use std::collections::BTreeMap;

use ck_common::ActiveSet;

/// The flips of one group, as its publishes made them.
#[derive(Debug, Default)]
pub struct Flips {
    /// The ready slots of the last publish.
    ready: Vec<u32>,
    /// Slot -> the counter of the publish that took it out of the ready list (while it stays
    /// out).
    out_at: BTreeMap<u32, u32>,
}

impl Flips {
    /// The counter after `live_half` (the next publish's).
    pub fn next(live_half: u32) -> u32 {
        live_half.wrapping_add(1)
    }

    /// `set` was published under counter `flip`.
    pub fn published(&mut self, flip: u32, set: &ActiveSet) {
        let ready = set.ready_len.min(set.slots.len() as u32) as usize;
        let ready = set.slots[..ready].to_vec();
        for slot in &self.ready {
            if !ready.contains(slot) {
                self.out_at.insert(*slot, flip);
            }
        }
        for slot in &ready {
            self.out_at.remove(slot);
        }
        self.ready = ready;
    }

    /// The counter of the publish that took `slot` out of the ready list, if this group saw it
    /// (None: ready now, or out since before this ck loaded the group).
    pub fn out_at(&self, slot: u32) -> Option<u32> {
        self.out_at.get(&slot).copied()
    }
}

/// Whether an entry made under counter `made` predates flip `flip` (the counter wraps: the
/// difference decides, as for TCP sequence numbers).
pub fn before(made: u32, flip: u32) -> bool {
    (flip.wrapping_sub(made) as i32) > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ready: &[u32]) -> ActiveSet {
        let mut set = ActiveSet::EMPTY;
        set.slots[..ready.len()].copy_from_slice(ready);
        set.ready_len = ready.len() as u32;
        set.live_len = ready.len() as u32;
        set
    }

    #[test]
    fn a_slot_out_of_the_ready_list_keeps_the_flip_that_took_it_out() {
        let mut flips = Flips::default();
        flips.published(1, &set(&[0, 1]));
        assert_eq!(flips.out_at(0), None);
        flips.published(2, &set(&[1, 2]));
        assert_eq!(flips.out_at(0), Some(2));
        // Later publishes do not move it.
        flips.published(3, &set(&[1, 2, 3]));
        assert_eq!(flips.out_at(0), Some(2));
        // Back in (an undrain), then out again.
        flips.published(4, &set(&[0, 1]));
        assert_eq!((flips.out_at(0), flips.out_at(2)), (None, Some(4)));
        flips.published(5, &set(&[1]));
        assert_eq!(flips.out_at(0), Some(5));
    }

    #[test]
    fn before_compares_across_the_wrap() {
        assert!(before(4, 5));
        assert!(!before(5, 5));
        assert!(!before(6, 5));
        assert!(before(u32::MAX, 1));
        assert!(!before(1, u32::MAX));
        assert_eq!(Flips::next(u32::MAX), 0);
    }
}
