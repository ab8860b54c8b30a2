//! `cargo xtask`: developer tasks for ck — `build`, `run`, `test`, `bench`, `promises`, `soak`, `fleet`, `fuzz`, `docs` and `dist`.
//!
//! Every task first runs [`toolchain::ensure`], which installs what building the BPF program
//! needs (nightly + rust-src, LLVM 22, bpf-linker, bpftool) and mounts the bpffs, printing one
//! `xtask: ...` line per thing it actually does.

mod bench;
mod cmd;
mod dist;
mod docs;
mod fuzz;
mod multi_host;
mod nextest;
mod promises;
mod soak;
mod tally;
mod test;
mod test_deps;
mod toolchain;

use std::env;
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{self, Command};

use anyhow::{Context as _, Result, anyhow, bail};
use clap::{Parser, Subcommand};

use crate::toolchain::Bpffs;

/// The capabilities ck's BPF programs need (with `--adopt`'s when `adopt`), from ck's own
/// list: `CAP_BPF and CAP_PERFMON`.
fn bpf_caps(adopt: bool) -> String {
    use ck::os::capabilities::{names, needed_for_bpf};
    names(&needed_for_bpf(adopt))
}

/// The message for a non-root user without sudo who wants `ck run ARGS` to load the BPF
/// program.
fn need_root(args: &[OsString]) -> String {
    let adopt = args.iter().any(|a| a == "--adopt");
    format!(
        "ck needs root ({}) to load its BPF program: run as root, or pass --no-bpf",
        bpf_caps(adopt)
    )
}

