//! The share of new connections the kernel's maps give some slots now (a canary's, as
//! `ck status` and `/metrics` show it): read back from what the program picks by, never
//! from what was asked.
use ck_common::{policy, sticky::NO_SLOT};

use super::BpfGroup;

impl BpfGroup {
    /// The share (0 to 1) of new connections, or of a UDP group's new flows, that the live
    /// half of the maps gives `slots`: their positions in the consistent table where the
    /// program picks by it (a canary by client, `--policy sticky`, a UDP group's new flows),
    /// else their entries in the ready list (round-robin and hash pick positions of it;
    /// least-conn and least-queue draw their candidates from it). None when the maps cannot
    /// be read or name no ready slot.
    pub fn share_of(&self, slots: &[u32]) -> Option<f64> {
        let config = self.config_map.get(&0, 0).ok()?;
        let half = config.live_half & 1;
        let (named, theirs) = if config.policy == policy::STICKY || self.udp.is_some() {
            let table = self.sticky.read(half)?;
            let named = table.slots.iter().filter(|s| **s != NO_SLOT);
            let theirs = named.clone().filter(|s| slots.contains(&u32::from(**s)));
            (named.count(), theirs.count())
        } else {
            let set = self.active.get(&half, 0).ok()?;
            let ready = &set.slots[..(set.ready_len as usize).min(set.slots.len())];
            let theirs = ready.iter().filter(|s| slots.contains(s)).count();
            (ready.len(), theirs)
        };
        (named > 0).then(|| theirs as f64 / named as f64)
    }
}
