//! The library's parts import each other in layers, checked on the sources without building
//! anything: every path in every file of a folder of `ck-userspace/src` (read with `syn`: `use`
//! lines, inline paths, macro tokens and `#[serde(with = "...")]` strings) makes an edge from
//! the part it is written in (each sub-folder and each file of the folder one part, its
//! `mod.rs` another) to the part it names. `supervisor/`'s parts follow the order
//! ARCHITECTURE.md states on its `Layers:` line, and in no folder at the top of the library do
//! two parts import each other, even through others.
//! A failure names the file, the line and the path, and what to do.

use std::collections::BTreeSet;
use std::path::PathBuf;

use ck_tests::{docs, layers};

/// The library's sources.
fn src() -> PathBuf {
    docs::repo_root().join("ck-userspace/src")
}

/// The layers ARCHITECTURE.md's `Layers:` line states, lowest first: `` `a` < `b`, `c` ``
/// (one line, each part's name in backticks).
fn stated_layers() -> Vec<Vec<String>> {
    let path = docs::repo_root().join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).expect("reading ARCHITECTURE.md");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Layers: "))
        .expect("ARCHITECTURE.md states supervisor/'s layers on one line `Layers: `a` < `b`, ...`");
    line.split(" < ")
        .map(|layer| {
            layer
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect()
        })
        .collect()
}

/// Fails with each cycle, naming an edge of it, and the fix.
fn assert_no_cycle(folder: &str, edges: &[layers::Edge]) {
    let cycles = layers::cycles(edges);
    let shown: Vec<String> = cycles
        .iter()
        .map(|parts| {
            let inside: Vec<String> = edges
                .iter()
                .filter(|e| parts.contains(&e.from) && parts.contains(&e.to))
                .map(|e| format!("    {e}"))
                .collect();
            format!("  {}:\n{}", parts.join(", "), inside.join("\n"))
        })
        .collect();
    assert!(
        cycles.is_empty(),
        "parts of {folder} import each other in a circle; move what both need to a part \
         below them (or the item to the part that uses it):\n{}",
        shown.join("\n")
    );
}

/// No two parts of `supervisor/` import each other, and none imports a part of a higher layer
/// than its own.
#[test]
fn supervisor_parts_import_only_down_their_layers() {
    let edges = layers::edges(&src(), &["supervisor"]).expect("reading supervisor/");
    assert!(
        edges.len() > 100,
        "only {} edges found: the reader misses paths",
        edges.len()
    );
    assert_no_cycle("supervisor/", &edges);
    let stated = stated_layers();
    let order: Vec<Vec<&str>> = stated
        .iter()
        .map(|l| l.iter().map(String::as_str).collect())
        .collect();
    let order: Vec<&[&str]> = order.iter().map(Vec::as_slice).collect();
    let listed: BTreeSet<&str> = order.iter().flat_map(|l| l.iter().copied()).collect();
    let mut parts = layers::nodes_of(&src().join("supervisor")).expect("listing supervisor/");
    parts.insert(layers::OWN.to_string());
    let missing: Vec<&String> = parts
        .iter()
        .filter(|p| !listed.contains(p.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's `Layers:` line leaves out {missing:?}: give each part of \
         supervisor/ its layer"
    );
    let up = layers::upward(&edges, &order).expect("every part has a layer");
    let shown: Vec<String> = up.iter().map(|e| format!("  {e}")).collect();
    assert!(
        up.is_empty(),
        "{} paths run up a layer (ARCHITECTURE.md's `Layers:` line); move the item they name \
         down to the part that imports it, or take it as an argument:\n{}",
        up.len(),
        shown.join("\n")
    );
}

/// In no folder at the top of the library (`bpf/`, `os/`, `settings/`, `supervisor/`, ...) do
/// two parts import each other, even through others. (Deeper, a folder's `mod.rs` may hold
/// the struct its files implement: they are one part of the folder above.)
#[test]
fn no_folder_at_the_top_of_the_library_has_a_circle() {
    let folders: Vec<String> = std::fs::read_dir(src())
        .expect("listing the library's sources")
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(folders.len() >= 8, "only {folders:?}");
    let mut read = 0;
    for folder in &folders {
        let edges = layers::edges(&src(), &[folder.as_str()]).expect("reading the folder");
        read += edges.len();
        assert_no_cycle(&format!("{folder}/"), &edges);
    }
    assert!(read > 300, "only {read} edges found in {folders:?}");
}

/// The longest a file of the library may be: a file past it holds more than one concern.
const MAX_FILE_LINES: usize = 450;

/// No file of the library is longer than [`MAX_FILE_LINES`] lines (tests included: a test file
/// that long tests more than one thing).
#[test]
fn no_file_of_the_library_is_over_450_lines() {
    let mut files = Vec::new();
    layers::rust_files(&src(), &mut files);
    assert!(
        files.len() > 100,
        "only {} files under {}",
        files.len(),
        src().display()
    );
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(path).ok()?.lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("  {} ({lines} lines)", path.display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines; split each by concern (a type and its rules, or its \
         tests into a sibling `*_tests.rs`):\n{}",
        long.join("\n")
    );
}

/// The reader finds what Rust resolves: a `use` group, an inline path, a macro's path, a
/// serde attribute's string, `super::` from a nested file and a child module named from
/// `mod.rs` (also in a macro, but not a variable named like it); and a circle is found as one.
#[test]
fn the_reader_sees_every_kind_of_path_and_finds_a_circle() {
    let dir = std::env::temp_dir().join(format!("ck-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let root = dir.join("src");
    std::fs::create_dir_all(root.join("top/a")).unwrap();
    let write = |p: &str, text: &str| std::fs::write(root.join(p), text).unwrap();
    // A child module named in a macro counts; a variable named like one does not.
    write(
        "top/mod.rs",
        "mod a;\nmod b;\nmod c;\nmod d;\nuse b::X;\nfn f(a: u8) -> Vec<u8> { vec![a, d::W] }\n",
    );
    write("top/a/mod.rs", "mod inner;\n");
    write("top/a/inner.rs", "use super::super::{b::Y, c};\n");
    write("top/b.rs", "fn f() { let _ = crate::top::c::Z; }\n");
    write(
        "top/c.rs",
        "fn g() { tracing::info!(\"{}\", crate::top::d::W); }\n",
    );
    write(
        "top/d.rs",
        "#[derive(serde::Serialize)]\nstruct S { #[serde(with = \"crate::top::a::inner\")] t: u8 }\n",
    );
    let edges = layers::edges(&root, &["top"]).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let pairs: BTreeSet<(String, String)> = edges
        .iter()
        .map(|e| (e.from.clone(), e.to.clone()))
        .collect();
    let want: BTreeSet<(String, String)> = [
        ("mod.rs", "b"),
        ("mod.rs", "d"),
        ("a", "b"),
        ("a", "c"),
        ("b", "c"),
        ("c", "d"),
        ("d", "a"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(pairs, want, "{edges:#?}");
    assert_eq!(
        layers::cycles(&edges),
        vec![vec!["a".to_string(), "b".into(), "c".into(), "d".into()]]
    );
}
