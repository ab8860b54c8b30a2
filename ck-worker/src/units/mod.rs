//! The parsers of human-friendly option values, shared by ck's own options and the demo
//! worker's: durations (`500ms`, `2.5s`, `1m`) and memory sizes (`512M`, `2G`).
pub mod duration;
pub mod size;
