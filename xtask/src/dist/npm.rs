//! The npm packages of `cargo xtask dist`, shaped as esbuild and biome ship their binaries: one
//! platform package per machine (`ck-supervisor-linux-x64`, `ck-supervisor-linux-arm64`) holding
//! the static `ck` at `bin/ck`, with `os`/`cpu` fields so that npm installs only the one that
//! fits, and the launcher package `ck-supervisor` (`packaging/npm/ck-supervisor/`) whose `bin`
//! `ck` is a small Node script that finds the platform package's binary with `require.resolve`
//! and runs it. The launcher's `optionalDependencies` pin the platform packages built with it to
//! the same version; it also ships `examples/`. Each is packed with `npm pack` into a `.tgz`, and
//! so is `packages/ck-listen`, the Node worker library.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use super::cross::Arch;
use super::{copy, copy_tree, fresh_dir};
use crate::cmd::{self, command};

/// The launcher package's name (its `bin` is `ck`).
pub const LAUNCHER: &str = "ck-supervisor";

/// The Node worker library (`packages/ck-listen`), packed beside ck's packages.
pub const LISTEN: &str = "ck-listen";

/// The platform package of `arch`, e.g. `ck-supervisor-linux-x64`.
pub fn platform_package(arch: Arch) -> String {
    format!("{LAUNCHER}-linux-{}", arch.npm_cpu())
}

/// Builds and packs the platform package of each `(arch, ck)`, the launcher and `ck-listen`,
/// into `out`; returns the `.tgz` files, platform packages first, `ck-listen` last.
pub fn build(
    workspace: &Path,
    out: &Path,
    version: &str,
    binaries: &[(Arch, PathBuf)],
) -> Result<Vec<PathBuf>> {
    if cmd::find_program("npm", &[]).is_none() {
        bail!("building the npm packages needs npm: install it with `apt-get install -y npm`");
    }
    let stage = out.join("npm-stage");
    fresh_dir(&stage)?;
    let mut packages = Vec::new();
    for (arch, ck) in binaries {
        let dir = stage.join(platform_package(*arch));
        fs::create_dir_all(dir.join("bin"))
            .with_context(|| format!("creating {}", dir.display()))?;
        copy(ck, &dir.join("bin/ck"))?;
        write_json(
            &dir.join("package.json"),
            &platform_manifest(*arch, version),
        )?;
        fs::write(dir.join("README.md"), platform_readme(*arch))
            .with_context(|| format!("writing {}/README.md", dir.display()))?;
        licenses(workspace, &dir)?;
        packages.push(dir);
    }

    let source = workspace.join("packaging/npm").join(LAUNCHER);
    let dir = stage.join(LAUNCHER);
    copy_tree(&source, &dir)?;
    let manifest = source.join("package.json");
    let template: Value = serde_json::from_str(
        &fs::read_to_string(&manifest)
            .with_context(|| format!("reading {}", manifest.display()))?,
    )
    .with_context(|| format!("{} is not JSON", manifest.display()))?;
    let arches: Vec<Arch> = binaries.iter().map(|(arch, _)| *arch).collect();
    write_json(
        &dir.join("package.json"),
        &launcher_manifest(template, version, &arches)?,
    )?;
    copy_tree(&workspace.join("examples"), &dir.join("examples"))?;
    licenses(workspace, &dir)?;
    packages.push(dir);

    let mut tgzs = packages
        .iter()
        .map(|dir| pack(dir, out))
        .collect::<Result<Vec<_>>>()?;
    // The Node worker library, as it is in the tree (no build step, no dependencies).
    tgzs.push(pack(&workspace.join("packages").join(LISTEN), out)?);
    fs::remove_dir_all(&stage).with_context(|| format!("removing {}", stage.display()))?;
    Ok(tgzs)
}

/// `package.json` of the platform package of `arch`.
fn platform_manifest(arch: Arch, version: &str) -> Value {
    json!({
        "name": platform_package(arch),
        "version": version,
        "description": format!(
            "The static ck binary for Linux {}; installed by the ck-supervisor package",
            arch.npm_cpu()
        ),
        "license": "MIT OR Apache-2.0",
        "os": ["linux"],
        "cpu": [arch.npm_cpu()],
        // Yarn PnP: a binary must be on disk to be run.
        "preferUnplugged": true,
        "files": ["bin/ck", "README.md", "LICENSE-MIT", "LICENSE-APACHE"],
    })
}

