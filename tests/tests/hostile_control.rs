//! Hostile control clients: one that connects and says nothing, one that sends 10 MB without a
//! newline, one that sends bytes that are not JSON, a thousand at once, and accept failing for
//! lack of file descriptors. Each is answered or closed with the reason; ck keeps answering the
//! other clients and its workers keep serving; its memory and open files stay bounded.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use ck_tests::ck::control_socket;
use ck_tests::sys::poll_until;
use ck_tests::{Ck, READY_TIMEOUT, burst, local, start_ready};

/// `{"cmd":"status"}`: what `ck status` sends.
const STATUS: &[u8] = b"{\"cmd\":\"status\"}\n";

fn connect(name: &str) -> UnixStream {
    let s = UnixStream::connect(control_socket(name)).expect("connecting to the control socket");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// The next answer line on `s` (empty at end of stream).
fn answer(reader: &mut BufReader<UnixStream>) -> String {
    let mut line = String::new();
    reader.read_line(&mut line).expect("reading an answer");
    line
}

/// Whether `s` is closed by the other end (reads end of stream).
fn closed(reader: &mut BufReader<UnixStream>) -> bool {
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).is_ok()
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmRSS")
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Raises this process's soft open-file limit to its hard limit (for the 1,000 connections).
fn raise_own_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
}

#[test]
fn a_silent_client_is_closed_with_the_reason_while_others_are_served() {
    let (ck, port, _) = start_ready("ctl-silent", 2, &[]).expect("start a ready ck");
    let silent = connect(ck.name());
    ck.ctl_ok(&["status"]).expect("ck status");
    assert_eq!(burst(local(port), 20).ok, 20, "workers serve meanwhile");
    let mut reader = BufReader::new(silent);
    let why = answer(&mut reader);
    assert!(why.contains("no request within"), "{why}");
    assert!(closed(&mut reader), "closed after the reason");
}

#[test]
fn an_endless_request_is_cut_off_and_memory_stays_bounded() {
    let (ck, port) = start_settled("ctl-endless", 2);
    let before = rss_kib(ck.pid());
    let stream = connect(ck.name());
    let mut writer = stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 * 1024];
        let mut sent = 0usize;
        while sent < 10 * 1024 * 1024 {
            // ck stops reading and closes: the write fails (EPIPE), as it should.
            if writer.write_all(&chunk).is_err() {
                break;
            }
            sent += chunk.len();
        }
        sent
    });
    let mut reader = BufReader::new(stream);
    let why = answer(&mut reader);
    assert!(why.contains("request too long"), "{why}");
    let sent = sender.join().unwrap();
    eprintln!("sent {sent} bytes before ck closed");
    assert!(sent < 10 * 1024 * 1024, "ck read all 10 MB");
    ck.ctl_ok(&["status"]).expect("ck status");
    assert_eq!(burst(local(port), 20).ok, 20);
    let after = rss_kib(ck.pid());
    eprintln!("ck RSS {before} KiB -> {after} KiB");
    assert!(
        after < before + 4 * 1024,
        "ck grew by {} KiB",
        after.saturating_sub(before)
    );
}

#[test]
fn a_request_that_is_not_json_is_answered_and_the_connection_stays_usable() {
    let (ck, _port, _) = start_ready("ctl-garbage", 1, &[]).expect("start a ready ck");
    let mut stream = connect(ck.name());
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    stream.write_all(b"\xff\xfe not json {{{\n").unwrap();
    let why = answer(&mut reader);
    assert!(why.contains("malformed request"), "{why}");
    stream.write_all(b"{\"cmd\":\"explode\"}\n").unwrap();
    let why = answer(&mut reader);
    assert!(why.contains("malformed request"), "{why}");
    stream.write_all(STATUS).unwrap();
    let status = answer(&mut reader);
    assert!(status.contains("\"slots\""), "{status}");
}

/// Starts `workers` ready workers and waits until ck has opened all it opens at start: the
/// exit watch loads after steering (a few dozen descriptors: maps, program, ring buffer; and
/// the memory of its BTF parse, while it lasts).
fn start_settled(what: &str, workers: usize) -> (Ck, u16) {
    let (mut ck, port, _) = start_ready(what, workers, &[]).expect("start a ready ck");
    ck.wait_status("the exit watch loaded", READY_TIMEOUT, |s| {
        s.exits_watched.is_some()
    })
    .expect("wait for the status");
    (ck, port)
}

#[test]
fn a_thousand_idle_connections_do_not_lock_out_other_clients() {
    raise_own_fd_limit();
    let (ck, port) = start_settled("ctl-crowd", 2);
    let fds_before = open_fds(ck.pid());
    let crowd: Vec<UnixStream> = (0..1000).map(|_| connect(ck.name())).collect();
    // A client that talks is answered although a thousand connections say nothing.
    ck.ctl_ok(&["status"]).expect("ck status");
    assert_eq!(burst(local(port), 20).ok, 20, "workers serve meanwhile");
    let mut first = BufReader::new(crowd[0].try_clone().unwrap());
    let why = answer(&mut first);
    assert!(why.contains("no request within"), "{why}");
    let back = poll_until(READY_TIMEOUT, Duration::from_millis(50), || {
        open_fds(ck.pid()) <= fds_before + 10
    });
    assert!(
        back,
        "ck still holds {} fds (had {fds_before})",
        open_fds(ck.pid())
    );
    drop(crowd);
    ck.ctl_ok(&["status"]).expect("ck status");
}

#[test]
fn accept_failing_for_lack_of_file_descriptors_pauses_instead_of_spinning() {
    raise_own_fd_limit();
    let (ck, port) = start_settled("ctl-emfile", 1);
    // Leave ck room for a few more files only.
    let limit = open_fds(ck.pid()) + 8;
    let set = std::process::Command::new("prlimit")
        .args([
            "--pid",
            &ck.pid().to_string(),
            &format!("--nofile={limit}:{limit}"),
        ])
        .status()
        .expect("running prlimit");
    assert!(set.success());
    let crowd: Vec<UnixStream> = (0..100).map(|_| connect(ck.name())).collect();
    // The crowd is closed for its silence, which frees the fds; then a talking client is served.
    let served = poll_until(READY_TIMEOUT, Duration::from_millis(100), || {
        ck.ctl(&["status"]).expect("ck status").status.success()
    });
    assert!(served, "{}", ck.log());
    drop(crowd);
    let log = ck.log();
    let streaks = log.matches("control socket: accept failed").count();
    // "accept works again failures=N": the failed attempts of each streak.
    let failures: u64 = log
        .lines()
        .filter(|l| l.contains("accept works again"))
        .filter_map(|l| {
            l.split("failures=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    eprintln!("{streaks} streaks of failed accepts, {failures} failed attempts in all");
    assert!(
        streaks >= 1,
        "accept never failed: the test did not reach EMFILE\n{log}"
    );
    // Pauses of 10 ms doubling to 1 s allow a few attempts per streak; a loop that retries at
    // once makes hundreds of thousands a second.
    assert!(
        failures < 1000,
        "{failures} failed accepts: accept spins\n{log}"
    );
    assert_eq!(burst(local(port), 20).ok, 20, "workers serve");
}
