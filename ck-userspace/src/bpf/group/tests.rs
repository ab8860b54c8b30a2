//! Tests of `group`: loading each policy's program as root, and the maps it writes.
use super::super::pins;
use super::*;

/// As root on this machine's kernel, a least-queue program reads exact depths (the kernel
/// takes the program that reads kernel memory, and the offsets are in `config`); other
/// policies (least-conn, which sums the open-connection counts, among them) load without
/// the reads.
#[test]
fn least_queue_loads_the_exact_read() {
    let name = format!("unit-exact-{}", std::process::id());
    let exact = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-1", policy::LEAST_QUEUE));
    let exact = exact.map(|g| (g.queue_depth(), g.config_map.get(&0, 0).unwrap()));
    let plain = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-2", policy::ROUND_ROBIN));
    let plain = plain.map(|g| g.queue_depth());
    let conn = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-3", policy::LEAST_CONN));
    let conn = conn.map(|g| (g.queue_depth(), g.conn_steering()));
    pins::remove_instance(&name).unwrap();
    let (depth, config) = exact.expect("loading as root");
    assert_eq!(depth, QueueDepth::Exact);
    assert_eq!(
        config.flags & config_flags::EXACT_QUEUE,
        config_flags::EXACT_QUEUE
    );
    assert_eq!(config.queue, super::super::queue_depth::offsets().unwrap());
    assert!(matches!(
        plain.expect("loading as root"),
        QueueDepth::Sampled(_)
    ));
    // least-conn loads summing the open-connection counts, without the queue reads.
    let (depth, counts) = conn.expect("loading least-conn as root");
    assert!(matches!(depth, QueueDepth::Sampled(_)));
    assert_eq!(counts, Some(ConnSteering::Kernel));
}

/// A runtime map write the kernel refuses is reported as a map-write error, not as a load
/// error that tells the user to run as root or with --no-bpf. (Loads the program: root.)
#[test]
fn a_refused_map_write_has_its_own_message() {
    let name = format!("unit-mapwrite-{}", std::process::id());
    let mut group = BpfGroup::load(&GroupSpec::tcp(&name, "tcp4-1", 1)).expect("loading as root");
    // A socket that is not in a reuseport group cannot go into a REUSEPORT_SOCKARRAY.
    let plain = Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let err = group.insert(3, &plain).expect_err("the kernel refuses it");
    let text = err.to_string();
    drop(group);
    pins::remove_instance(&name).unwrap();
    assert!(
        matches!(err, BpfError::MapWrite { map: "sockets", .. }),
        "{err:?}"
    );
    assert!(
        text.contains("updating the BPF map `sockets` failed"),
        "{text}"
    );
    assert!(
        !text.contains("--no-bpf") && !text.contains("root"),
        "{text}"
    );
}
