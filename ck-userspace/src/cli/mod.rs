//! The parts of the `ck` command line: `ck run`'s options, the control commands and logging.
pub mod control;
pub mod logging;
pub mod run_args;
