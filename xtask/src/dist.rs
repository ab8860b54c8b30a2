//! `cargo xtask dist`: ck as one static file and as a Debian package.
//!
//! Builds the release `ck` for `x86_64-unknown-linux-musl` (statically linked, its BPF object
//! embedded as in every build: `ck-userspace/build.rs` builds it for the BPF target on the
//! host), checks that it has no program interpreter, has it write its own man pages and shell
//! completions (`ck man`, `ck completions`: from its real clap definition), and packs
//! `ck-<version>-x86_64-linux.tar.gz` (ck, the systemd units of `deploy/`, the man pages, the
//! completions, README) and a `.deb` (cargo-deb, with `[package.metadata.deb]` of
//! `ck-userspace/Cargo.toml`) that installs the same files under `/usr`. Installs the musl
//! target and cargo-deb when missing, with one `xtask: ...` line each.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};

use crate::cmd::{self, command};

/// The static target.
pub const MUSL: &str = "x86_64-unknown-linux-musl";
/// Where the generated files the `.deb` takes go, under the musl release directory: cargo-deb's
/// `target/release/` prefix in `[package.metadata.deb]` assets names that directory.
const DEB_ASSETS: &str = "dist-assets";

/// Builds `ck-<version>-x86_64-linux.tar.gz` and `ck_<version>-1_amd64.deb` into `out`
/// (created if missing) and prints their paths; `target` is cargo's target directory.
pub fn run(workspace: &Path, target: &Path, out: &Path) -> Result<()> {
    ensure_musl_target()?;
    ensure_cargo_deb()?;
    let release = target.join(MUSL).join("release");
    let ck = release.join("ck");
    build_static(workspace, target)?;
    if let Some(interp) = ck_tests::elf::interpreter(&ck)? {
        bail!(
            "{} is dynamically linked (program interpreter {interp}); check that nothing sets \
             RUSTFLAGS with -C target-feature=-crt-static for {MUSL}",
            ck.display()
        );
    }
    let version = version_of(&ck)?;
    fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let name = format!("ck-{version}-x86_64-linux");
    let stage = out.join(&name);
    let _ = fs::remove_dir_all(&stage);
    fs::create_dir_all(&stage).with_context(|| format!("creating {}", stage.display()))?;
    copy(&ck, &stage.join("ck"))?;
    generate_docs(&ck, &stage)?;
    for unit in units(workspace)? {
        copy(
            &unit,
            &stage.join(unit.file_name().expect("a unit file name")),
        )?;
    }
    for doc in ["README.md", "LICENSE", "LICENSE-MIT", "LICENSE-APACHE"] {
        let path = workspace.join(doc);
        if path.is_file() {
            copy(&path, &stage.join(doc))?;
        }
    }
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

    let assets = release.join(DEB_ASSETS);
    let _ = fs::remove_dir_all(&assets);
    fs::create_dir_all(&assets).with_context(|| format!("creating {}", assets.display()))?;
    generate_docs(&ck, &assets)?;
    for unit in units(workspace)? {
        let text =
            fs::read_to_string(&unit).with_context(|| format!("reading {}", unit.display()))?;
        let file = assets.join(unit.file_name().expect("a unit file name"));
        fs::write(&file, packaged_unit(&text))
            .with_context(|| format!("writing {}", file.display()))?;
    }
    let deb = build_deb(workspace, target, out)?;
    println!("{}\n{}", tarball.display(), deb.display());
    Ok(())
}

/// Adds the musl target to the toolchain that builds the workspace, unless it has it.
fn ensure_musl_target() -> Result<()> {
    let installed = cmd::output(
        command("rustup").args(["target", "list", "--installed"]),
        "install rustup (https://rustup.rs) and make sure it is on PATH",
    )?;
    if installed.lines().any(|t| t.trim() == MUSL) {
        return Ok(());
    }
    eprintln!("xtask: adding the {MUSL} target (rustup target add {MUSL})");
    cmd::run(
        command("rustup").args(["target", "add", MUSL]),
        &format!("check network access, or run `rustup target add {MUSL}` by hand"),
    )
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

/// `cargo build --release --target x86_64-unknown-linux-musl -p ck-userspace --bin ck`.
fn build_static(workspace: &Path, target: &Path) -> Result<()> {
    cmd::run(
        cmd::cargo()
            .current_dir(workspace)
            .env("CARGO_TARGET_DIR", target)
            .args(["build", "--release", "--target", MUSL])
            .args(["-p", "ck-userspace", "--bin", "ck"]),
        "see the compiler output above; `cargo xtask build` sets up what the BPF program needs",
    )
}

/// The version word of `ck --version` (`ck 0.1.0 (commit ..., bpf ...)`).
fn version_of(ck: &Path) -> Result<String> {
    let said = cmd::output(command(ck).arg("--version"), "the static ck does not run")?;
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
