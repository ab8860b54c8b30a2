//! The compiled BPF object embedded in ck, loaded for the programs beside `ck_select`, and how
//! a map is taken out of a loaded object ([`take`]).
use anyhow::Context as _;
use aya::Ebpf;

use super::error::{BpfError, load_err};

/// The compiled `ck-ebpf` object, embedded at build time by `build.rs`.
#[cfg(feature = "bpf-program")]
pub static BPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ck"));
/// Empty: the library was built without the `bpf-program` feature (as xtask and the test
/// harness use it).
#[cfg(not(feature = "bpf-program"))]
pub static BPF_OBJECT: &[u8] = &[];

/// The first 12 hex digits of the SHA-256 of [`BPF_OBJECT`] (computed by `build.rs`; `sha256sum`
/// of the object file starts with them), `none` without the `bpf-program` feature.
pub const OBJECT_SHA256: &str = env!("CK_BPF_SHA256");

/// [`BPF_OBJECT`], or why this build has none.
pub(super) fn object() -> anyhow::Result<&'static [u8]> {
    anyhow::ensure!(
        !BPF_OBJECT.is_empty(),
        "this ck was built without its BPF program (ck-userspace's `bpf-program` feature is \
         off): build it with its default features (`cargo xtask build`), or run with --no-bpf"
    );
    Ok(BPF_OBJECT)
}

/// The object loaded for one of the programs beside `ck_select` (the `--adopt` hooks, the exit
/// watch): maps created, no program loaded yet, aya-log's level off, no BTF relocation.
pub(crate) fn load_object() -> anyhow::Result<aya::Ebpf> {
    let off: u8 = 0;
    aya::EbpfLoader::new()
        .btf(None)
        .override_global(aya_log::LEVEL, &off, true)
        .load(object()?)
        .map_err(|e| anyhow::anyhow!("loading the BPF object: {e}"))
}

/// Takes map `name` out of `ebpf` as a `T`.
pub(crate) fn take<T>(ebpf: &mut Ebpf, name: &str) -> Result<T, BpfError>
where
    T: TryFrom<aya::maps::Map>,
    <T as TryFrom<aya::maps::Map>>::Error: std::error::Error + Send + Sync + 'static,
{
    let map = ebpf
        .take_map(name)
        .with_context(|| format!("map {name} missing"))
        .map_err(load_err("taking maps"))?;
    T::try_from(map)
        .with_context(|| format!("map {name} has an unexpected type"))
        .map_err(load_err("taking maps"))
}