/// Developer tasks for ck.
#[derive(Parser, Debug)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "Developer tasks for ck"
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Set up the toolchain and build the `ck` binary (with its embedded BPF program).
    Build {
        /// Build with the release profile.
        #[arg(long)]
        release: bool,
    },
    /// Build `ck` and run `ck run ARGS...`, as root (through `sudo -E` if needed).
    Run {
        /// Build and run the release binary.
        #[arg(long)]
        release: bool,
        /// Arguments for `ck run` (put them after `--`); `--no-bpf` runs without root.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// The whole suite as root, every part run even after another failed: `cargo fmt --check`,
    /// clippy with `-D warnings`, `docs --check`, every test binary under cargo-nextest (each
    /// test stopped at its time limit), the doc tests, each fuzz target for a few seconds and
    /// README's promises on the release build; one closing line says how each part went. With
    /// ARGS, only `cargo nextest run ARGS...`.
    Test {
        /// Arguments for `cargo nextest run` (put them after `--`), e.g. `--test NAME`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Build the release `ck` (and what the benchmarks run) and run `ck-bench ARGS...` as
    /// root: `cargo xtask bench SCENARIO [--rounds N] [--record] [--against REV]`, `cargo
    /// xtask bench summary [--check]`; `cargo xtask bench -- --help` lists the scenarios.
    Bench {
        /// Arguments for `ck-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Build the release `ck` and check README's headline promises on it (needs root): each
    /// beside the README section that makes it; fails if one is broken.
    Promises {
        /// Only the promises whose name contains this (e.g. `server-go`, `counts`).
        #[arg(long, value_name = "NAME")]
        only: Option<String>,
    },
    /// Build `ck` and run one check of the tests many times (needs root): each run's count
    /// and the total; fails if any run counted a failure.
    Soak {
        /// Which check.
        #[arg(value_enum)]
        check: soak::Check,
        /// How many runs.
        #[arg(long, default_value_t = 10)]
        runs: u32,
    },
    /// Build `ck` and run three ck hosts in network namespaces behind HAProxy (`mode tcp`,
    /// `mode http`) and a Kubernetes Service's nftables DNAT, with operators' health-check
    /// timings, through every fleet scenario (needs root); prints one table per front.
    Fleet {
        /// Which front.
        #[arg(long, value_enum, default_value = "all")]
        front: multi_host::Front,
    },
    /// Fuzz ck's parsers of untrusted input (cargo-fuzz, nightly): every target, or TARGET.
    Fuzz {
        /// One target (default: all of them, one after the other).
        target: Option<String>,
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        secs: u64,
    },
    /// Build `ck`, regenerate the reference from it (`docs/src/reference/`, `docs/man/`) and
    /// build the mdBook in `docs/` into `target/book` (mdbook installed when missing).
    Docs {
        /// Only check: regenerate into a scratch directory and fail, naming each stale file,
        /// if the committed reference differs.
        #[arg(long)]
        check: bool,
    },
    /// Build the static release `ck` (musl, BPF program embedded) and package it:
    /// `ck-VERSION-x86_64-linux.tar.gz` (ck, systemd unit, man pages, completions, examples,
    /// README), a `.deb` (cargo-deb) that installs the same under /usr, the npm packages
    /// `ck-supervisor` and `ck-supervisor-linux-x64` (`.tgz`) and the wheel `ck-supervisor`
    /// (maturin). Publishes nothing.
    Dist {
        /// Where the files go (relative to the current directory; default `target/dist`).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Also build for this machine (cross-built; repeatable): `aarch64` adds the tarball,
        /// the npm package `ck-supervisor-linux-arm64` and the wheel for 64-bit Arm.
        #[arg(long = "target", value_name = "MACHINE")]
        targets: Vec<dist::cross::Arch>,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(err) = dispatch(cli.task) {
        // `{:#}` prints the context chain on one line, without a backtrace.
        eprintln!("error: {err:#}");
        process::exit(1);
    }
}

/// Runs one task; `run` and `test` only return on failure (they exec or exit).
fn dispatch(task: Task) -> Result<()> {
    match task {
        Task::Build { release } => {
            toolchain::ensure(Bpffs::Optional)?;
            build(release).map(drop)
        }
        Task::Run { release, args } => run(release, args),
        Task::Test { args } => test::run(args),
        Task::Bench { args } => bench::launch(&args),
        Task::Promises { only } => {
            if !cmd::is_root() {
                bail!(
                    "the promises run ck with its BPF programs and real servers: run `cargo \
                     xtask promises` as root ({})",
                    bpf_caps(true)
                );
            }
            toolchain::ensure(Bpffs::Required)?;
            test_deps::ensure(workspace_root()?)?;
            let kept = promises::run(&build(true)?, only.as_deref())?;
            println!("promises: {kept}");
            Ok(())
        }
        Task::Soak { check, runs } => {
            if !cmd::is_root() {
                bail!("the checks load ck's BPF programs: run `cargo xtask soak` as root");
            }
            toolchain::ensure(Bpffs::Required)?;
            build(false)?;
            soak::run(check, runs)
        }
        Task::Fleet { front } => {
            if !cmd::is_root() {
                bail!(
                    "the fleet creates network namespaces and loads ck's BPF programs: run \
                     `cargo xtask fleet` as root"
                );
            }
            toolchain::ensure(Bpffs::Required)?;
            test_deps::ensure(workspace_root()?)?;
            build(false)?;
            multi_host::run(front, &target_dir()?.join("bench"))
        }
        Task::Fuzz { target, secs } => {
            toolchain::ensure(Bpffs::Optional)?;
            let targets = match target {
                Some(name) => vec![fuzz::target(&name)?],
                None => fuzz::TARGETS.to_vec(),
            };
            fuzz::run(workspace_root()?, &targets, secs).map(drop)
        }
        Task::Docs { check } => {
            toolchain::ensure(Bpffs::Optional)?;
            let ck = build(false)?;
            docs::run(&ck, &workspace_root()?.join("docs"), &target_dir()?, check)
        }
        Task::Dist { out, targets } => {
            toolchain::ensure(Bpffs::Optional)?;
            let target = target_dir()?;
            let out = match out {
                Some(dir) => env::current_dir()
                    .context("reading the current directory")?
                    .join(dir),
                None => target.join("dist"),
            };
            dist::run(workspace_root()?, &target, &out, &targets)
        }
    }
}

/// How a task that needs root gets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Privilege {
    /// Already root, or root is not needed.
    AsIs,
    /// Not root, but `sudo` is available.
    Sudo,
}

/// Decides how to get root, failing with `why` when we are not root and have no sudo.
fn privilege(needs_root: bool, why: &str) -> Result<Privilege> {
    if !needs_root || cmd::is_root() {
        Ok(Privilege::AsIs)
    } else if cmd::find_program("sudo", &[]).is_some() {
        Ok(Privilege::Sudo)
    } else {
        bail!("{why}")
    }
}

/// The workspace root: the parent of this crate's directory.
pub(crate) fn workspace_root() -> Result<&'static Path> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or_else(|| anyhow!("xtask's manifest dir has no parent"))
}

/// The cargo target directory: `$CARGO_TARGET_DIR` (made absolute) or `<workspace>/target`.
fn target_dir() -> Result<PathBuf> {
    match env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                Ok(dir)
            } else {
                Ok(env::current_dir()
                    .context("reading the current directory")?
                    .join(dir))
            }
        }
        None => Ok(workspace_root()?.join("target")),
    }
}

