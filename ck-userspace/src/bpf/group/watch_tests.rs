//! The canary's kernel counters (`bpf::canary_watch`) through a loaded group: resets a slot's
//! own side sends are counted (not those its clients send), on each hook of the connection
//! counter; a watched slot's queue records how long its oldest connection waited, an unwatched
//! one nothing. These load the program: root.
use std::io::Write as _;
use std::net::TcpStream;
use std::time::Duration;

use super::conns_tests::{GROUP, PinsGone, Place, on_each_hook, plain_listener, settles_to};
use super::{BpfGroup, GroupSpec};

/// A connection the worker's side closes with `SO_LINGER` 0 (a reset sent) counts once for
/// its slot; one whose client resets it, and one closed politely, do not.
#[test]
fn resets_a_slots_side_sends_are_counted() {
    on_each_hook("resets", resets_counted);
}

fn resets_counted(place: &Place<'_>) {
    let _pins = PinsGone(place.name);
    let mut group = place.load(GroupSpec::tcp(place.name, GROUP, 1));
    let tagged = place.listener(&mut group, 3);
    let addr = tagged.local_addr().unwrap().as_socket().unwrap();
    let watch = || group.canary_watch().resets(3);
    assert_eq!(watch(), Some(0), "counted from zero");
    // The worker's side aborts: a reset sent.
    let client = TcpStream::connect(addr).unwrap();
    let (served, _) = tagged.accept().unwrap();
    served.set_linger(Some(Duration::ZERO)).unwrap();
    drop(served);
    let after_abort = settles_to(Some(1), watch);
    // The client aborts: a reset received, not sent.
    drop(client);
    let client = TcpStream::connect(addr).unwrap();
    let (served, _) = tagged.accept().unwrap();
    socket2::SockRef::from(&client)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(client);
    std::thread::sleep(Duration::from_millis(100));
    drop(served);
    // A polite close from the worker's side.
    let mut client = TcpStream::connect(addr).unwrap();
    let (served, _) = tagged.accept().unwrap();
    drop(served);
    let _ = client.write_all(b"x");
    drop(client);
    std::thread::sleep(Duration::from_millis(200));
    let after_all = watch();
    drop(group);
    assert_eq!(after_abort, Some(1), "the worker's reset counts");
    assert_eq!(
        after_all,
        Some(1),
        "a client's reset and a polite close do not"
    );
}

/// With slot 4 watched, a connection sent to it records how long the oldest connection of its
/// queue has waited; the watch's end turns the recording off.
#[test]
fn a_watched_queue_records_its_oldest_wait() {
    let name = format!("unit-watch-{}", std::process::id());
    let _pins = PinsGone(&name);
    // Loaded for a watch (`ck run --canary-max-queue-age`): with its reads of kernel memory.
    let mut group = BpfGroup::load(&GroupSpec {
        watch_queues: true,
        ..GroupSpec::tcp(&name, "tcp4-1", 1)
    })
    .expect("loading as root");
    assert_eq!(group.canary_watch().queue_watch_refused(), None);
    let watched = plain_listener();
    group.insert(4, &watched).expect("inserting the socket");
    group.attach(&watched).expect("attaching the program");
    group.watch_queues(&[4]).expect("watching");
    let addr = watched.local_addr().unwrap().as_socket().unwrap();
    // Slot 4 alone in the active set.
    let mut set = ck_common::ActiveSet::EMPTY;
    set.slots[0] = 4;
    (set.ready_len, set.live_len) = (1, 1);
    group.publish(&set, &set, false).expect("publishing");
    let first = TcpStream::connect(addr).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    let second = TcpStream::connect(addr).unwrap();
    let waited = group.canary_watch().queue_age(4);
    group.watch_queues(&[]).expect("ending the watch");
    let third = TcpStream::connect(addr).unwrap();
    let after = group.canary_watch().queue_age(4);
    drop((first, second, third, group));
    let waited = waited.expect("read where the program reads kernel memory");
    assert!(
        waited >= Duration::from_millis(140) && waited < Duration::from_secs(5),
        "{waited:?}"
    );
    assert_eq!(
        after,
        Some(waited),
        "nothing more recorded once the watch ended"
    );
}

/// Without a watch asked at `ck run`, a round-robin group's program is loaded without its
/// reads of kernel memory (the verifier's walk of them would add to every start), and says
/// what to give instead.
#[test]
fn without_a_watch_asked_the_program_is_loaded_without_its_reads() {
    let name = format!("unit-nowatch-{}", std::process::id());
    let _pins = PinsGone(&name);
    let group = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-1", 1)).expect("loading as root");
    let why = group
        .canary_watch()
        .queue_watch_refused()
        .map(str::to_string);
    assert!(
        why.as_deref()
            .is_some_and(|w| w.contains("give --canary-max-queue-age to ck run")),
        "{why:?}"
    );
}
