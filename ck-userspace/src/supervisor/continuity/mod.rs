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
