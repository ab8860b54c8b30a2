//! The parts of the `ck` command line: `ck run`'s options, its config file under them, the
//! control commands and logging.
pub mod config_layers;
pub mod control;
pub mod logging;
pub mod run_args;
