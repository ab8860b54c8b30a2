//! `cargo xtask bench ARGS...`: the launcher of `ck-bench` (the crate `ck-bench`, where the
//! benchmarks live). It sets up what they run — the BPF toolchain and bpffs, the tests'
//! programs (dnsperf, node, ngtcp2, the Python servers), the release `ck` and its examples (and
//! for `footprint`, the static build ck ships) —
//! builds `ck-bench` (profile `harness`: optimised, since its load client shares the CPUs with
//! what it measures) and replaces itself with `ck-bench ARGS...`. `summary` and `--help` need
//! none of the setup.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;

use anyhow::{Context as _, Result, bail};

use crate::toolchain::{self, Bpffs};
use crate::{bpf_caps, cmd, target_dir, test_deps, workspace_cargo, workspace_root};

/// The cargo profile `ck-bench` is built with (see the workspace's Cargo.toml).
const PROFILE: &str = "harness";

/// Sets up, builds, then runs `ck-bench ARGS...` in place of this process.
pub fn launch(args: &[OsString]) -> Result<()> {
    let only_reads = args.first().is_some_and(|a| a == "summary" || a == "help")
        || args.iter().any(|a| a == "--help" || a == "-h");
    if !only_reads {
        if !cmd::is_root() {
            bail!(
                "the benchmarks load ck's BPF programs and need root ({}): run `cargo xtask \
                 bench` as root",
                bpf_caps(true)
            );
        }
        toolchain::ensure(Bpffs::Required)?;
        test_deps::ensure_programs()?;
        test_deps::ensure_py_servers(workspace_root()?)?;
        crate::build(true)?;
        // `footprint` measures ck as it ships too: the static build every package holds.
        if args.iter().any(|a| a == "footprint" || a == "all") {
            crate::dist::build_shipped(workspace_root()?, &target_dir()?)?;
        }
    }
    let mut cargo = workspace_cargo()?;
    cargo.args([
        "build",
        "--profile",
        PROFILE,
        "-p",
        "ck-bench",
        "--bin",
        "ck-bench",
    ]);
    cmd::run(&mut cargo, "see the compiler output above")?;
    let target = target_dir()?;
    let mut bench = cmd::command(target.join(PROFILE).join("ck-bench"));
    bench
        .args(args)
        .current_dir(workspace_root()?)
        // ck-bench finds the release ck and the examples there, and builds `--against`'s there.
        .env("CARGO_TARGET_DIR", &target);
    // exec only returns on failure; on success ck-bench takes over our pid (and Ctrl-C).
    let err = bench.exec();
    Err(err).with_context(|| format!("could not exec `{}`", cmd::describe(&bench)))
}
