//! Apps for `ck run ... -- APP`: executable shell scripts in a test's temporary directory,
//! mostly wrappers that run `ck demo-worker` with special options on one slot, or while a
//! marker file exists, and a plain `ck demo-worker` otherwise.

use std::path::{Path, PathBuf};

use crate::ck::ck_bin;
use crate::sys::TempDir;

/// Writes an executable `sh` script `name` with `body` (after the `#!/bin/sh` line) in `dir`.
pub fn script(dir: &TempDir, name: &str, body: &str) -> PathBuf {
    dir.write(name, &format!("#!/bin/sh\n{body}\n"), true)
}

/// Writes `app.sh` to `dir`: it runs `ck demo-worker SPECIAL` when the shell test `cond`
/// (e.g. `[ "$CK_SLOT" = 1 ]`) holds, and a plain `ck demo-worker` otherwise. Returns its path.
pub fn demo_app(dir: &TempDir, cond: &str, special: &str) -> String {
    let body = format!(
        "if {cond}; then exec '{ck}' demo-worker {special}; fi\nexec '{ck}' demo-worker",
        ck = ck_bin().display()
    );
    script(dir, "app.sh", &body)
        .to_str()
        .expect("UTF-8 temp path")
        .to_string()
}

/// [`demo_app`] that runs `ck demo-worker SPECIAL` on slot `slot` (`$CK_SLOT`).
pub fn demo_app_on_slot(dir: &TempDir, slot: u32, special: &str) -> String {
    demo_app(dir, &format!("[ \"$CK_SLOT\" = {slot} ]"), special)
}

/// [`demo_app`] that runs `ck demo-worker SPECIAL` while the file `marker` exists (a test
/// creates it to change what the next workers do, e.g. before a reload).
pub fn demo_app_with_marker(dir: &TempDir, marker: &Path, special: &str) -> String {
    demo_app(dir, &format!("[ -e '{}' ]", marker.display()), special)
}