/// A `cargo` command run in the workspace root with the target dir pinned to [`target_dir`].
fn workspace_cargo() -> Result<Command> {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(workspace_root()?)
        .env("CARGO_TARGET_DIR", target_dir()?);
    Ok(cargo)
}

/// `cargo build [--release] -p ck-userspace -p ck-worker -p ck-example-rust -p ck-example-quic
/// --bin ck --bin ck-example-rust --bin ck-example-quic --examples` (ck, and the Rust workers the
/// tests and benches run: ck-worker's examples, `examples/rust`, and `examples/quic`'s HTTP/3
/// server and client); returns the path of ck.
fn build(release: bool) -> Result<PathBuf> {
    let mut cargo = workspace_cargo()?;
    cargo.arg("build");
    if release {
        cargo.arg("--release");
    }
    cargo.args([
        "-p",
        "ck-userspace",
        "-p",
        "ck-worker",
        "-p",
        "ck-example-rust",
        "-p",
        "ck-example-quic",
        "--bin",
        "ck",
        "--bin",
        "ck-example-rust",
        "--bin",
        "ck-example-quic",
        "--examples",
    ]);
    cmd::run(
        &mut cargo,
        "see the compiler output above; `cargo xtask build` sets up nightly, rust-src, \
         llvm-22-dev and bpf-linker",
    )?;
    let profile = if release { "release" } else { "debug" };
    Ok(target_dir()?.join(profile).join("ck"))
}

