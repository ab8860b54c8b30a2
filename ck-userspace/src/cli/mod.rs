//! The parts of the `ck` command line: the control commands (`ck reload`'s canary options
//! among them), waiting for an instance (`ck
//! status --wait`, `ck stop --wait`), the text of `ck status`, `ck top`, `ck maps`, logging,
//! and the man pages and completions of `ck man` and `ck completions` (`ck run`'s options, its
//! config file under them and the messages of a refused command line are the library's
//! `ck::settings`).
pub mod control;
pub mod docs;
pub mod finder;
pub mod logging;
pub mod maps;
pub mod reload;
pub mod status_text;
pub mod stdout;
pub mod stop;
pub mod top;
pub mod upgrade_check;
pub mod wait_ready;
