//! `least-queue` on the exact queue depth: the select program reads each candidate socket's
//! live depth itself, so a worker that stops accepting gets no new connection once its queue
//! holds more than the others' and its oldest connection has waited `--queue-patience`,
//! however rarely the supervisor samples (every worker of a small fleet is compared: two
//! stopped of four get one connection each); a queue younger than the patience keeps its
//! round-robin turn; and the forced fallback (`CK_QUEUE_DEPTH=sampled`) says so in the log and
//! in `ck status`, and steers by the supervisor's samples instead.
//!
//! The tests that send one connection after the other wait [`ANSWER_WAIT`] for each answer, far
//! longer than the default patience (10 ms): a connection queued on the stopped worker has
//! waited the patience before the next one is sent.
//!
//! All run with `--stall-timeout 0` (a stopped worker stays in the active set: only the
//! policy keeps connections away from it) and `--sample-interval 4s` (samples far apart, so
//! that steering by them shows).

use std::net::SocketAddr;
use std::time::Duration;

use ck_tests::http::{Pending, finish_all, send_new_conn};
use ck_tests::sys::{free_port, on_one_cpu, signal};
use ck_tests::{Ck, READY_TIMEOUT, Status, Tally, instance_name, local, probe_base_for};
use nix::sys::signal::Signal;

/// The slot whose worker is stopped.
const STOPPED: u32 = 2;
/// Connections sent one after the other.
const N: u32 = 30;
/// How long an answer may take from a worker that accepts.
const ANSWER_WAIT: Duration = Duration::from_millis(300);

/// Starts `-w 3 --policy least-queue` (no stall detection, rare samples) with `env`, waits
/// until the fleet is ready and steering on, and stops slot [`STOPPED`]'s worker (SIGSTOP: it
/// accepts nothing until SIGCONT). Returns ck, the address, the stopped pid and the status.
fn start_and_freeze(what: &str, env: &[(&str, &str)]) -> (Ck, SocketAddr, u32, Status) {
    let (ck, addr, pids, status) = start_and_stop(what, 3, &[STOPPED], env, &[]);
    (ck, addr, pids[0], status)
}

/// Starts `-w workers --policy least-queue` (no stall detection, rare samples) with `env` and
/// the options `extra`, waits until the fleet is ready and steering on, and stops the workers
/// of the slots `stopped` (SIGSTOP). Returns ck, the address, the stopped pids (in `stopped`'s
/// order) and the status.
fn start_and_stop(
    what: &str,
    workers: usize,
    stopped: &[u32],
    env: &[(&str, &str)],
    extra: &[&str],
) -> (Ck, SocketAddr, Vec<u32>, Status) {
    let port = free_port();
    let (port_text, base) = (port.to_string(), probe_base_for(port).to_string());
    let workers_text = workers.to_string();
    let args = [
        "-w",
        &workers_text,
        "--port",
        &port_text,
        "--probe-port-base",
        &base,
        "--policy",
        "least-queue",
        "--stall-timeout",
        "0",
        "--sample-interval",
        "4s",
    ];
    let args: Vec<&str> = args.iter().chain(extra).copied().collect();
    let mut ck = Ck::start_with_env(&instance_name(what, port), &args, env).expect("start ck");
    let status = ck
        .wait_status("all ready, steering on", READY_TIMEOUT, |s| {
            s.ready_count() == workers && s.bpf && s.queue_depth.is_some()
        })
        .expect("wait for the status");
    let pids: Vec<u32> = stopped
        .iter()
        .map(|&slot| status.worker_pid(slot))
        .collect();
    for &pid in &pids {
        signal(pid, Signal::SIGSTOP);
    }
    (ck, local(port), pids, status)
}

/// The first group's `config` entry as `ck maps --json` reads it from the pinned map.
fn pinned_config(ck: &Ck) -> serde_json::Value {
    let maps: serde_json::Value =
        serde_json::from_str(&ck.ctl_ok(&["maps", "--json"]).expect("ck maps"))
            .expect("ck maps --json");
    maps["groups"][0]["config"].clone()
}

