//! How a fleet outlives the ck process that runs it: `ck upgrade` (re-exec in place with a
//! handover), `--survive-supervisor` (a state file, the take-back by the next `ck run`, and the
//! orphan guard), and where a run starts from (fresh, a handover, a dead ck's state).
pub(super) mod handover;
pub(super) mod instant_age;
pub(super) mod origin;
pub mod orphan_guard;
pub(super) mod output_back;
pub(super) mod resume;
pub(super) mod survive;
pub(super) mod upgrade;

/// What outlives one image of ck.
pub(in crate::supervisor) struct Continuity {
    /// The binary ck was first started from (the default of `ck upgrade`).
    pub exe: std::path::PathBuf,
    /// Upgrades in place so far.
    pub upgrades: u32,
    /// The upgrade under way.
    pub upgrade: Option<upgrade::Upgrade>,
    /// How the last upgrade went (for `ck status`).
    pub last_upgrade: Option<String>,
    /// Lifecycle timers armed and not fired yet (handed over by an upgrade).
    pub timers: Vec<handover::Armed>,
    /// The program being loaded is for maps an earlier image pinned and filled (`ck upgrade`,
    /// or a ck that died, with `--survive-supervisor`).
    pub bpf_resumed: bool,
    /// The state changed since the state file was last written (`--survive-supervisor`).
    pub state_dirty: bool,
}
