//! One cgroup per worker: a worker's whole process tree dies with it (a crash, `ck stop`), each
//! slot's memory and CPU come from its cgroup, `--worker-memory-max` is applied or ck says why
//! not, a stale instance cgroup is cleaned up at start, and nothing is left at exit.

use std::fs;
use std::time::Duration;

use ck_tests::app::script;
use ck_tests::sys::{TempDir, cgroup_dir, kill_hard, pid_alive, poll_until};
use ck_tests::{READY_TIMEOUT, ck_bin, start};

/// An app that leaves a grandchild behind (`sleep`, its pid written to `dir/grandchild.<slot>`)
/// and runs the demo worker.
fn forking_app(dir: &TempDir) -> String {
    let body = format!(
        "sleep 1000 &\necho $! > '{}/grandchild.'$CK_SLOT\nexec '{}' demo-worker",
        dir.path().display(),
        ck_bin().display()
    );
    script(dir, "app.sh", &body)
        .to_str()
        .expect("UTF-8")
        .to_string()
}

fn grandchild(dir: &TempDir, slot: u32, generation_hint: &str) -> u32 {
    let file = dir.path().join(format!("grandchild.{slot}"));
    let mut pid = None;
    poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
        pid = fs::read_to_string(&file)
            .ok()
            .and_then(|p| p.trim().parse().ok());
        pid.is_some()
    });
    pid.unwrap_or_else(|| panic!("no grandchild pid for slot {slot} ({generation_hint})"))
}

#[test]
fn a_workers_whole_tree_dies_with_it_and_nothing_is_left() {
    let dir = TempDir::new("cgtree");
    let app = forking_app(&dir);
    let (mut ck, _port) = start("cgtree", &["-w", "2", "--", &app]).expect("start ck");
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    let cgroup = cgroup_dir(ck.name()).expect("cgroup2 is mounted");
    assert_eq!(status.cgroup.as_deref(), cgroup.to_str(), "{status:#?}");
    for slot in &status.slots {
        assert!(slot.memory_bytes.is_some_and(|m| m > 0), "{status:#?}");
        assert!(slot.cpu_ms.is_some(), "{status:#?}");
    }

    // A crash of slot 0's worker takes its grandchild with it.
    let orphan = grandchild(&dir, 0, "first");
    fs::remove_file(dir.path().join("grandchild.0")).unwrap();
    kill_hard(status.worker_pid(0));
    assert!(
        poll_until(Duration::from_secs(5), Duration::from_millis(10), || {
            !pid_alive(orphan)
        }),
        "the killed worker's grandchild {orphan} outlived it"
    );
    ck.wait_status("slot 0 replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 2 && s.slot(0).pid != status.slot(0).pid
    })
    .expect("wait for the status");

    // `ck stop`: every grandchild dies, the cgroups are removed.
    let grandchildren = [grandchild(&dir, 0, "second"), grandchild(&dir, 1, "first")];
    ck.ctl_ok(&["stop"]).expect("ck stop");
    ck.wait_clean_exit().expect("ck exits cleanly");
    for pid in grandchildren {
        assert!(!pid_alive(pid), "grandchild {pid} outlived ck stop");
    }
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
}

