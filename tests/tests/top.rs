//! `ck top`: `--once` prints every slot with its pid, state and the new connections per second
//! it got while clients connected; the live view runs in a real terminal (tmux), shows every
//! slot, drains the selected one with `d`, undrains it with `u`, reloads with `r`, says so when
//! the instance goes away, and `q` (or SIGTERM) leaves the terminal as it found it (main screen,
//! cooked mode).

use std::process::Stdio;
use std::time::Duration;

use ck_tests::ck::ck_command;
use ck_tests::http::Tally;
use ck_tests::sys::{TempDir, children_of, signal};
use ck_tests::tmux::Tmux;
use ck_tests::{Ck, Status, ck_bin, get_new_conn, local, start_ready};
use nix::sys::signal::Signal;

/// How long the screen or the instance gets to show what a step waits for.
const WAIT: Duration = Duration::from_secs(15);

/// The fields of the line of `screen` that shows slot `slot` with worker `pid`, if there is one.
fn slot_row(screen: &str, slot: u32, pid: u32) -> Option<Vec<String>> {
    let (slot, pid) = (slot.to_string(), pid.to_string());
    screen
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() > 3 && f[0] == slot && f[1] == pid)
}

/// Whether `screen` shows every slot of `status` with its pid and state.
fn shows_every_slot(screen: &str, status: &Status) -> bool {
    status.slots.iter().all(|s| {
        slot_row(screen, s.slot, s.pid.expect("a worker")).is_some_and(|f| f[2] == s.state)
    })
}

