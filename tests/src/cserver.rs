//! The repository's C example server (`examples/cork-server.c`), built once per test binary
//! with the system's C compiler (`cc`) into the target directory, and the build of any
//! one-file C server the tests run ([`build`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Path of the built `cork-server` (builds it on first use).
///
/// # Panics
/// When `cc` is missing or the build fails (the message says how to fix it).
pub fn cork_server() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            build(
                &root.join("examples/cork-server.c"),
                "examples-c",
                "cork-server",
            )
        })
        .clone()
}

/// Builds the one-file C program `source` with `cc -O2 -Wall` into `target/DIR/NAME` and
/// returns its path. Call it once per test binary and name (the build goes to a name of its
/// own, then is renamed into place).
///
/// # Panics
/// When `cc` is missing or the build fails (the message says how to fix it).
pub fn build(source: &Path, dir: &str, name: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = root.join("target").join(dir);
    std::fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("creating {}: {e}", out_dir.display()));
    // One build per test binary: a name of its own, then an atomic rename.
    let tmp = out_dir.join(format!("{name}.{}", std::process::id()));
    let status = Command::new("cc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&tmp)
        .arg(source)
        .status()
        .expect("running cc (install a C compiler: apt-get install gcc)");
    assert!(status.success(), "cc failed to build {}", source.display());
    let built = out_dir.join(name);
    std::fs::rename(&tmp, &built).expect("installing the built server");
    built
}