#[test]
fn worker_memory_max_is_applied_or_ck_says_why_not() {
    let (mut ck, _port) =
        start("cgmem", &["-w", "1", "--worker-memory-max", "64M"]).expect("start ck");
    let status = ck
        .wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let limit = status.memory_limit.clone().expect("the limit is reported");
    let cgroup = cgroup_dir(ck.name()).expect("cgroup2 is mounted");
    let worker_dirs: Vec<_> = fs::read_dir(&cgroup)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir() && e.file_name() != "sockets")
        .collect();
    assert_eq!(worker_dirs.len(), 1, "one cgroup per worker");
    // Where ck created the listening sockets: no process stays in it.
    let sockets = fs::read_to_string(cgroup.join("sockets/cgroup.procs")).unwrap();
    assert!(sockets.trim().is_empty(), "{sockets}");
    let max_file = worker_dirs[0].path().join("memory.max");
    if max_file.exists() {
        assert_eq!(
            fs::read_to_string(&max_file).unwrap().trim(),
            (64u64 << 20).to_string()
        );
        assert!(limit.contains("memory.max"), "{limit}");
    } else {
        // This host's cgroup2 has no memory controller (v1 holds it): ck says so.
        assert!(limit.contains("NOT applied"), "{limit}");
        assert!(
            ck.log().contains("--worker-memory-max is not applied"),
            "{}",
            ck.log()
        );
        assert!(
            ck.ctl_ok(&["status"])
                .expect("ck status")
                .contains("worker memory limit")
        );
    }
}

#[test]
fn a_stale_instance_cgroup_is_cleaned_up_at_start() {
    let port = ck_tests::sys::free_port();
    let name = ck_tests::instance_name("cgstale", port);
    let cgroup = cgroup_dir(&name).expect("cgroup2 is mounted");
    let stale = cgroup.join("w7");
    fs::create_dir_all(&stale).unwrap();
    let mut leftover = std::process::Command::new("sleep")
        .arg("1000")
        .spawn()
        .unwrap();
    fs::write(stale.join("cgroup.procs"), leftover.id().to_string()).unwrap();
    let port_text = port.to_string();
    let base = ck_tests::probe_base_for(port).to_string();
    let mut ck = ck_tests::Ck::start(
        &name,
        &["--port", &port_text, "--probe-port-base", &base, "-w", "1"],
    )
    .expect("start ck");
    ck.wait_ready(1, READY_TIMEOUT)
        .expect("wait for ready slots");
    let _ = leftover.wait();
    assert!(!stale.exists(), "the stale worker cgroup is still there");
    assert!(
        ck.log().contains("removing a stale worker cgroup"),
        "{}",
        ck.log()
    );
}

/// The cgroup2 mount point of this host.
fn cgroup2_mount() -> String {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .find_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            (after.split_whitespace().next()? == "cgroup2")
                .then(|| before.split_whitespace().nth(4).map(str::to_string))?
        })
        .expect("cgroup2 is mounted on this host")
}

/// Runs `script` (sh) in a mount namespace of its own where cgroup2 is not mounted.
fn without_cgroup2(script: &str) -> std::process::Output {
    let body = format!("umount -l '{}' || exit 99\n{script}", cgroup2_mount());
    ck_tests::sys::output_within(
        std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &body])
            .env("NO_COLOR", "1"),
        Duration::from_secs(20),
    )
    .expect("unshare finished in time")
}

#[test]
fn without_cgroup2_adopt_is_refused_and_activation_runs_without_cgroups() {
    let ck = ck_bin().display().to_string();
    let port = ck_tests::sys::free_port();
    let name = ck_tests::instance_name("nocgroup", port);
    let out = without_cgroup2(&format!(
        "exec '{ck}' run --adopt --name {name} -p {port} -w 1"
    ));
    let said = ck_tests::ck::said(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(said.contains("no cgroup2 file system is mounted"), "{said}");
    assert!(!ck_tests::ck::pins_dir(&name).exists());
    assert!(!ck_tests::ck::control_socket(&name).exists());

    let out = without_cgroup2(&format!(
        "'{ck}' run --name {name} -p {port} -w 1 &\n\
         i=0; until '{ck}' status --name {name} 2>/dev/null | grep -q ready; do \
           i=$((i+1)); [ $i -gt 200 ] && break; sleep 0.05; done\n\
         '{ck}' stop --name {name}\nwait"
    ));
    let said = ck_tests::ck::said(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("workers run without a cgroup of their own"),
        "{said}"
    );
    assert!(said.contains("worker ready"), "{said}");
    assert!(said.contains("ck stopped"), "{said}");
}
