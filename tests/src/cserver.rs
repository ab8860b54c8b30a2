//! The repository's C example server (`examples/cork-server.c`), built once per test binary
//! with the system's C compiler (`cc`) into the target directory.

use std::path::PathBuf;
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
            let source = root.join("examples/cork-server.c");
            let out_dir = root.join("target/examples-c");
            std::fs::create_dir_all(&out_dir).expect("creating target/examples-c");
            // One build per test binary: a name of its own, then an atomic rename.
            let tmp = out_dir.join(format!("cork-server.{}", std::process::id()));
            let status = Command::new("cc")
                .args(["-O2", "-Wall", "-o"])
                .arg(&tmp)
                .arg(&source)
                .status()
                .expect("running cc (install a C compiler: apt-get install gcc)");
            assert!(status.success(), "cc failed to build {}", source.display());
            let built = out_dir.join("cork-server");
            std::fs::rename(&tmp, &built).expect("installing the built server");
            built
        })
        .clone()
}
