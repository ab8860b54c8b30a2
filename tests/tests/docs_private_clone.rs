//! The guide runs from a checkout other users cannot enter: a clone of this repository in a
//! directory of mode 0700 (what `mktemp -d` makes, and where CI clones), with its `ck` built
//! inside it, runs the least-privilege page's blocks, which run ck as `nobody` and workers as
//! `nobody`. A page that hands `nobody` a program inside the clone fails here, whatever the
//! mode of the directory the suite itself runs from.

use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use ck_tests::ck_bin;
use ck_tests::docs::{self, Checkout, Markdown, NoHooks};
use ck_tests::privs::unsearchable_ancestor;
use ck_tests::sys::TempDir;

/// The page under test.
const PAGE: &str = "docs/src/least-privilege.md";

/// Runs `git ARGS` in `dir`; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running git {args:?}: {e}"));
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A clone of this repository at `to` with the working tree's changes to tracked files and its
/// untracked, not ignored files on top: the files as they are now, not as last committed.
fn clone_working_tree(to: &Path) {
    let root = docs::repo_root();
    let status = Command::new("git")
        .args(["clone", "--quiet"])
        .arg(&root)
        .arg(to)
        .status()
        .expect("running git clone");
    assert!(status.success(), "git clone {} failed", root.display());
    let changed = git(
        &root,
        &["ls-files", "--modified", "--others", "--exclude-standard"],
    );
    for file in changed.lines() {
        let from = root.join(file);
        let into = to.join(file);
        if from.is_file() {
            fs::create_dir_all(into.parent().expect("a parent")).expect("creating a directory");
            fs::copy(&from, &into).unwrap_or_else(|e| panic!("copying {file}: {e}"));
        } else {
            // Deleted in the working tree.
            let _ = fs::remove_file(&into);
        }
    }
}

#[test]
fn the_least_privilege_page_runs_from_a_clone_other_users_cannot_enter() {
    let private = TempDir::new("private-clone");
    fs::set_permissions(private.path(), fs::Permissions::from_mode(0o700))
        .expect("chmod 0700 the clone's directory");
    let clone = private.path().join("ck");
    clone_working_tree(&clone);
    // ck built inside the clone, as `cargo xtask build` leaves it.
    let ck = clone.join("target/debug/ck");
    fs::create_dir_all(ck.parent().expect("target/debug")).expect("creating target/debug");
    fs::copy(ck_bin(), &ck).expect("copying ck into the clone");
    assert_eq!(
        unsearchable_ancestor(&ck).map(|(dir, _)| dir),
        Some(private.path().to_path_buf()),
        "the clone's ck must be out of other users' reach for this test to mean anything"
    );
    let checkout = Checkout {
        root: clone.clone(),
        ck,
    };
    let page = Markdown::read(&clone.join(PAGE));
    let report = docs::run_page_in(&checkout, &page, PAGE, &mut NoHooks);
    eprintln!("docs: {}", report.summary());
    assert!(report.ran > 0, "no block of {PAGE} ran");
    assert!(
        report.failures.is_empty(),
        "{PAGE} fails from a clone in a 0700 directory:\n{}",
        report.failures.join("\n\n")
    );
}
