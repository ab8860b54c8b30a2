//! `cargo xtask dist`: ck as one static file, a Debian package, npm packages and a Python wheel.
//!
//! Builds the release `ck` for `x86_64-unknown-linux-musl` (statically linked, its BPF object
//! embedded as in every build: `ck-userspace/build.rs` builds it for the BPF target on the
//! host), and with `--target aarch64` also for `aarch64-unknown-linux-musl` ([`cross`]); checks
//! that each has no program interpreter, has it write its own man pages and shell completions
//! (`ck man`, `ck completions`: from its real clap definition), and packs, per machine,
//! `ck-<version>-<machine>-linux.tar.gz` (ck, the systemd units of `deploy/`, the man pages, the
//! completions, `examples/`, README), the npm packages ([`npm`]) and the wheel ([`wheel`]); and,
//! for x86_64, a `.deb` (cargo-deb, with `[package.metadata.deb]` of `ck-userspace/Cargo.toml`)
//! that installs the same files under `/usr`. Nothing is published: the files are for `npm
//! install -g ./FILE.tgz`, `pip install ./FILE.whl`, `dpkg -i` and upload by hand. Installs the
//! musl target, cargo-deb and maturin when missing, with one `xtask: ...` line each.

pub mod cross;
mod npm;
mod wheel;

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command};
use cross::Arch;

/// The static target of the build machine (the `.deb`'s, and the `ck` that writes the docs).
pub const MUSL: &str = "x86_64-unknown-linux-musl";
/// Where the generated files the `.deb` takes go, under the musl release directory: cargo-deb's
/// `target/release/` prefix in `[package.metadata.deb]` assets names that directory.
const DEB_ASSETS: &str = "dist-assets";
/// Names in `examples/` that are build or install output, not examples: never shipped.
const NOT_SHIPPED: [&str; 4] = ["node_modules", "target", "__pycache__", "vendor"];

/// Builds everything into `out` (created if missing) for x86_64 and the `extra` machines and
/// prints each file's path; `target` is cargo's target directory.
pub fn run(workspace: &Path, target: &Path, out: &Path, extra: &[Arch]) -> Result<()> {
    let mut arches = vec![Arch::X86_64];
    arches.extend(extra.iter().filter(|a| **a != Arch::X86_64));
    arches.sort();
    arches.dedup();
    for arch in &arches {
        arch.ensure_tools()?;
    }
    ensure_cargo_deb()?;
    if cmd::find_program("npm", &[]).is_none() {
        bail!("the npm packages are packed with npm: install it (`apt-get install -y npm`)");
    }
    let maturin = wheel::ensure_maturin(target)?;
    let mut binaries = Vec::new();
    for arch in &arches {
        binaries.push((*arch, build_static(workspace, target, *arch)?));
    }
    let ck = Arch::X86_64.release_dir(target).join("ck");
    let version = version_of(&ck)?;
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let mut made = Vec::new();
    for (arch, binary) in &binaries {
        made.push(tarball(workspace, out, &version, *arch, binary, &ck)?);
    }
    made.push(deb(workspace, target, out, &ck)?);
    made.extend(npm::build(workspace, out, &version, &binaries)?);
    for arch in &arches {
        made.push(wheel::build(&maturin, workspace, target, out, *arch)?);
    }
    for file in made {
        println!("{}", file.display());
    }
    Ok(())
}

