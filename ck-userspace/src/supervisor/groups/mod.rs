//! The listen groups and their BPF state. The rule: a socket joins a group's `sockets` map
//! only through [`Group::join`] (which attaches the program when it founds the group); the
//! maps are written only by the publish (`publish`) and the program's loading (`steering`).

pub(super) mod publish;
pub(super) mod steering;

use socket2::Socket;

use crate::bpf::{BpfError, BpfGroup};
use crate::settings::run_config::ListenAddr;

/// One listen group at run time.
pub(crate) struct Group {
    /// Its address.
    pub(in crate::supervisor) addr: ListenAddr,
    /// Its name (`tcp4-8080`).
    pub(in crate::supervisor) name: String,
    /// Its program and maps, once loaded.
    pub(in crate::supervisor) bpf: Option<BpfGroup>,
    /// After an upgrade, until `bpf` is loaded: the pinned counters (see `status`).
    pub(in crate::supervisor) pinned_stats: Option<crate::bpf::PinnedStats>,
    /// The last canary's verdict.
    pub(in crate::supervisor) steering: steering::SteeringCheck,
}

/// How a socket's place in the `sockets` map is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::supervisor) enum Join {
    /// Tagged before it listened (a socket ck opened): placed only.
    Tagged,
    /// Tagged and placed (an adopted socket, or maps loaded fresh).
    Fresh,
    /// Placed unless the pinned map holds it already (after an upgrade or a take-back).
    Resumed,
}

impl Group {
    /// Puts `socket` in slot `index`'s place in the `sockets` map (`how`), and attaches the
    /// program through it when it `founds` the group (the group's first socket: attachment
    /// belongs to the group, and a group founded anew has no program). Without the program,
    /// nothing to do. Both are tried; the first error is returned.
    pub(in crate::supervisor) fn join(
        &mut self,
        index: u32,
        socket: &Socket,
        how: Join,
        founds: bool,
    ) -> Result<(), BpfError> {
        let Some(bpf) = &mut self.bpf else {
            return Ok(());
        };
        let placed = match how {
            Join::Tagged => bpf.place(index, socket),
            Join::Fresh => bpf.insert(index, socket),
            Join::Resumed => bpf.insert_if_absent(index, socket),
        };
        if founds {
            bpf.attach(socket)?;
            tracing::info!(group = %self.name, slot = index, "BPF program attached to the group");
        }
        placed
    }
}
