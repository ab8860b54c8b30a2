//! The `--no-bpf` baseline (plain `SO_REUSEPORT`, no steering, no migration): the same kill and
//! reload scenarios as `under_load.rs`, under a load of new connections. Nothing protects the
//! requests here, so the failures are printed by kind for comparison, not asserted to be zero;
//! the tests only check that the scenarios ran to their end and requests were answered.

use ck_tests::churn;
use ck_tests::load::Mode;
use ck_tests::start_ready;

#[test]
fn no_bpf_sigkill_two_of_three_new_connections() {
    let (mut ck, port, status) =
        start_ready("base-kill", 3, &["--no-bpf"]).expect("start a ready ck");
    assert!(!status.bpf, "{status:#?}");
    let run = churn::kill_two(&mut ck, port, Mode::NewConnection);
    churn::print_report("base-kill", &run.report);
    eprintln!(
        "base-kill: --no-bpf, SIGKILL of {:?}: {} failed request(s) by kind {:?}",
        run.victims,
        run.report.failed(),
        churn::failures_by_kind(&run.report)
    );
    assert!(run.report.ok > 0, "{}", run.report.summary());
    assert_eq!(run.after.ready_count(), 3, "{:#?}", run.after);
}

#[test]
fn no_bpf_reload_five_times_new_connections() {
    let (mut ck, port, status) =
        start_ready("base-reload", 4, &["--no-bpf"]).expect("start a ready ck");
    assert!(!status.bpf, "{status:#?}");
    let run = churn::reload_times(&mut ck, port, Mode::NewConnection, 4, 5);
    churn::print_report("base-reload", &run.report);
    eprintln!(
        "base-reload: --no-bpf, 5 reloads of 4 workers: {} failed request(s) by kind {:?}",
        run.report.failed(),
        churn::failures_by_kind(&run.report)
    );
    run.assert_all_succeeded(&ck);
    assert!(run.report.ok > 0, "{}", run.report.summary());
}
