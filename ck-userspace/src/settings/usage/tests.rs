//! The messages of refused command lines, against `ck run`'s real options and a few commands
//! shaped like ck's others.
use std::ffi::OsString;

use clap::{Arg, ArgAction, Command};

use super::*;
use crate::settings::run_args::run_command;

/// `ck` with `run` (the real one), `status` (--name, --wait) and `scale` (a count).
fn ck() -> Command {
    let name = || Arg::new("name").long("name");
    Command::new("ck")
        .subcommand(run_command())
        .subcommand(
            Command::new("status")
                .arg(name())
                .arg(Arg::new("wait").long("wait").action(ArgAction::SetTrue))
                .arg(
                    Arg::new("timeout")
                        .long("timeout")
                        .requires("wait")
                        .value_parser(ck_worker::units::duration::parse_duration),
                ),
        )
        .subcommand(
            Command::new("scale")
                .arg(
                    Arg::new("workers")
                        .value_name("WORKERS")
                        .required(true)
                        .value_parser(clap::value_parser!(u32)),
                )
                .arg(name()),
        )
        .subcommand(Command::new("secret").hide(true))
}

/// ck's message for `ck ARGS`, which must be refused.
fn refused(args: &str) -> String {
    let args: Vec<OsString> = args.split_whitespace().map(OsString::from).collect();
    let argv = std::iter::once(OsString::from("ck")).chain(args.iter().cloned());
    let err = match ck().try_get_matches_from(argv) {
        Ok(_) => panic!("`ck {args:?}` was accepted"),
        Err(e) => e,
    };
    message(&err, &ck(), &args)
}

#[test]
fn a_mistyped_option_of_run_is_named_with_clap_s_nearest_and_not_taken_as_the_app() {
    for args in [
        "run --wrokers 4 -- node server.js",
        "run --wrokers=4 node server.js",
        "run --wrokers 4",
    ] {
        let err = refused(args);
        assert!(
            err.starts_with("unknown option --wrokers for `ck run` (did you mean --workers?)"),
            "{args}: {err}"
        );
        assert!(
            err.ends_with("an app's own options go after `--` or after the app's path: ck run [OPTIONS] -- APP [ARGS]..."),
            "{args}: {err}"
        );
    }
    let err = refused("run -w 4 --polcy hash -- app");
    assert!(
        err.contains("--polcy for `ck run` (did you mean --policy?)"),
        "{err}"
    );
    let err = refused("run -W 4 -- app");
    assert!(
        err.starts_with("unknown option -W for `ck run` (did you mean -w (--workers)?)"),
        "{err}"
    );
}

#[test]
fn the_app_s_own_options_after_the_app_or_after_dashes_are_the_app_s() {
    for args in [
        "run -w 2 node --inspect server.js",
        "run -w 2 -- node --wrokers",
        "run -- --weird-program",
    ] {
        let argv = std::iter::once("ck").chain(args.split_whitespace());
        assert!(ck().try_get_matches_from(argv).is_ok(), "{args}");
    }
}

#[test]
fn an_option_in_the_wrong_place_names_its_command() {
    let err = refused("--workers 4 run");
    assert_eq!(
        err,
        "unknown option --workers for `ck`: it is an option of `ck run`, given after it: ck run \
         --workers ..."
    );
    assert_eq!(
        refused("status --workers 4"),
        "unknown option --workers for `ck status`: it is an option of `ck run`; see `ck status \
         --help` for its options"
    );
    assert_eq!(
        refused("--name web status"),
        "unknown option --name for `ck`: it is an option of `ck status`, given after it: ck \
         status --name ..."
    );
    let err = refused("--name web");
    assert!(
        err.contains("it is an option of the commands run, status, scale, given after the command"),
        "{err}"
    );
    let err = refused("status --zzzz");
    assert_eq!(
        err,
        "unknown option --zzzz for `ck status`; see `ck status --help` for its options"
    );
}

#[test]
fn unknown_commands_and_stray_words() {
    assert_eq!(
        refused("statsu"),
        "unknown command \"statsu\" (did you mean status?)"
    );
    assert_eq!(
        refused("node server.js"),
        "unknown command \"node\": the commands are run, status, scale; to run a program under \
         ck: ck run -- node ..."
    );
    assert_eq!(
        refused("status web"),
        "unexpected argument \"web\" for `ck status`, which takes none (did you mean --name \
         web?)"
    );
    let err = refused("scale 4 5");
    assert!(
        err.starts_with("unexpected argument \"5\" for `ck scale`; usage: ck scale"),
        "{err}"
    );
}

#[test]
fn bad_values_name_the_option_and_what_it_takes() {
    assert_eq!(
        refused("run --workers four"),
        "--workers \"four\": expected a whole number from 0 to 4294967295"
    );
    assert_eq!(
        refused("run --boot-boost 99"),
        "--boot-boost \"99\": expected a whole number from 0 to 39"
    );
    assert_eq!(
        refused("run --policy fastest"),
        "--policy \"fastest\": expected one of: hash, round-robin, least-queue, sticky, \
         least-conn"
    );
    let err = refused("run --policy round-robbin");
    assert!(err.ends_with("(did you mean round-robin?)"), "{err}");
    let err = refused("run --drain-timeout 5x");
    assert!(
        err.starts_with("--drain-timeout \"5x\": invalid duration \"5x\"")
            && err.ends_with("a bare number is seconds (30 = 30s)"),
        "{err}"
    );
    assert_eq!(
        refused("run --workers"),
        "--workers needs a value: --workers N"
    );
    let err = refused("scale many");
    assert!(
        err.ends_with("\"many\": expected a whole number from 0 to 4294967295"),
        "{err}"
    );
}

#[test]
fn ports_say_why_not_zero_and_their_range() {
    let err = refused("run --port 0");
    assert!(
        err.starts_with("--port \"0\": port 0 asks the kernel for any free port")
            && err.ends_with("give a port from 1 to 65535, e.g. 8080"),
        "{err}"
    );
    let err = refused("run --port 99999");
    assert_eq!(
        err,
        "--port \"99999\": 99999 is out of range: ports go from 1 to 65535; give e.g. 8080"
    );
    let err = refused("run -p http");
    assert!(err.contains("\"http\" is not a port"), "{err}");
}

#[test]
fn missing_and_conflicting_arguments() {
    let err = refused("scale");
    assert!(
        err.starts_with("`ck scale` needs <WORKERS>; usage: ck scale"),
        "{err}"
    );
    let err = refused("status --timeout 1s");
    assert!(err.starts_with("`ck status` needs --wait"), "{err}");
    let err = refused("run --name a --name b");
    assert_eq!(err, "--name is given twice for `ck run`: give it once");
}

#[test]
fn the_config_file_gets_clap_s_nearest_option_too() {
    let run = run_command();
    assert_eq!(similar_option(&run, "wokers").as_deref(), Some("workers"));
    assert_eq!(
        similar_option(&run, "ready-timout").as_deref(),
        Some("ready-timeout")
    );
    assert_eq!(similar_option(&run, "zzzzzz"), None);
    assert_eq!(
        similar_option(&run, "workers"),
        None,
        "an option is no typo"
    );
    assert_eq!(similar_option(&run, ""), None);
}
