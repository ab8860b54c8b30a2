//! The generated reference (`docs/src/reference/`, `docs/man/`) is what the built `ck` writes:
//! regenerated into a scratch tree, it must equal the committed files (else: the diff and
//! `cargo xtask docs`). And it says what the running binary does: `ck run -h` is one line per
//! option, `--help` has its groups and examples, `ck --help` lists `man` and `completions`,
//! every metric a real fleet serves on `/metrics` is in metrics.md, and a real `ck status
//! --json` and `ck maps --json` validate against the committed JSON Schemas.
use std::path::{Path, PathBuf};

use ck_tests::{
    ck::{ck_output, said},
    ck_bin,
    http::metrics_text,
    reference, start_ready,
};

/// The workspace's `docs/`.
fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

fn read(path: &str) -> String {
    let path = docs().join(path);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; {}", path.display(), reference::FIX))
}

#[test]
fn the_committed_reference_is_what_ck_writes() {
    let fresh = std::env::temp_dir().join(format!("ck-reference-{}", std::process::id()));
    reference::generate(&ck_bin(), &fresh).unwrap_or_else(|e| panic!("{e}"));
    let stale = reference::compare(&docs(), &fresh);
    let report = reference::report(&docs(), &fresh, &stale);
    let pages = std::fs::read_dir(fresh.join("src/reference")).map(Iterator::count);
    let _ = std::fs::remove_dir_all(&fresh);
    assert!(stale.is_empty(), "{report}");
    assert!(pages.unwrap_or(0) >= 8, "ck reference wrote too few pages");
}

#[test]
fn run_help_is_short_with_h_and_grouped_with_examples_with_help() {
    let short = said(&ck_output(&["run", "-h"]));
    let long = said(&ck_output(&["run", "--help"]));
    let run = ::ck::settings::run_args::run_command();
    let options: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    assert!(options.len() >= 40, "{options:?}");
    // One line per option: every option on a line of its own, and no line that continues one.
    let option_lines: Vec<&str> = short
        .lines()
        .filter(|l| l.starts_with("  -") || l.starts_with("      --"))
        .collect();
    for option in &options {
        let lines = option_lines
            .iter()
            .filter(|l| l.split_whitespace().find(|w| w.starts_with("--")) == Some(option.as_str()))
            .count();
        assert_eq!(
            lines, 1,
            "{option} is not on exactly one line of `ck run -h`:\n{short}"
        );
    }
    let continuation = short
        .lines()
        .filter(|l| l.starts_with("       "))
        .collect::<Vec<_>>();
    assert!(
        continuation.is_empty(),
        "`ck run -h` wraps: {continuation:?}\n{short}"
    );
    assert!(!short.contains("Examples:"), "{short}");
    assert!(
        short.lines().count() < options.len() + 30,
        "`ck run -h` is {} lines for {} options:\n{short}",
        short.lines().count(),
        options.len()
    );
    for heading in ::ck::settings::run_args::HEADINGS {
        let line = format!("\n{heading}:\n");
        assert!(
            short.contains(&line),
            "no {heading:?} group in `ck run -h`:\n{short}"
        );
        assert!(
            long.contains(&line),
            "no {heading:?} group in `ck run --help`:\n{long}"
        );
    }
    let examples = long
        .split_once("Examples:\n")
        .unwrap_or_else(|| panic!("no examples after the options of `ck run --help`:\n{long}"))
        .1;
    let commands: Vec<&str> = examples
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ck run "))
        .collect();
    assert!(commands.len() >= 4, "{examples}");
    for needed in [
        "-w 4",
        "--adopt",
        "--stop-signal QUIT",
        "--metrics",
        "--config",
    ] {
        assert!(
            commands.iter().any(|c| c.contains(needed)),
            "no example with {needed}: {commands:?}"
        );
    }
    // Each example parses as `ck run` would (options and values accepted).
    for command in commands {
        let words: Vec<&str> = command
            .split(" -- ")
            .next()
            .unwrap()
            .split_whitespace()
            .skip(1)
            .collect();
        ::ck::settings::run_args::run_command()
            .try_get_matches_from(&words)
            .unwrap_or_else(|e| panic!("example `{command}` does not parse: {e}"));
    }
}

#[test]
fn ck_help_lists_man_and_completions() {
    let help = said(&ck_output(&["--help"]));
    for command in ["man", "completions"] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{command} "))),
            "`ck --help` does not list `{command}`:\n{help}"
        );
    }
    let man = std::env::temp_dir().join(format!("ck-man-{}", std::process::id()));
    let listed = said(&ck_output(&["man", man.to_str().unwrap()]));
    let _ = std::fs::remove_dir_all(&man);
    for page in ["ck.1", "ck-run.1", "ck-status.1", "ck.toml.5"] {
        assert!(listed.contains(page), "`ck man` wrote no {page}: {listed}");
    }
    let bash = said(&ck_output(&["completions", "bash"]));
    assert!(bash.contains("--stop-signal"), "{bash}");
}

#[test]
fn every_served_metric_and_real_json_is_in_the_reference() {
    let (ck, _port, status) =
        start_ready("reference", 2, &["--metrics", "127.0.0.1:0"]).expect("start a ready ck");
    let text = metrics_text(status.metrics.as_deref().expect("a metrics address"));
    let page = read("src/reference/metrics.md");
    let mut served = 0;
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name = line.split(['{', ' ']).next().unwrap();
        served += 1;
        assert!(
            page.contains(&format!("`{name}`")),
            "/metrics serves {name}, which docs/src/reference/metrics.md does not list; {}",
            reference::FIX
        );
    }
    assert!(served > 20, "{text}");
    for (args, schema) in [
        (
            &["status", "--json"][..],
            "src/reference/status.schema.json",
        ),
        (&["maps", "--json"][..], "src/reference/maps.schema.json"),
    ] {
        let schema: serde_json::Value =
            serde_json::from_str(&read(schema)).unwrap_or_else(|e| panic!("{schema}: {e}"));
        let validator = jsonschema::validator_for(&schema)
            .unwrap_or_else(|e| panic!("{} is not a JSON Schema: {e}", args[0]));
        let output: serde_json::Value =
            serde_json::from_str(&ck.ctl_ok(args).expect("ck control command"))
                .unwrap_or_else(|e| panic!("`ck {}` is not JSON: {e}", args.join(" ")));
        let errors: Vec<String> = validator
            .iter_errors(&output)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "`ck {}` does not match {}: {errors:#?}",
            args.join(" "),
            args[0]
        );
        // Every top-level key is documented (the schema allows no others unnoticed).
        let properties = schema["properties"].as_object().expect("properties");
        for key in output.as_object().expect("an object").keys() {
            assert!(
                properties.contains_key(key),
                "`ck {}` prints {key}, which the schema lacks; {}",
                args.join(" "),
                reference::FIX
            );
        }
    }
    drop(ck);
}
