//! Unit tests of `cgroup`.
use super::*;

#[test]
fn finds_the_cgroup2_mount() {
    let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    assert_eq!(
        parse_mount_point(info),
        Some(PathBuf::from("/sys/fs/cgroup/unified"))
    );
    let pure = "25 1 0:23 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_eq!(
        parse_mount_point(pure),
        Some(PathBuf::from("/sys/fs/cgroup"))
    );
    assert_eq!(
        parse_mount_point("1 2 0:1 / / rw - ext4 /dev/vda rw\n"),
        None
    );
}

/// A worker cgroup holds a process tree, reports its usage, and `kill` stops all of it.
/// (Creates cgroups: root.)
#[test]
fn a_worker_cgroup_kills_its_whole_tree() {
    use std::os::unix::process::CommandExt as _;
    let instance = InstanceCgroup::create(&format!("unit-{}", std::process::id()), false)
        .expect("creating cgroups as root");
    let worker = instance.worker(1, None).unwrap();
    let procs = worker.procs_file().clone();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "sleep 30 & sleep 30"]);
    // SAFETY: only open/write/close in the child before exec.
    unsafe {
        cmd.pre_exec(move || crate::os::fork::join_cgroup(&procs));
    }
    let mut child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while worker.pids().len() < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        worker.pids().len(),
        3,
        "sh and two sleeps: {:?}",
        worker.pids()
    );
    assert!(worker.usage().memory_bytes > 0);
    worker.kill().unwrap();
    let _ = child.wait();
    assert!(wait_unpopulated(worker.dir(), Duration::from_secs(5)));
    assert!(worker.try_remove());
    let dir = instance.dir().to_path_buf();
    drop(instance);
    assert!(!dir.exists());
}

/// A socket ck creates for the fleet is born in its slot's cgroup under the instance's
/// `sockets` cgroup (sock_diag shows a socket's cgroup), no helper process is left, and the
/// cgroups go with the instance. (Creates cgroups: root.)
#[test]
fn a_socket_is_born_in_its_slots_cgroup() {
    use std::os::unix::fs::MetadataExt as _;
    let instance = InstanceCgroup::create(&format!("unit-sk-{}", std::process::id()), false)
        .expect("creating cgroups as root");
    assert!(
        instance.holds_sockets(),
        "this kernel has CLONE_INTO_CGROUP"
    );
    let place = slot_place("tcp4-80", 3);
    assert_eq!(place, "tcp4-80-s3");
    let socket = instance
        .socket(&place, socket2::Domain::IPV4, socket2::Type::STREAM, None)
        .unwrap();
    socket
        .bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    socket.listen(4).unwrap();
    let inode = crate::os::sock_diag::inode_of(&socket).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    let listed = crate::os::sock_diag::listeners(port, false).unwrap();
    let mine = listed.iter().find(|l| l.inode == inode).expect("listed");
    let slot = sockets_dir(instance.dir()).join(&place);
    assert_eq!(
        mine.cgroup,
        Some(fs::metadata(&slot).unwrap().ino()),
        "{mine:?}"
    );
    assert!(pids_in(&slot).is_empty(), "the helper is gone");
    let dir = instance.dir().to_path_buf();
    drop((instance, socket));
    assert!(!dir.exists());
}

/// This process's cgroup2 id: the inode of its cgroup's directory.
fn own_cgroup_id() -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let line = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = line.lines().find_map(|l| l.strip_prefix("0::")).unwrap();
    let mount = mount_point().unwrap();
    let dir = mount.join(path.trim_start_matches('/'));
    std::fs::metadata(dir).unwrap().ino()
}

#[test]
fn a_listener_carries_its_creators_cgroup_and_its_backlog() {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(
            &"127.0.0.1:0"
                .parse::<std::net::SocketAddr>()
                .unwrap()
                .into(),
        )
        .unwrap();
    socket.listen(7).unwrap();
    let inode = crate::os::sock_diag::inode_of(&socket).unwrap();
    let found = crate::os::sock_diag::all_listeners().unwrap();
    let mine = found.iter().find(|l| l.inode == inode).expect("listed");
    assert_eq!(mine.backlog, 7, "{mine:?}");
    assert_eq!(mine.cgroup, Some(own_cgroup_id()), "{mine:?}");
    // A listener's listen() again changes its backlog.
    socket.listen(1).unwrap();
    let port = socket.local_addr().unwrap().as_socket().unwrap().port();
    assert_eq!(
        crate::os::sock_diag::listeners(port, false).unwrap()[0].backlog,
        1
    );
}
