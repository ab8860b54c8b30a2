//! Config file checks against a command with the shapes of `ck run`'s options (the binary's
//! own tests check every option of the real one).
use std::{path::PathBuf, time::Duration};

use clap::{CommandFactory as _, Parser};

use super::*;
use crate::settings::run_config::{ListenAddr, Policy};
use ck_worker::units::duration::parse_duration;

/// Options shaped like `ck run`'s: a number, an enum, a duration, repeatable ones, a switch,
/// `--config` and the trailing app.
#[derive(Parser)]
#[command(name = "run")]
#[allow(dead_code)]
struct Run {
    #[arg(short, long = "port")]
    ports: Vec<u16>,
    #[arg(long)]
    listen: Vec<ListenAddr>,
    #[arg(short, long)]
    workers: Option<u32>,
    #[arg(long, value_enum, default_value = "round-robin")]
    policy: Policy,
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    ready_timeout: Duration,
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    max_requests: Option<u64>,
    #[arg(long)]
    adopt: bool,
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(trailing_var_arg = true)]
    app: Vec<String>,
}

fn parse(text: &str) -> Result<ConfigFile, ConfigFileError> {
    ConfigFile::parse(Path::new("ck.toml"), text, &Run::command())
}

/// The problems of a file that must be refused.
fn problems(text: &str) -> Vec<Problem> {
    match parse(text) {
        Err(ConfigFileError::Invalid { problems, .. }) => problems,
        other => panic!("{text:?} was not refused for its keys or values: {other:?}"),
    }
}

/// The one problem of a file that must be refused, as ck prints it.
fn refusal(text: &str) -> String {
    let err = parse(text).expect_err(text);
    assert_eq!(problems(text).len(), 1, "{err}");
    err.to_string()
}

#[test]
fn keys_are_the_long_options_and_app() {
    let keys = keys(&Run::command());
    assert_eq!(
        keys,
        [
            "port",
            "listen",
            "workers",
            "policy",
            "ready-timeout",
            "max-requests",
            "adopt",
            "app"
        ]
    );
}

#[test]
fn every_kind_of_value_becomes_arguments() {
    let file = parse(
        "workers = 4\n\
         policy = \"least-queue\"\n\
         ready-timeout = \"2.5s\"\n\
         port = [8080, 8081]\n\
         listen = \"tcp://[::]:9000\"\n\
         adopt = true\n\
         app = [\"node\", \"server.js\", \"--flag\"]\n",
    )
    .unwrap();
    let args = file.args(|_| false);
    assert_eq!(
        args.options,
        [
            "--workers=4",
            "--policy=least-queue",
            "--ready-timeout=2.5s",
            "--port=8080",
            "--port=8081",
            "--listen=tcp://[::]:9000",
            "--adopt",
        ]
    );
    assert_eq!(
        args.app,
        Some(vec!["node".into(), "server.js".into(), "--flag".into()])
    );
    assert_eq!(file.settings()[2].line, 3);
    assert_eq!(file.settings()[2].text, "ready-timeout = \"2.5s\"");
    // The arguments parse as the command line would.
    let mut argv = vec!["run".to_string()];
    argv.extend(args.options);
    let run = Run::try_parse_from(argv).unwrap();
    assert_eq!(run.workers, Some(4));
    assert_eq!(run.ports, [8080, 8081]);
    assert_eq!(run.ready_timeout, Duration::from_millis(2500));
    assert!(run.adopt);
}

#[test]
fn the_command_line_wins() {
    let file = parse("workers = 4\nadopt = true\napp = [\"sh\"]\npolicy = \"hash\"\n").unwrap();
    let given = ["workers", "app"];
    let args = file.args(|id| given.contains(&id));
    assert_eq!(args.options, ["--adopt", "--policy=hash"]);
    assert_eq!(args.app, None);
    // A switch set to false adds nothing.
    let file = parse("adopt = false\n").unwrap();
    assert_eq!(file.args(|_| false), FileArgs::default());
}