/// The queue depth of `slot`'s record in the first group's pinned `slots` map (the last
/// sample: what the fallback steers by).
fn pinned_depth(ck: &Ck, slot: u32) -> u64 {
    let maps: serde_json::Value =
        serde_json::from_str(&ck.ctl_ok(&["maps", "--json"]).expect("ck maps"))
            .expect("ck maps --json");
    let slots = maps["groups"][0]["slots"]
        .as_array()
        .expect("slots")
        .clone();
    let record = slots.iter().find(|s| s["slot"] == slot);
    record.map_or(0, |s| s["queue_depth"].as_u64().expect("queue_depth"))
}

/// Sends `n` requests on new connections at once from one CPU (one round-robin cursor), without
/// waiting for answers.
fn burst_from_one_cpu(addr: SocketAddr, n: u32) -> Vec<Pending> {
    on_one_cpu(move || {
        (0..n)
            .map(|i| send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}")))
            .collect()
    })
}

/// Connections the program sent to `slot` since `before`.
fn selected_since(ck: &Ck, before: &Status, slot: u32) -> u64 {
    ck.status().expect("ck status").slot(slot).selected - before.slot(slot).selected
}

/// Sends `n` requests on new connections one after the other; before each, every earlier one
/// to a worker that accepts has been answered (so those workers' queues are empty). Returns the
/// answers and the connections left unanswered (queued on the stopped worker).
fn one_by_one(addr: SocketAddr, n: u32) -> (Tally, Vec<Pending>) {
    let mut answered = Tally::default();
    let mut queued = Vec::new();
    for i in 0..n {
        let mut pending = send_new_conn(addr).unwrap_or_else(|e| panic!("request {i}: {e}"));
        match pending.answer_within(ANSWER_WAIT) {
            Some(answer) => answered.add(&answer),
            None => queued.push(pending),
        }
    }
    (answered, queued)
}

#[test]
fn least_queue_sends_nothing_more_to_a_worker_whose_queue_holds_more() {
    let (mut ck, addr, pid, before) = start_and_freeze("lq-exact", &[]);
    assert_eq!(
        before.queue_depth.as_deref(),
        Some("exact (BPF)"),
        "{before:#?}"
    );
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("least-queue depth: exact (BPF)"), "{text}");
    assert_eq!(before.queue_patience_us, Some(0), "{before:#?}");
    assert!(text.contains("least-queue patience: 0 ("), "{text}");
    let config = pinned_config(&ck);
    assert_eq!(config["flags"], 1, "{config}");
    assert!(config["queue_offsets"][2].as_u64() > Some(0), "{config}");
    assert!(!ck.log().contains("sampled queue depths"), "{}", ck.log());

    let (answered, queued) = one_by_one(addr, N);
    eprintln!(
        "answered: {answered:?}, queued on the stopped worker: {}",
        queued.len()
    );
    // Until it holds one, the stopped worker ties with the others (ties go to the round-robin
    // candidate); from then on its queue is the longer one of every pair it is in.
    assert_eq!(queued.len(), 1, "{answered:?}");
    assert_eq!(answered.ok, N - 1, "{answered:?}");
    assert_eq!(answered.slot(STOPPED), 0, "{answered:?}");
    assert!(answered.slot(0) > 0 && answered.slot(1) > 0, "{answered:?}");
    assert_eq!(selected_since(&ck, &before, STOPPED), 1);

    signal(pid, Signal::SIGCONT);
    let late = finish_all(queued);
    assert_eq!(
        (late.ok, late.slot(STOPPED), late.pid(pid)),
        (1, 1, 1),
        "{late:?}"
    );
    ck.wait_status("the stopped worker still ready", READY_TIMEOUT, |s| {
        s.slot(STOPPED).state == "ready" && s.slot(STOPPED).pid == Some(pid)
    })
    .expect("wait for the status");
}

