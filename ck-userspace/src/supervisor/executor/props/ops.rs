//! What happens to the fleet in the property test ([`Op`]), and how proptest draws it
//! ([`op`]): the OS's events, the operator's commands and `--adopt`'s listeners.
use proptest::prelude::*;

/// Random things that happen to the fleet.
#[derive(Clone, Debug)]
pub(super) enum Op {
    /// The worker of the n-th live slot exits (`outside`: killed by SIGKILL).
    Exit(usize, bool),
    /// The n-th slot's worker says READY=1 (healthy or not).
    Ready(usize, bool),
    /// Every starting worker says READY=1 before the event loop's next turn (workers that
    /// boot together): each is its own batch, and their readiness events wait in the queue.
    ReadyAll,
    /// STOPPING=1.
    StopMsg(usize),
    /// A health verdict.
    Health(usize, bool),
    /// `ck drain` / `ck undrain`.
    Drain(usize, bool),
    /// The n-th armed timer fires.
    Fire(usize),
    /// `ck scale N`.
    Scale(u32),
    /// A roll starts: of the whole fleet (`ck reload`) when even, else of the n-th serving
    /// slot with a worker (recycling, a long-unhealthy worker).
    Roll(usize),
    /// `ck rollback` (with `--keep-previous`, the release the last reload replaced).
    Rollback,
    /// The next spawn fails; `true`: before the slot's sockets could be opened.
    FailSpawn(bool),
    /// Time passes.
    Wait(u64),
    /// Shutdown.
    Shutdown,
    /// `--adopt`: a process of the n-th live worker's tree listens: adopted as the slot's
    /// socket, or, once the slot has one, steered as a member slot of its own.
    Listen(usize),
    /// `--adopt`: the child holding the n-th slot's adopted socket exits.
    Unadopt(usize),
    /// `--spares`: the supervisor boots spares again.
    SpareDue,
    /// The BPF program loaded (`use_loaded_bpf`): every slot re-published on the fresh maps.
    Loaded,
    /// The n-th leaving slot is read (`groups::held`): the leave's decision may let it
    /// go.
    Finish(usize),
    /// A datagram reaches the n-th slot with an open socket; `true`: the first of a new QUIC
    /// handshake, to the n-th ready-listed slot.
    Datagram(usize, bool),
    /// The n-th QUIC handshake in flight sends again (through `pending`, to its slot).
    HandshakeAgain(usize),
    /// The n-th slot's worker reads every datagram waiting on its socket.
    Read(usize),
    /// The n-th stopping slot went quiet for `--udp-linger` (`leaving`).
    Quiet(usize),
}

pub(super) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6usize, any::<bool>()).prop_map(|(n, o)| Op::Exit(n, o)),
        3 => (0..6usize, prop::bool::weighted(0.8)).prop_map(|(n, h)| Op::Ready(n, h)),
        1 => Just(Op::ReadyAll),
        1 => (0..6usize).prop_map(Op::StopMsg),
        1 => (0..6usize, any::<bool>()).prop_map(|(n, h)| Op::Health(n, h)),
        1 => (0..6usize, any::<bool>()).prop_map(|(n, d)| Op::Drain(n, d)),
        5 => (0..8usize).prop_map(Op::Fire),
        1 => (1..5u32).prop_map(Op::Scale),
        2 => (0..6usize).prop_map(Op::Roll),
        1 => Just(Op::Rollback),
        1 => any::<bool>().prop_map(Op::FailSpawn),
        2 => (0..3000u64).prop_map(Op::Wait),
        1 => Just(Op::Shutdown),
        3 => (0..6usize).prop_map(Op::Listen),
        1 => (0..6usize).prop_map(Op::Unadopt),
        1 => Just(Op::SpareDue),
        1 => Just(Op::Loaded),
        3 => (0..6usize).prop_map(Op::Finish),
        1 => (0..6usize).prop_map(Op::Quiet),
        2 => (0..6usize, any::<bool>()).prop_map(|(n, h)| Op::Datagram(n, h)),
        1 => (0..6usize).prop_map(Op::HandshakeAgain),
        2 => (0..6usize).prop_map(Op::Read),
    ]
}