/// The launcher's `package.json`: `template` with `version` set and `optionalDependencies`
/// pinning the platform packages of `arches` to the same version.
fn launcher_manifest(mut template: Value, version: &str, arches: &[Arch]) -> Result<Value> {
    let Some(fields) = template.as_object_mut() else {
        bail!("packaging/npm/{LAUNCHER}/package.json is not a JSON object");
    };
    if fields.get("bin").and_then(|b| b.get("ck")).is_none() {
        bail!(
            "packaging/npm/{LAUNCHER}/package.json has no `bin.ck`: the launcher must install `ck`"
        );
    }
    fields.insert("version".into(), json!(version));
    let pinned: serde_json::Map<String, Value> = arches
        .iter()
        .map(|arch| (platform_package(*arch), json!(version)))
        .collect();
    fields.insert("optionalDependencies".into(), Value::Object(pinned));
    Ok(template)
}

/// The platform package's README.
fn platform_readme(arch: Arch) -> String {
    format!(
        "# {name}\n\nThe static `ck` binary for Linux {cpu}. Install `{LAUNCHER}` rather than \
         this package: npm picks this one on Linux {cpu} machines, and `{LAUNCHER}`'s `ck` \
         command runs it.\n",
        name = platform_package(arch),
        cpu = arch.npm_cpu(),
    )
}

/// Copies the license files of the workspace, where they exist, into the package `dir`.
fn licenses(workspace: &Path, dir: &Path) -> Result<()> {
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let path = workspace.join(file);
        if path.is_file() {
            copy(&path, &dir.join(file))?;
        }
    }
    Ok(())
}

/// `npm pack` of the package in `dir` into `out`; returns the `.tgz` it wrote.
fn pack(dir: &Path, out: &Path) -> Result<PathBuf> {
    let said = cmd::output(
        command("npm")
            .current_dir(dir)
            .args(["pack", "--json", "--ignore-scripts", "--pack-destination"])
            .arg(out),
        "see npm's output above",
    )?;
    let report: Value =
        serde_json::from_str(&said).with_context(|| format!("npm pack said {said:?}, not JSON"))?;
    let Some(file) = report[0]["filename"].as_str() else {
        bail!("npm pack did not name the file it wrote: {said}");
    };
    let tgz = out.join(file);
    if !tgz.is_file() {
        bail!(
            "npm pack said it wrote {}, which is not there",
            tgz.display()
        );
    }
    Ok(tgz)
}

/// Writes `value` as indented JSON to `path`.
fn write_json(path: &Path, value: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("JSON values serialize") + "\n";
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_package_is_for_one_os_and_cpu() {
        let manifest = platform_manifest(Arch::Aarch64, "1.2.3");
        assert_eq!(manifest["name"], "ck-supervisor-linux-arm64");
        assert_eq!(manifest["os"], json!(["linux"]));
        assert_eq!(manifest["cpu"], json!(["arm64"]));
        assert_eq!(manifest["version"], "1.2.3");
    }

    #[test]
    fn the_launcher_pins_its_platform_packages_to_its_version() {
        let path = crate::workspace_root()
            .unwrap()
            .join("packaging/npm/ck-supervisor/package.json");
        let template = serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        let manifest =
            launcher_manifest(template, "1.2.3", &[Arch::X86_64, Arch::Aarch64]).unwrap();
        assert_eq!(manifest["version"], "1.2.3");
        assert_eq!(manifest["bin"]["ck"], "bin/ck.js");
        assert_eq!(
            manifest["optionalDependencies"],
            json!({"ck-supervisor-linux-x64": "1.2.3", "ck-supervisor-linux-arm64": "1.2.3"})
        );
    }

    #[test]
    fn a_launcher_without_ck_is_refused() {
        let err = launcher_manifest(json!({"name": "x"}), "1", &[Arch::X86_64]).unwrap_err();
        assert!(err.to_string().contains("bin.ck"), "{err}");
    }
}