#[test]
fn top_once_shows_every_slot_with_its_rate_under_traffic() {
    let (ck, port, status) =
        start_ready("top-once", 3, &["--policy", "round-robin"]).expect("start a ready ck");
    let mut top = ck_command()
        .args(["top", "--once", "--name", ck.name()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting ck top --once");
    // Clients connect for as long as ck top measures (between its two reports).
    let mut tally = Tally::default();
    while top.try_wait().expect("waiting for ck top").is_none() {
        tally.add(&get_new_conn(local(port)));
    }
    let out = top.wait_with_output().expect("ck top's output");
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "{text}{}\nclients: {tally:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "ck top --once failed: {}", out.status);
    assert_eq!(tally.failed(), 0, "{tally:?}");
    assert!(
        text.lines().next().is_some_and(|l| l.contains(ck.name())),
        "{text}"
    );
    for s in &status.slots {
        let pid = s.pid.expect("a worker");
        let row = slot_row(&text, s.slot, pid)
            .unwrap_or_else(|| panic!("no row for slot {} (pid {pid}):\n{text}", s.slot));
        assert_eq!(row[2], "ready", "{row:?}");
        let rate: f64 = row[3].parse().unwrap_or_else(|_| panic!("rate in {row:?}"));
        assert!(
            rate > 0.0,
            "slot {} got no connection per second: {row:?}",
            s.slot
        );
    }
    let totals = text
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .unwrap_or_else(|| panic!("no totals line:\n{text}"));
    assert!(totals.contains("3/3 ready"), "{totals}");
    assert!(text.contains("rates over the last"), "{text}");
}

/// `ck top` of `ck` in a 120 x 40 terminal; after it exits, its exit status and the
/// terminal's modes (`stty -a`) go to files `code` and `stty` of the directory returned.
fn top_in_tmux(ck: &Ck) -> (Tmux, TempDir) {
    let dir = TempDir::new(ck.name());
    let command = format!(
        "{} top --name {}; code=$?; stty -a > {}; echo $code > {}",
        ck_bin().display(),
        ck.name(),
        dir.path().join("stty").display(),
        dir.path().join("code").display()
    );
    (Tmux::start(ck.name(), 120, 40, &command), dir)
}

/// Waits for ck top to exit with `code` and checks that it gave the terminal back: the main
/// screen again, and line editing, echo and signal keys on (`stty`, run after it).
fn assert_exits_restoring_the_terminal(tmux: &Tmux, dir: &TempDir, code: i32) {
    tmux.wait_exit(WAIT);
    let read = |file: &str| std::fs::read_to_string(dir.path().join(file)).expect(file);
    assert_eq!(
        read("code").trim(),
        code.to_string(),
        "ck top's exit status; screen:\n{}",
        tmux.screen()
    );
    assert_eq!(tmux.pane("alternate_on"), "0", "alternate screen left");
    let modes = read("stty");
    let flags: Vec<&str> = modes.split([' ', ';', '\n']).collect();
    for mode in ["icanon", "echo", "isig"] {
        assert!(flags.contains(&mode), "{mode} not restored: {modes}");
    }
}

#[test]
fn top_in_a_terminal_drains_undrains_reloads_reports_a_lost_instance_and_quits_cleanly() {
    let (mut ck, _port, status) = start_ready("top-tty", 3, &[]).expect("start a ready ck");
    let (tmux, dir) = top_in_tmux(&ck);
    tmux.wait_screen("every slot on screen", WAIT, |screen| {
        shows_every_slot(screen, &status)
    });
    assert_eq!(
        tmux.pane("alternate_on"),
        "1",
        "ck top uses the alternate screen"
    );

    // Row 0 is selected at first: one down is slot 1; `d` drains it.
    tmux.keys(&["j", "d"]);
    ck.wait_status("slot 1 drained from ck top", WAIT, |s| {
        s.slot(1).drained && s.slot(1).state == "draining" && !s.active.contains(&1)
    })
    .expect("wait for the status");
    let pid1 = status.worker_pid(1);
    tmux.wait_screen("slot 1 shown drained", WAIT, |screen| {
        slot_row(screen, 1, pid1).is_some_and(|f| f[2] == "drained")
    });
    // `u` puts it back.
    tmux.keys(&["u"]);
    ck.wait_status("slot 1 undrained from ck top", WAIT, |s| {
        !s.slot(1).drained && s.active.contains(&1)
    })
    .expect("wait for the status");

    // `r` reloads: the answer shows at the bottom, and new workers in the table.
    tmux.keys(&["r"]);
    tmux.wait_screen("the reload's answer", Duration::from_secs(30), |screen| {
        screen.contains("reload: reloaded 3 worker(s)")
    });
    // The answer comes once the last replacement is flipped in; the old worker it replaced
    // still drains for a moment.
    let old = status.worker_pids();
    let reloaded = ck
        .wait_status("the old workers gone", WAIT, |s| {
            s.worker_pids().is_disjoint(&old)
        })
        .expect("wait for the status");
    tmux.wait_screen("the new workers on screen", WAIT, |screen| {
        shows_every_slot(screen, &reloaded)
    });

    // The instance goes away: ck top says so and keeps trying.
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    tmux.wait_screen("the lost instance on screen", WAIT, |screen| {
        screen.contains("NOT REACHABLE") && screen.contains("no ck instance named")
    });

    tmux.keys(&["q"]);
    assert_exits_restoring_the_terminal(&tmux, &dir, 0);
}

#[test]
fn top_gives_the_terminal_back_when_terminated() {
    let (ck, _port, status) = start_ready("top-term", 1, &[]).expect("start a ready ck");
    let (tmux, dir) = top_in_tmux(&ck);
    tmux.wait_screen("the slot on screen", WAIT, |screen| {
        shows_every_slot(screen, &status)
    });
    // The pane runs a shell, whose child is ck top.
    let shell: u32 = tmux.pane("pane_pid").parse().expect("the pane's pid");
    let top = children_of(shell);
    assert_eq!(top.len(), 1, "ck top under the pane's shell: {top:?}");
    signal(top[0], Signal::SIGTERM);
    assert_exits_restoring_the_terminal(&tmux, &dir, 128 + Signal::SIGTERM as i32);
}
