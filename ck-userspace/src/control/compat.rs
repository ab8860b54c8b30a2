//! What a binary must share with the running ck to take over from it (`ck upgrade`): the
//! handover's format and the pinned maps' layout, as the [`Compat`] answer a candidate binary
//! gives (`ck upgrade-check`) before ck agrees to exec it.
use serde::{Deserialize, Serialize};

/// Version of the handover format (`supervisor::continuity::handover::Handover`); a new image takes over only the format it knows.
/// 2: `--adopt`'s member slots, their owners and where adopted sockets live (an image of
/// format 1 would drop them).
pub const FORMAT: u32 = 2;

/// What a binary must share with the running ck to take over from it: the handover format
/// and the layout of the pinned maps (the program keeps reading them across the exec). A ck
/// binary prints its own with `ck upgrade-check`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compat {
    /// The binary's version (`ck --version`).
    pub ck: String,
    /// Its [`FORMAT`].
    pub format: u32,
    /// Its map layout ([`map_layout`]).
    pub maps: String,
}

impl Compat {
    /// This binary's.
    pub fn this() -> Compat {
        Compat {
            ck: crate::VERSION.to_string(),
            format: FORMAT,
            maps: map_layout(),
        }
    }

    /// Why `other` (a candidate binary's answer) cannot take over from this binary, if it
    /// cannot.
    pub fn refuses(&self, other: &Compat) -> Option<String> {
        if other.format != self.format {
            return Some(format!(
                "it reads handover format {} and this ck writes format {}",
                other.format, self.format
            ));
        }
        if other.maps != self.maps {
            return Some(format!(
                "its BPF map layout ({}) differs from the pinned maps' ({})",
                other.maps, self.maps
            ));
        }
        None
    }
}

/// The layout of the pinned maps as one line: slot count and value sizes, map names.
pub fn map_layout() -> String {
    use std::mem::size_of;
    format!(
        "slots={} slot={}B active={}B config={}B stats={}B sticky={}B conn_tag={}B moved={}B pending={}B flips=counted maps={}",
        ck_common::MAX_SLOTS,
        size_of::<ck_common::SlotInfo>(),
        size_of::<ck_common::ActiveSet>(),
        size_of::<ck_common::Config>(),
        size_of::<ck_common::SlotEvents>(),
        size_of::<ck_common::sticky::StickyTable>(),
        size_of::<ck_common::ConnTag>(),
        size_of::<ck_common::MovedConn>(),
        size_of::<ck_common::udp::Handshake>(),
        crate::bpf::PINNED_MAPS.join(",")
    )
}
