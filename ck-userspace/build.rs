//! Builds the BPF program (`ck-ebpf`) for the BPF target with aya-build (nightly, `-Z build-std`,
//! bpf-linker) and leaves the object in `OUT_DIR/ck`, where `bpf` embeds it; nothing without
//! the `bpf-program` feature (the library as xtask and the test harness use it).
use anyhow::{Context as _, anyhow};

fn main() -> anyhow::Result<()> {
    if std::env::var_os("CARGO_FEATURE_BPF_PROGRAM").is_none() {
        return Ok(());
    }
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