/// `cargo xtask run`: set up, build, then replace this process with `ck run ARGS...`.
fn run(release: bool, args: Vec<OsString>) -> Result<()> {
    let no_bpf = args.iter().any(|a| a == "--no-bpf");
    let privilege = privilege(!no_bpf, &need_root(&args))?;
    toolchain::ensure(if no_bpf {
        Bpffs::Optional
    } else {
        Bpffs::Required
    })?;
    let bin = build(release)?;

    let mut ck = match privilege {
        Privilege::AsIs => cmd::command(&bin),
        Privilege::Sudo => {
            let mut sudo = cmd::command("sudo");
            sudo.arg("-E").arg(&bin);
            sudo
        }
    };
    ck.arg("run").args(&args);
    // exec only returns on failure; on success ck takes over our pid, so signals go to it.
    let err = ck.exec();
    Err(err).with_context(|| format!("could not exec `{}`", cmd::describe(&ck)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn run_passes_args_after_double_dash() {
        let cli = Cli::try_parse_from(["xtask", "run", "--release", "--", "--no-bpf", "-c", "x"])
            .unwrap();
        match cli.task {
            Task::Run { release, args } => {
                assert!(release);
                assert_eq!(args, ["--no-bpf", "-c", "x"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn run_accepts_ck_flags_without_double_dash() {
        let cli = Cli::try_parse_from(["xtask", "run", "--no-bpf", "--workers", "4"]).unwrap();
        match cli.task {
            Task::Run { release, args } => {
                assert!(!release);
                assert_eq!(args, ["--no-bpf", "--workers", "4"]);
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn test_passes_nested_double_dash_to_cargo() {
        let cli =
            Cli::try_parse_from(["xtask", "test", "--", "-p", "ck-tests", "--", "--nocapture"])
                .unwrap();
        match cli.task {
            Task::Test { args } => assert_eq!(args, ["-p", "ck-tests", "--", "--nocapture"]),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn bench_passes_its_arguments_on() {
        let cli =
            Cli::try_parse_from(["xtask", "bench", "stall", "--rounds", "2", "--record"]).unwrap();
        match cli.task {
            Task::Bench { args } => assert_eq!(args, ["stall", "--rounds", "2", "--record"]),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn soak_takes_a_check_and_a_number_of_runs() {
        for (args, want) in [
            (&["xtask", "soak", "udp"][..], 10),
            (&["xtask", "soak", "udp", "--runs", "3"][..], 3),
        ] {
            match Cli::try_parse_from(args).unwrap().task {
                Task::Soak { check, runs } => assert_eq!((check, runs), (soak::Check::Udp, want)),
                other => panic!("parsed as {other:?}"),
            }
        }
        assert!(Cli::try_parse_from(["xtask", "soak", "tcp"]).is_err());
    }

    #[test]
    fn fleet_takes_a_front() {
        for (args, want) in [
            (&["xtask", "fleet"][..], multi_host::Front::All),
            (
                &["xtask", "fleet", "--front", "service"][..],
                multi_host::Front::Service,
            ),
        ] {
            match Cli::try_parse_from(args).unwrap().task {
                Task::Fleet { front } => assert_eq!(front, want),
                other => panic!("parsed as {other:?}"),
            }
        }
        assert!(Cli::try_parse_from(["xtask", "fleet", "--front", "ipvs"]).is_err());
    }

    #[test]
    fn fuzz_takes_an_optional_target_and_seconds() {
        let cli = Cli::try_parse_from(["xtask", "fuzz", "notify_message", "--secs", "3"]).unwrap();
        match cli.task {
            Task::Fuzz { target, secs } => {
                assert_eq!(target.as_deref(), Some("notify_message"));
                assert_eq!(secs, 3);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(fuzz::target("nope").is_err());
    }

    #[test]
    fn dist_takes_an_optional_output_directory() {
        let cli = Cli::try_parse_from(["xtask", "dist"]).unwrap();
        match cli.task {
            Task::Dist { out, targets } => assert_eq!((out, targets), (None, vec![])),
            other => panic!("parsed as {other:?}"),
        }
        let cli = Cli::try_parse_from(["xtask", "dist", "--out", "/tmp/d", "--target", "aarch64"])
            .unwrap();
        match cli.task {
            Task::Dist { out, targets } => {
                assert_eq!(out, Some("/tmp/d".into()));
                assert_eq!(targets, [dist::cross::Arch::Aarch64]);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["xtask", "dist", "--target", "mips"]).is_err());
        assert!(Cli::try_parse_from(["xtask", "dist", "extra"]).is_err());
    }

    #[test]
    fn root_messages_name_what_ck_needs() {
        let plain = need_root(&["--workers".into(), "2".into()]);
        assert!(plain.contains("(CAP_BPF and CAP_PERFMON)"), "{plain}");
        let adopt = need_root(&["--adopt".into()]);
        assert!(
            adopt.contains("(CAP_BPF, CAP_PERFMON and CAP_NET_ADMIN)"),
            "{adopt}"
        );
    }

    #[test]
    fn workspace_root_has_manifest() {
        assert!(workspace_root().unwrap().join("Cargo.toml").is_file());
    }
}