#[test]
fn unknown_key_names_line_and_nearest_key() {
    let err = refusal("# a comment\nport = 8080\nwokers = 4\n");
    assert!(
        err.starts_with("ck.toml line 3: unknown key `wokers`"),
        "{err}"
    );
    assert!(err.contains("did you mean `workers`?"), "{err}");
    let err = refusal("zzzzzz = 1\n");
    assert!(!err.contains("did you mean"), "{err}");
    assert!(err.contains("ck run --help"), "{err}");
    let err = refusal("config = \"other.toml\"\n");
    assert!(
        err.contains("`config` cannot be set in a config file"),
        "{err}"
    );
    let err = refusal("\n[run]\nworkers = 2\n");
    assert!(err.contains("line 2: unknown section"), "{err}");
}

#[test]
fn bad_values_name_key_line_and_what_is_accepted() {
    let err = refusal("workers = \"four\"\n");
    assert_eq!(
        err,
        "ck.toml line 1: `workers = \"four\"`: expected a whole number from 0 to 4294967295"
    );
    let err = refusal("\npolicy = \"fastest\"\n");
    assert!(
        err.contains(
            "line 2: `policy = \"fastest\"`: expected one of: hash, round-robin, least-queue, sticky, least-conn"
        ),
        "{err}"
    );
    let err = refusal("ready-timeout = \"soon\"\n");
    assert!(err.contains("invalid duration \"soon\""), "{err}");
    let err = refusal("max-requests = 0\n");
    assert!(
        err.contains("`max-requests = 0`: expected a whole number from 1 to 1844"),
        "{err}"
    );
    let err = refusal("listen = [\"udp://x:1\"]\n");
    assert!(err.contains("expected tcp://HOST:PORT"), "{err}");
    let err = refusal("adopt = \"yes\"\n");
    assert!(
        err.contains("`adopt = \"yes\"`: expected true or false"),
        "{err}"
    );
    let err = refusal("workers = true\n");
    assert!(err.contains("on/off options only (adopt)"), "{err}");
    let err = refusal("workers = [1, 2]\n");
    assert!(err.contains("takes one value, not a list"), "{err}");
    let err = refusal("port = [8080, \"x\"]\n");
    assert!(
        err.contains("`port = [8080, \"x\"]`: expected a whole number from 0 to 65535"),
        "{err}"
    );
    for app in [
        "app = \"node server.js\"",
        "app = []",
        "app = [\"node\", 1]",
    ] {
        let err = refusal(app);
        assert!(err.contains("list of strings"), "{app}: {err}");
    }
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let found = problems("workers = \"x\"\nwokers = 1\npolicy = \"no\"\nport = 1\n");
    let lines: Vec<(usize, &str)> = found.iter().map(|p| (p.line, p.key.as_str())).collect();
    assert_eq!(lines, [(1, "workers"), (2, "wokers"), (3, "policy")]);
    let err = parse("workers = \"x\"\nwokers = 1\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("ck.toml has 2 errors:\n  line 1: "),
        "{err}"
    );
}

#[test]
fn not_toml_and_unreadable_files_are_named() {
    let err = parse("workers = \n").unwrap_err();
    assert!(matches!(err, ConfigFileError::NotToml { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.starts_with("the config file ck.toml is not valid TOML:"),
        "{text}"
    );
    assert!(text.contains("line 1"), "{text}");
    let err = parse("workers = 1\nworkers = 2\n").unwrap_err();
    assert!(err.to_string().contains("duplicate key"), "{err}");
    let missing = Path::new("/nonexistent/ck.toml");
    let err = ConfigFile::load(missing, &Run::command()).unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("cannot read the config file /nonexistent/ck.toml:"),
        "{text}"
    );
    assert!(text.contains("--config"), "{text}");
}

#[test]
fn blame_points_at_the_lines_a_message_names() {
    let file = parse("workers = 0\nmax-requests = 5\napp = [\"nodee\", \"x\"]\n").unwrap();
    let blame = file.blame("--workers 0 is out of range", |_| false);
    assert_eq!(blame.as_deref(), Some("`workers = 0` at ck.toml line 1"));
    // Overridden on the command line: the file is not to blame.
    assert_eq!(
        file.blame("--workers 0 is out of range", |id| id == "workers"),
        None
    );
    // `--max-requests` is not `--max-requests-foo`.
    assert_eq!(file.blame("--max-requests-foo", |_| false), None);
    let blame = file.blame("cannot run \"nodee\": not found in PATH", |_| false);
    assert_eq!(
        blame.as_deref(),
        Some("`app = [\"nodee\", \"x\"]` at ck.toml line 3")
    );
    assert_eq!(file.blame("something else", |_| false), None);
}
