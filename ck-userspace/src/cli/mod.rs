//! The parts of the `ck` command line: the control commands, the text of `ck status`, `ck top`,
//! `ck maps`, logging, and the man pages and completions of `ck man` and `ck completions`
//! (`ck run`'s options and its config file under them are the library's `ck::settings`).
pub mod control;
pub mod docs;
pub mod logging;
pub mod maps;
pub mod status_text;
pub mod stdout;
pub mod top;