/// A restarted worker's slot gets a new socket, and the program reads that one's queue: the
/// socket address it keeps per slot (read once, not at every selection) is renewed with the
/// slot's `sockets` entry. Read from the old, closed socket, the stopped replacement's queue would
/// look empty and it would keep getting connections.
#[test]
fn least_queue_reads_the_new_socket_of_a_restarted_worker() {
    let (mut ck, addr, pid, _) = start_and_freeze("lq-renew", &[]);
    // Every slot is a first candidate in turn: the program has read (and kept) each socket.
    let (answered, queued) = one_by_one(addr, N);
    assert_eq!(
        (answered.ok, queued.len()),
        (N - 1, 1),
        "before the restart: {answered:?}"
    );
    signal(pid, Signal::SIGKILL);
    let restarted = ck
        .wait_status("the killed worker restarted", READY_TIMEOUT, |s| {
            s.ready_count() == 3 && s.slot(STOPPED).pid.is_some_and(|p| p != pid)
        })
        .expect("wait for the status");
    drop(queued);
    let new_pid = restarted.worker_pid(STOPPED);
    signal(new_pid, Signal::SIGSTOP);

    let (answered, queued) = one_by_one(addr, N);
    eprintln!("after the restart: {answered:?}, queued: {}", queued.len());
    assert_eq!(queued.len(), 1, "{answered:?}");
    assert_eq!(answered.ok, N - 1, "{answered:?}");
    assert_eq!(answered.slot(STOPPED), 0, "{answered:?}");
    assert_eq!(selected_since(&ck, &restarted, STOPPED), 1);

    signal(new_pid, Signal::SIGCONT);
    let late = finish_all(queued);
    assert_eq!(
        (late.ok, late.slot(STOPPED), late.pid(new_pid)),
        (1, 1, 1),
        "{late:?}"
    );
}

