//! The active set as people read it from the kernel: which of the slots the program chooses
//! from are ready, which are chosen while the fleet boots (starting workers, the boot window),
//! and the fallback it chooses from only while none is.
use ck_common::{ActiveSet, SlotState};

/// A group's active set, read from its maps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ActiveLists {
    /// Chosen for new connections, the slot record reading anything but starting.
    pub ready: Vec<u32>,
    /// Chosen for new connections while starting: the fleet is booting.
    pub booting: Vec<u32>,
    /// Chosen only while nothing else is.
    pub fallback: Vec<u32>,
}

impl ActiveLists {
    /// The lists of `set`, each chosen slot's state read with `state` (a `SlotState` code).
    pub fn of(set: &ActiveSet, state: impl Fn(u32) -> Option<u32>) -> ActiveLists {
        let chosen = set.ready_len.min(set.slots.len() as u32) as usize;
        let live = set.live_len.clamp(chosen as u32, set.slots.len() as u32) as usize;
        // With `--slow-start` a slot is listed once per unit of its weight: each counts once.
        let mut seen = std::collections::BTreeSet::new();
        let (booting, ready) = set.slots[..chosen]
            .iter()
            .filter(|slot| seen.insert(**slot))
            .partition(|slot| state(**slot) == Some(SlotState::Starting as u32));
        ActiveLists {
            ready,
            booting,
            fallback: set.slots[chosen..live].to_vec(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chosen starting slots read as booting, the rest of the chosen as ready.
    #[test]
    fn chosen_starting_slots_read_as_booting() {
        let mut set = ActiveSet::EMPTY;
        set.slots[..4].copy_from_slice(&[0, 2, 1, 3]);
        set.ready_len = 3;
        set.live_len = 4;
        let lists = ActiveLists::of(&set, |slot| {
            Some(match slot {
                0 => SlotState::Ready,
                _ => SlotState::Starting,
            } as u32)
        });
        assert_eq!(lists.ready, [0]);
        assert_eq!(lists.booting, [2, 1]);
        assert_eq!(lists.fallback, [3]);
    }

    /// A slot listed several times (its weight, `--slow-start`) reads once, in first place.
    #[test]
    fn a_weighted_slot_reads_once() {
        let mut set = ActiveSet::EMPTY;
        set.slots[..5].copy_from_slice(&[0, 1, 0, 0, 2]);
        set.ready_len = 4;
        set.live_len = 5;
        let lists = ActiveLists::of(&set, |_| Some(SlotState::Ready as u32));
        assert_eq!(lists.ready, [0, 1]);
        assert_eq!(lists.fallback, [2]);
    }
}