/// `ck-<version>-<machine>-linux.tar.gz` of `binary` in `out`: the docs are written by `ck`
/// (the build machine's own build; the same for every machine).
fn tarball(
    workspace: &Path,
    out: &Path,
    version: &str,
    arch: Arch,
    binary: &Path,
    ck: &Path,
) -> Result<PathBuf> {
    let name = format!("ck-{version}-{}-linux", arch.name());
    let stage = out.join(&name);
    fresh_dir(&stage)?;
    copy(binary, &stage.join("ck"))?;
    generate_docs(ck, &stage)?;
    for unit in units(workspace)? {
        copy(
            &unit,
            &stage.join(unit.file_name().expect("a unit file name")),
        )?;
    }
    for doc in [
        "README.md",
        "LICENSE",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "CHANGELOG.md",
    ] {
        let path = workspace.join(doc);
        if path.is_file() {
            copy(&path, &stage.join(doc))?;
        }
    }
    copy_tree(&workspace.join("examples"), &stage.join("examples"))?;
    let tarball = out.join(format!("{name}.tar.gz"));
    cmd::run(
        command("tar")
            .arg("-czf")
            .arg(&tarball)
            .arg("-C")
            .arg(out)
            .args(["--owner=0", "--group=0", "--numeric-owner"])
            .arg(&name),
        "install GNU tar (`apt-get install -y tar`)",
    )?;
    fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    Ok(tarball)
}

/// The `.deb` of the x86_64 `ck` in `out`, with the generated files it takes staged first.
fn deb(workspace: &Path, target: &Path, out: &Path, ck: &Path) -> Result<PathBuf> {
    let assets = Arch::X86_64.release_dir(target).join(DEB_ASSETS);
    fresh_dir(&assets)?;
    generate_docs(ck, &assets)?;
    for unit in units(workspace)? {
        let text =
            fs::read_to_string(&unit).with_context(|| format!("reading {}", unit.display()))?;
        let file = assets.join(unit.file_name().expect("a unit file name"));
        fs::write(&file, packaged_unit(&text))
            .with_context(|| format!("writing {}", file.display()))?;
    }
    copy_tree(&workspace.join("examples"), &assets.join("examples"))?;
    build_deb(workspace, target, out)
}

