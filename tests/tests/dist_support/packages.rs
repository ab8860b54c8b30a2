//! The npm packages and the wheel of `cargo xtask dist`, installed as their users install them
//! and with no Rust toolchain on `PATH`: `npm install -g --prefix DIR` of the local `.tgz` files
//! (offline: npm reaches no registry), `pip install --no-index` of the wheel into a fresh
//! virtualenv. The installed `ck` serves the demo worker on both slots of `-w 2`, drains a slot
//! to 0 new connections and stops cleanly; uninstalling removes every file the install brought.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ck_tests::sys::TempDir;

use super::{dist, listing, run, serve_and_drain, stdout, tree, without_rust};

/// The launcher package (its `bin` is `ck`).
const LAUNCHER: &str = "ck-supervisor";
/// The Node worker library.
const LISTEN: &str = "ck-listen";
/// The platform package this machine takes.
const PLATFORM: &str = "ck-supervisor-linux-x64";

/// The `.tgz` of the npm package `name` (`NAME-VERSION.tgz`).
fn tgz(name: &str) -> &'static Path {
    let version = format!("-{}.tgz", env!("CARGO_PKG_VERSION"));
    dist()
        .npm
        .iter()
        .find(|p| p.file_name().unwrap().to_string_lossy() == format!("{name}{version}"))
        .unwrap_or_else(|| panic!("no {name}{version} in {:?}", dist().npm))
}

/// The files that `after` has and `before` had not.
fn added(before: &BTreeSet<PathBuf>, after: &BTreeSet<PathBuf>) -> Vec<PathBuf> {
    after.difference(before).cloned().collect()
}

#[test]
fn the_npm_packages_install_offline_serve_drain_and_uninstall_to_no_file() {
    let launcher = tgz(LAUNCHER);
    let platform = tgz(PLATFORM);
    let npm_names: Vec<String> = dist()
        .npm
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        npm_names.len(),
        3,
        "the launcher, one platform package and ck-listen: {npm_names:?}"
    );

    // The launcher ships the examples and the Node script; the platform package the binary.
    let files = listing(launcher);
    for want in [
        "package/bin/ck.js",
        "package/package.json",
        "package/README.md",
    ] {
        assert!(files.iter().any(|f| f == want), "{want} not in {files:?}");
    }
    for example in ["package/examples/worker.js", "package/examples/listen.js"] {
        assert!(
            files.iter().any(|f| f == example),
            "{example} not in {files:?}"
        );
    }
    let files = listing(platform);
    assert!(
        files.iter().any(|f| f == "package/bin/ck"),
        "no bin/ck in {files:?}"
    );

    // An empty prefix, and a home of its own (npm's cache and logs go there, not in the prefix).
    let home = TempDir::new("npm-home");
    let prefix = TempDir::new("npm-prefix");
    let npm = || {
        let mut npm = without_rust(Path::new("npm"), home.path());
        npm.args([
            "--offline",
            "--no-audit",
            "--no-fund",
            "--global",
            "--prefix",
        ])
        .arg(prefix.path());
        npm
    };
    let before = tree(prefix.path());
    run(npm().arg("install").arg(platform).arg(launcher));
    let installed = tree(prefix.path());
    let ck = prefix.path().join("bin/ck");
    assert!(ck.exists(), "no bin/ck after npm install: {installed:?}");
    let binary = prefix
        .path()
        .join("lib/node_modules")
        .join(PLATFORM)
        .join("bin/ck");
    assert!(binary.is_file(), "no {}: {installed:?}", binary.display());

    // The launcher finds the platform package's binary and passes its output and status on.
    let said = stdout(without_rust(&ck, home.path()).arg("--version"));
    assert!(
        said.starts_with(&format!("ck {} (commit", env!("CARGO_PKG_VERSION"))),
        "{said:?}"
    );
    let refused = without_rust(&ck, home.path())
        .args(["status", "--name", "no-such-instance"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");

    // `ck run` through the launcher: the supervisor is the platform package's binary.
    let launch = || without_rust(&ck, home.path());
    serve_and_drain(&launch, "npm", 2, &|status| {
        let exe = std::fs::read_link(format!("/proc/{}/exe", status.pid)).unwrap();
        assert_eq!(exe, binary.canonicalize().unwrap());
    });

    // ck-listen installs offline into an app's directory, and the app finds it.
    let app = TempDir::new("npm-app");
    let mut local = without_rust(Path::new("npm"), home.path());
    local
        .args(["--offline", "--no-audit", "--no-fund", "--prefix"])
        .arg(app.path())
        .arg("install")
        .arg(tgz(LISTEN));
    run(&mut local);
    let found = stdout(without_rust(Path::new("node"), app.path()).args([
        "-e",
        "process.stdout.write(typeof require('ck-listen').listen)",
    ]));
    assert_eq!(
        found, "function",
        "require('ck-listen').listen from the app"
    );

    run(npm().args(["uninstall", LAUNCHER, PLATFORM]));
    let after = tree(prefix.path());
    let left = added(&before, &after);
    assert!(left.is_empty(), "left after npm uninstall: {left:?}");
}

#[test]
fn the_wheel_installs_in_a_venv_serves_drains_and_uninstalls_to_no_file() {
    let wheel = &dist().wheel;
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!(
            "ck_supervisor-{}-py3-none-",
            env!("CARGO_PKG_VERSION")
        )),
        "{name}"
    );
    // A static binary: installable on glibc (manylinux) and musl (musllinux) systems alike.
    assert!(name.contains("manylinux_2_17_x86_64"), "{name}");
    assert!(name.contains("musllinux_1_1_x86_64"), "{name}");

    let home = TempDir::new("pip-home");
    let venv = home.path().join("venv");
    run(without_rust(Path::new("python3"), home.path())
        .args(["-m", "venv"])
        .arg(&venv));
    let pip = || {
        let mut pip = without_rust(&venv.join("bin/pip"), home.path());
        pip.args(["--disable-pip-version-check", "--no-cache-dir"]);
        pip
    };
    let before = tree(&venv);
    run(pip().args(["install", "--no-index"]).arg(wheel));
    let ck = venv.join("bin/ck");
    assert!(
        ck.is_file(),
        "no bin/ck after pip install: {:?}",
        tree(&venv)
    );
    assert_eq!(ck_tests::elf::interpreter(&ck).unwrap(), None, "not static");

    let launch = || without_rust(&ck, home.path());
    serve_and_drain(&launch, "wheel", 2, &|status| {
        let exe = std::fs::read_link(format!("/proc/{}/exe", status.pid)).unwrap();
        assert_eq!(exe, ck.canonicalize().unwrap());
    });

    run(pip().args(["uninstall", "-y", "ck-supervisor"]));
    let left = added(&before, &tree(&venv));
    assert!(left.is_empty(), "left after pip uninstall: {left:?}");
}
