//! The parts of the `ck` command line: `ck run`'s options, its config file under them, the
//! control commands, the text of `ck status`, `ck top`, `ck maps` and logging.
pub mod config_layers;
pub mod control;
pub mod logging;
pub mod maps;
pub mod run_args;
pub mod status_text;
pub mod top;