#[test]
fn the_forced_fallback_says_so_and_steers_by_the_sampled_depth() {
    let forced = [("CK_QUEUE_DEPTH", "sampled")];
    let (ck, addr, pid, before) = start_and_freeze("lq-sampled", &forced);
    let said = "sampled (forced by CK_QUEUE_DEPTH=sampled)";
    assert_eq!(before.queue_depth.as_deref(), Some(said), "{before:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(
        text.contains(&format!("least-queue depth: {said}")),
        "{text}"
    );
    assert_eq!(pinned_config(&ck)["flags"], 0);
    let warned = ck.log_lines("least-queue steers by sampled queue depths");
    assert_eq!(warned.len(), 1, "one warning line: {}", ck.log());
    assert!(warned[0].contains("CK_QUEUE_DEPTH=sampled"), "{warned:?}");

    // A quick burst from one CPU between two samples: the sampled depths are all 0, so every
    // pair ties and goes to the round-robin candidate, the stopped worker included.
    let burst = burst_from_one_cpu(addr, N);
    let fed = selected_since(&ck, &before, STOPPED);
    assert!(
        fed >= 2,
        "the stopped worker got {fed}: not steered by samples?"
    );

    // `ck status` reads the depth when asked; the program steers by the sampled record in
    // `slots`. Once a sample has seen its queue, it gets nothing more.
    let live = ck.status().expect("ck status");
    assert_eq!(u64::from(live.slot(STOPPED).queue_depth), fed, "{live:#?}");
    let deadline = std::time::Instant::now() + READY_TIMEOUT;
    while pinned_depth(&ck, STOPPED) != fed {
        assert!(
            std::time::Instant::now() < deadline,
            "no sample of the stopped worker's queue ({fed}) within {READY_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let sampled = ck.status().expect("ck status");
    let (answered, queued) = one_by_one(addr, N);
    eprintln!("after the sample: {answered:?}");
    assert!(
        queued.is_empty(),
        "{} more queued on the stopped worker",
        queued.len()
    );
    assert_eq!(answered.ok, N, "{answered:?}");
    assert_eq!(selected_since(&ck, &sampled, STOPPED), 0);

    signal(pid, Signal::SIGCONT);
    let late = finish_all(burst);
    assert_eq!(late.ok, N, "requests lost: {late:?}");
    assert_eq!(u64::from(late.slot(STOPPED)), fed, "{late:?}");
}

#[test]
fn least_queue_compares_every_worker_of_a_small_fleet() {
    // Two of 4 stopped: against one random other, a stopped worker holding one connection
    // ties with the other stopped one (1 in 3 of its turns) and takes another; compared with
    // every worker, an empty queue always beats it.
    let stopped = [1, 3];
    let (ck, addr, pids, before) = start_and_stop("lq-all", 4, &stopped, &[], &[]);
    let n = 40;
    let (answered, queued) = one_by_one(addr, n);
    eprintln!(
        "answered: {answered:?}, queued on the stopped workers: {}",
        queued.len()
    );
    // Each stopped worker gets the connection of its first round-robin turn (an empty queue
    // ties, and ties go to the round-robin candidate), and none after it.
    assert_eq!(queued.len(), 2, "{answered:?}");
    assert_eq!(answered.ok, n - 2, "{answered:?}");
    for slot in stopped {
        assert_eq!(answered.slot(slot), 0, "{answered:?}");
        assert_eq!(selected_since(&ck, &before, slot), 1, "slot {slot}");
    }
    assert!(answered.slot(0) > 0 && answered.slot(2) > 0, "{answered:?}");

    for pid in &pids {
        signal(*pid, Signal::SIGCONT);
    }
    let late = finish_all(queued);
    assert_eq!(late.ok, 2, "{late:?}");
    for (slot, pid) in stopped.iter().zip(&pids) {
        assert_eq!((late.slot(*slot), late.pid(*pid)), (1, 1), "{late:?}");
    }
}

#[test]
fn a_young_queue_keeps_its_turn_until_its_oldest_connection_waited_the_patience() {
    let patience = Duration::from_secs(2);
    let (ck, addr, pids, before) = start_and_stop(
        "lq-patience",
        3,
        &[STOPPED],
        &[],
        &["--queue-patience", "2s"],
    );
    assert_eq!(pinned_config(&ck)["queue_patience_us"], 2_000_000);
    assert_eq!(before.queue_patience_us, Some(2_000_000), "{before:#?}");
    let status_text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(
        status_text.contains("least-queue patience: 2s"),
        "{status_text}"
    );
    let text = ck.ctl_ok(&["maps"]).expect("ck maps");
    assert!(text.contains("queue patience 2000000 us"), "{text}");

    // A burst from one CPU, well within the patience: every queue keeps up (the stopped worker's
    // oldest connection is younger than 2 s), so each slot gets its round-robin turn: exactly
    // a third, however long the stopped worker's queue grows.
    let burst_len = 9;
    let sent = std::time::Instant::now();
    let burst = burst_from_one_cpu(addr, burst_len);
    let fed = selected_since(&ck, &before, STOPPED);
    assert!(
        sent.elapsed() < patience,
        "the burst took {:?}",
        sent.elapsed()
    );
    assert_eq!(
        fed,
        u64::from(burst_len / 3),
        "{:#?}",
        ck.status().expect("ck status")
    );
    assert_eq!(
        ck.status().expect("ck status").slot(STOPPED).queue_depth,
        burst_len / 3
    );

    // Once the oldest of them has waited the patience, the stopped worker gets nothing more.
    std::thread::sleep(patience.saturating_sub(sent.elapsed()) + Duration::from_millis(200));
    let waited = ck.status().expect("ck status");
    let (answered, queued) = one_by_one(addr, N);
    assert!(queued.is_empty(), "{} more queued", queued.len());
    assert_eq!(answered.ok, N, "{answered:?}");
    assert_eq!(selected_since(&ck, &waited, STOPPED), 0);

    signal(pids[0], Signal::SIGCONT);
    let late = finish_all(burst);
    assert_eq!(late.ok, burst_len, "requests lost: {late:?}");
    assert_eq!(late.pid(pids[0]), burst_len / 3, "{late:?}");
}