/// Installs cargo-deb, unless it is on the PATH (or in cargo's bin directory).
fn ensure_cargo_deb() -> Result<()> {
    if cmd::find_program("cargo-deb", &[]).is_some() {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-deb (cargo install cargo-deb --locked, takes ~3 min)");
    cmd::run(
        cmd::cargo().args(["install", "cargo-deb", "--locked"]),
        "see the cargo output above; cargo-deb is built from crates.io",
    )
}

/// `cargo build --release --target <arch's musl> -p ck-userspace --bin ck`; returns the binary,
/// checked to be static.
/// The static x86_64 build every package ships, with its target installed when missing (for
/// `bench footprint`, which measures it).
pub fn build_shipped(workspace: &Path, target: &Path) -> Result<PathBuf> {
    Arch::X86_64.ensure_tools()?;
    build_static(workspace, target, Arch::X86_64)
}

fn build_static(workspace: &Path, target: &Path, arch: Arch) -> Result<PathBuf> {
    cmd::run(
        cmd::cargo()
            .current_dir(workspace)
            .env("CARGO_TARGET_DIR", target)
            .envs(arch.cargo_env())
            .args(["build", "--release", "--target", arch.triple()])
            .args(["-p", "ck-userspace", "--bin", "ck"]),
        "see the compiler output above; `cargo xtask build` sets up what the BPF program needs",
    )?;
    let ck = arch.release_dir(target).join("ck");
    if let Some(interp) = ck_tests::elf::interpreter(&ck)? {
        bail!(
            "{} is dynamically linked (program interpreter {interp}); check that nothing sets \
             RUSTFLAGS with -C target-feature=-crt-static for {}",
            ck.display(),
            arch.triple()
        );
    }
    if arch != Arch::X86_64 {
        // It runs: under qemu, as it will on its machine.
        version_of_with(arch.runner(&ck), &ck)?;
    }
    Ok(ck)
}

/// The version word of `ck --version` (`ck 0.1.0 (commit ..., bpf ...)`).
fn version_of(ck: &Path) -> Result<String> {
    version_of_with(command(ck), ck)
}

/// [`version_of`], run by `runner` (qemu for another machine's binary).
fn version_of_with(mut runner: std::process::Command, ck: &Path) -> Result<String> {
    let said = cmd::output(
        runner.arg("--version"),
        &format!("the static {} does not run", ck.display()),
    )?;
    match said.split_whitespace().collect::<Vec<_>>()[..] {
        ["ck", version, ..] => Ok(version.to_string()),
        _ => bail!(
            "`{} --version` said {said:?}, not `ck VERSION ...`",
            ck.display()
        ),
    }
}

/// `ck man DIR/man` and `ck completions` into `DIR/completions` (`ck.bash`, `_ck`, `ck.fish`).
fn generate_docs(ck: &Path, dir: &Path) -> Result<()> {
    cmd::output(
        command(ck).arg("man").arg(dir.join("man")),
        "the static ck cannot write its man pages",
    )?;
    let completions = dir.join("completions");
    fs::create_dir_all(&completions)
        .with_context(|| format!("creating {}", completions.display()))?;
    for (shell, file) in [("bash", "ck.bash"), ("zsh", "_ck"), ("fish", "ck.fish")] {
        let script = cmd::output(
            command(ck).args(["completions", shell]),
            "the static ck cannot print its completions",
        )?;
        fs::write(completions.join(file), script).with_context(|| format!("writing {file}"))?;
    }
    Ok(())
}

/// The systemd units of `deploy/` (`*.service`, templates included).
fn units(workspace: &Path) -> Result<Vec<PathBuf>> {
    let deploy = workspace.join("deploy");
    let mut units: Vec<PathBuf> = fs::read_dir(&deploy)
        .with_context(|| format!("reading {}", deploy.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "service"))
        .collect();
    units.sort();
    if units.is_empty() {
        bail!("no systemd unit in {}", deploy.display());
    }
    Ok(units)
}

/// A unit as the `.deb` installs it: ck is `/usr/bin/ck` there, not `/usr/local/bin/ck`.
pub fn packaged_unit(text: &str) -> String {
    text.replace("/usr/local/bin/ck", "/usr/bin/ck")
}

/// `cargo deb --no-build` for the musl build, into `out`; returns the package's path.
fn build_deb(workspace: &Path, target: &Path, out: &Path) -> Result<PathBuf> {
    let said = cmd::output(
        cmd::cargo()
            .current_dir(workspace)
            .env("CARGO_TARGET_DIR", target)
            .args(["deb", "--no-build", "--target", MUSL, "-p", "ck-userspace"])
            .arg("--output")
            .arg(out),
        "see cargo-deb's output above",
    )?;
    let deb = PathBuf::from(said.lines().last().unwrap_or_default().trim());
    if deb.extension().is_none_or(|x| x != "deb") || !deb.is_file() {
        bail!("cargo deb did not say where it wrote the package: {said:?}");
    }
    Ok(deb)
}

/// Copies `from` to `to`, naming both on failure.
fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

/// Copies the directory `from` to `to` with its subdirectories (file modes kept), leaving out
/// hidden files and the build output in [`NOT_SHIPPED`].
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    let entries = fs::read_dir(from).with_context(|| format!("reading {}", from.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("reading {}", from.display()))?;
        let name = entry.file_name();
        let shown = name.to_string_lossy();
        if shown.starts_with('.') || NOT_SHIPPED.contains(&&*shown) {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_tree(&path, &to.join(&name))?;
        } else if path.is_file() {
            copy(&path, &to.join(&name))?;
        }
    }
    Ok(())
}

/// Empties (or creates) the directory `dir`.
fn fresh_dir(dir: &Path) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packaged_unit_runs_usr_bin_ck() {
        let unit = "ExecStart=/usr/local/bin/ck run --port 80 -- /srv/app\n\
                    ExecReload=/usr/local/bin/ck reload\n";
        assert_eq!(
            packaged_unit(unit),
            "ExecStart=/usr/bin/ck run --port 80 -- /srv/app\nExecReload=/usr/bin/ck reload\n"
        );
    }

    #[test]
    fn the_deploy_units_are_found() {
        let units = units(crate::workspace_root().unwrap()).unwrap();
        assert!(
            units.iter().any(|u| u.ends_with("deploy/ck.service")),
            "{units:?}"
        );
    }
}
