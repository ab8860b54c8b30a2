//! Builds the BPF program (`ck-ebpf`) for the BPF target with aya-build (nightly, `-Z build-std`,
//! bpf-linker) and leaves the object in `OUT_DIR/ck`, where `bpf` embeds it; nothing without
//! the `bpf-program` feature (the library as xtask and the test harness use it). Always sets
//! what `ck --version` prints besides the version: `CK_GIT_COMMIT` (the short commit, `-dirty`
//! when the work tree has changes, `unknown` outside git, e.g. in a source tarball) and
//! `CK_BPF_SHA256` (the first 12 hex digits of the SHA-256 of the embedded object, `none`
//! without it).
use std::{path::Path, process::Command};

use anyhow::{Context as _, anyhow};
use sha2::{Digest as _, Sha256};

fn main() -> anyhow::Result<()> {
    let commit = git_commit();
    println!("cargo:rustc-env=CK_GIT_COMMIT={commit}");
    if std::env::var_os("CARGO_FEATURE_BPF_PROGRAM").is_none() {
        println!("cargo:rustc-env=CK_BPF_SHA256=none");
        return Ok(());
    }
    build_bpf()?;
    let out_dir = std::env::var_os("OUT_DIR").ok_or_else(|| anyhow!("OUT_DIR not set"))?;
    let object = Path::new(&out_dir).join("ck");
    let bytes = std::fs::read(&object).with_context(|| format!("reading {}", object.display()))?;
    println!("cargo:rustc-env=CK_BPF_SHA256={}", short_sha256(&bytes));
    Ok(())
}

/// The first 12 hex digits of the SHA-256 of `bytes` (what `ck --version` shows of the
/// program; `sha256sum` of the object starts with the same).
fn short_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `git rev-parse --short HEAD` of the checkout this crate is in, `-dirty` appended when
/// `git status --porcelain` lists anything; `unknown` when git or the repository is missing.
/// Asks cargo to run this again when HEAD, the branch it names, or the index moves, and when a
/// source the binary is built from changes (the dirty state).
fn git_commit() -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    let mut watched = vec!["HEAD".to_string(), "index".into(), "packed-refs".into()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // The crates the binary is built from; cargo looks at every file under a directory.
    for dir in [
        "src",
        "../ck-common",
        "../ck-ebpf",
        "../ck-worker/src",
        "../Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={dir}");
    }
    match git(&[
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--untracked-files=no",
    ]) {
        Some(changes) if !changes.is_empty() => format!("{commit}-dirty"),
        _ => commit,
    }
}

/// aya-build: `ck-ebpf` for the BPF target, into `OUT_DIR/ck`.
fn build_bpf() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let package = metadata
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "ck-ebpf")
        .ok_or_else(|| anyhow!("ck-ebpf package not found in the workspace"))?;
    let root_dir = package
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", package.manifest_path))?;
    aya_build::build_ebpf(
        [aya_build::Package {
            name: "ck-ebpf",
            root_dir: root_dir.as_str(),
            ..Default::default()
        }],
        aya_build::Toolchain::default(),
    )
    .context(
        "building the BPF program failed; `cargo xtask build` installs what it needs \
         (nightly rust-src, llvm-22-dev, bpf-linker)",
    )
}
