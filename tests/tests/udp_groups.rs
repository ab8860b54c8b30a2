//! UDP groups (`--listen udp://HOST:PORT`): the program runs for every datagram, and in `flow`
//! mode a flow (client address and port) keeps its worker while that worker's socket is open.
//! Counted flows of real client sockets against demo workers that answer each datagram with
//! their slot and pid: a scale-up moves no flow (plain SO_REUSEPORT moves some), a scale-down
//! moves only the retired workers' flows, a SIGKILLed worker loses only its own, and new flows
//! reach every worker. A fleet can listen on TCP and UDP at once (HTTP/3 beside HTTP/1.1).
//! Every datagram the program sees is counted under exactly one route: the kernel's count of
//! the program's runs equals the sum of the route counters (loopback without UDP GRO, which
//! would show the program one datagram per train).

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    time::{Duration, Instant},
};

use ck_tests::{
    Ck, READY_TIMEOUT,
    bpf_stats::{self, StatsOn},
    ck_bin, get_new_conn,
    http::metrics_text,
    instance_name, local, probe_base_for,
    sys::{self, free_port},
    udp::{Flows, answered_by, moved, pid_of, reload_while_sending, udp_fleet},
};
use nix::sys::signal::Signal;

/// How many flows each round sends.
const FLOWS: usize = 64;

/// Waits until the fleet has exactly `n` slots, all ready.
fn wait_exactly(ck: &mut Ck, n: usize) {
    ck.wait_status(&format!("exactly {n} ready slots"), READY_TIMEOUT, |s| {
        s.slots.len() == n && s.ready_count() == n
    })
    .expect("wait for the status");
}

#[test]
fn a_flow_keeps_its_worker_while_the_fleet_grows_and_shrinks() {
    let (mut ck, addr) = udp_fleet("udp-scale", 3, &[]);
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    assert_eq!(answered_by(&before).len(), 3, "{before:?}");

    ck.ctl_ok(&["scale", "5"]).expect("ck scale");
    wait_exactly(&mut ck, 5);
    let grown = flows.round();
    assert_eq!(moved(&before, &grown), 0, "{before:?}\n{grown:?}");
    let fresh = Flows::open(addr, FLOWS).round();
    assert_eq!(
        answered_by(&fresh).len(),
        5,
        "new flows reach every worker, the new ones too: {fresh:?}"
    );

    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    wait_exactly(&mut ck, 3);
    let alive = ck.status().expect("ck status").worker_pids();
    let shrunk = flows.round();
    answered_by(&shrunk);
    for (was, now) in grown.iter().zip(&shrunk) {
        let was_pid = was.as_deref().and_then(pid_of).expect("answered");
        if alive.contains(&was_pid) {
            assert_eq!(was, now, "a flow of a worker that stayed moved");
        }
    }
}

#[test]
fn plain_reuseport_moves_flows_when_the_group_grows() {
    // The baseline the test above holds ck to: without the program the kernel hashes each
    // datagram over the group's sockets, and a socket more changes where flows go.
    let (mut ck, addr) = udp_fleet("udp-plain", 3, &["--no-bpf"]);
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    answered_by(&before);
    ck.ctl_ok(&["scale", "5"]).expect("ck scale");
    wait_exactly(&mut ck, 5);
    let grown = flows.round();
    assert!(
        moved(&before, &grown) > 0,
        "plain SO_REUSEPORT kept every flow: {before:?}\n{grown:?}"
    );
}

#[test]
fn a_killed_worker_loses_only_its_own_flows() {
    let (mut ck, addr) = udp_fleet("udp-kill", 4, &[]);
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    assert_eq!(answered_by(&before).len(), 4, "{before:?}");
    let victim = ck.status().expect("ck status").worker_pid(1);
    sys::signal(victim, Signal::SIGKILL);
    ck.wait_status("slot 1 replaced", READY_TIMEOUT, |s| {
        s.ready_count() == 4 && !s.worker_pids().contains(&victim)
    })
    .expect("wait for the status");
    let stale = |ck: &Ck| {
        ck.status().expect("ck status").udp[0]
            .routes
            .get("stale")
            .copied()
    };
    let stale_before = stale(&ck).unwrap_or(0);
    let after = flows.round();
    answered_by(&after);
    for (was, now) in before.iter().zip(&after) {
        if was.as_deref().and_then(pid_of) != Some(victim) {
            assert_eq!(was, now, "a flow of a worker that lived moved");
        }
    }
    // Each of the victim's flows was known to a socket that is gone: its next datagram takes the
    // new-flow path, counted `stale`, even if the consistent table gives it to the slot's new
    // worker (a flow never goes to the new socket of its slot as if it knew it).
    let lost = before
        .iter()
        .filter(|a| a.as_deref().and_then(pid_of) == Some(victim))
        .count() as u64;
    assert_eq!(
        stale(&ck).unwrap_or(0) - stale_before,
        lost,
        "{:#?}",
        ck.status().expect("ck status").udp
    );
    let fresh = Flows::open(addr, FLOWS).round();
    assert_eq!(answered_by(&fresh).len(), 4, "{fresh:?}");
}

#[test]
fn a_fleet_serves_tcp_and_udp_on_one_port() {
    let port = free_port();
    let listen = format!("udp://127.0.0.1:{port}");
    let mut ck = ck_tests::start_on("udp-mixed", port, &["-w", "2", "--listen", &listen], &[])
        .expect("start ck");
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(status.groups.len(), 2, "{status:#?}");
    assert!(
        status.steering.iter().all(|g| g.attached == Some(true)),
        "both groups' programs steer (the UDP one checked by its canary): {status:#?}"
    );
    let answer = get_new_conn(local(port)).expect("an HTTP answer over TCP");
    assert!(status.worker_pids().contains(&answer.pid), "{answer:?}");
    let udp = Flows::open(local(port), FLOWS).round();
    assert_eq!(answered_by(&udp), status.worker_pids(), "{udp:?}");
    // The fleet stops cleanly: every worker's UDP socket quiet, then gone.
    ck.sigterm().expect("SIGTERM to ck");
    let code = ck
        .wait_exit(Duration::from_secs(15))
        .expect("wait for ck to exit");
    assert_eq!(code.code(), Some(0), "{}", ck.log());
}

#[test]
fn every_datagram_is_counted_under_one_route() {
    // The kernel counts the program's runs only while statistics are on: from before it loads.
    let _stats = StatsOn::enable().expect("BPF statistics on (root)");
    let (ck, addr) = udp_fleet("udp-count", 2, &["--metrics", "127.0.0.1:0"]);
    let flows = Flows::open(addr, 32);
    for _ in 0..5 {
        answered_by(&flows.round());
    }
    let program = bpf_stats::program_using(ck.name(), "ck_select_udp", "udp_stats")
        .expect("the group's program");
    // The canary runs the program once a second: read until no run came between the reads.
    let (runs, udp) = loop {
        let before = bpf_stats::read(program).expect("run count").runs;
        let status = ck.status().expect("ck status");
        if bpf_stats::read(program).expect("run count").runs == before {
            break (before, status.udp[0].clone());
        }
    };
    let counted: u64 = udp.routes.values().sum();
    assert_eq!(runs, counted, "{udp:#?}");
    assert_eq!(udp.routes["new"], 32, "{udp:#?}");
    assert_eq!(udp.routes["flow"], 4 * 32, "{udp:#?}");
    assert_eq!(udp.flows, 32, "{udp:#?}");
    assert_eq!(
        udp.slots.iter().map(|s| s.flows).sum::<u64>(),
        32,
        "{udp:#?}"
    );
    assert!(udp.routes["probe"] >= 1, "the canary: {udp:#?}");

    // `/metrics` says the same, per slot and route.
    let status = ck.status().expect("ck status");
    let text = metrics_text(status.metrics.as_deref().expect("a metrics address"));
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("an OpenMetrics text");
    let sum = |name: &str, route: Option<&str>| -> f64 {
        scrape
            .samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| route.is_none_or(|r| s.labels.get("route") == Some(r)))
            .map(|s| match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    };
    assert_eq!(sum("ck_udp_datagrams_total", Some("flow")), 128.0, "{text}");
    assert_eq!(sum("ck_udp_datagrams_total", Some("new")), 32.0, "{text}");
    assert_eq!(sum("ck_udp_flows", None), 32.0, "{text}");

    // `ck maps` decodes the flow table and the route counters from the pins.
    let maps = ck.ctl_ok(&["maps", "--json"]).expect("ck maps");
    let maps: serde_json::Value = serde_json::from_str(&maps).expect("ck maps --json");
    let udp = &maps["groups"][0]["udp"];
    assert_eq!(udp["flows"], 32, "{udp:#}");
    assert_eq!(udp["mode"], "flow", "{udp:#}");
    let clients: BTreeSet<&str> = udp["flows_listed"]
        .as_array()
        .expect("flows")
        .iter()
        .filter_map(|f| f["client"].as_str())
        .collect();
    assert_eq!(clients.len(), 32, "{udp:#}");
    let text = ck.ctl_ok(&["maps"]).expect("ck maps");
    assert!(text.contains("flows:    32 remembered"), "{text}");
}

#[test]
fn a_roll_flips_new_flows_and_leaves_old_flows_with_their_worker_until_it_exits() {
    let (mut ck, addr) = udp_fleet("udp-roll", 2, &["--drain-timeout", "3s"]);
    let old = ck.status().expect("ck status").worker_pids();
    let held = Flows::open(addr, 16);
    let first = held.round();
    assert_eq!(answered_by(&first), old, "{first:?}");
    // The held flows keep sending while the roll runs (`ck reload` returns once every old
    // worker has been told to stop): their workers never go quiet.
    reload_while_sending(&ck, &held, &first);
    // Told to stop, the old workers still have their flows...
    assert_eq!(
        held.round(),
        first,
        "a held flow left a worker that is still running"
    );
    // ... while new flows go to the new generation only.
    let fresh = Flows::open(addr, 16).round();
    let new = answered_by(&fresh);
    assert!(
        new.is_disjoint(&old),
        "new flows reached the old workers: {fresh:?}"
    );
    // Once the old workers are gone (SIGKILL at --drain-timeout: the held flows kept them
    // busy), their flows go to the new ones.
    ck.wait_status("the old workers gone", READY_TIMEOUT, |s| {
        s.worker_pids().is_disjoint(&old) && s.slots.len() == 2
    })
    .expect("wait for the status");
    let moved_on = held.round();
    assert!(answered_by(&moved_on).is_disjoint(&old), "{moved_on:?}");
}

#[test]
fn a_stopping_worker_keeps_its_flows_while_they_send_and_is_killed_once_its_slot_goes_quiet() {
    // Workers that ignore their stop signal: only ck's --udp-linger (or the drain timeout,
    // here far away) ends them.
    let ck_path = ck_bin();
    let ck_path = ck_path.to_str().expect("UTF-8 ck path");
    let linger = Duration::from_millis(500);
    let (mut ck, addr) = udp_fleet(
        "udp-linger",
        2,
        &[
            "--udp-linger",
            "500ms",
            "--drain-timeout",
            "120s",
            "--",
            ck_path,
            "demo-worker",
            "--ignore-sigterm",
        ],
    );
    let old = ck.status().expect("ck status").worker_pids();
    let held = Flows::open(addr, 16);
    let first = held.round();
    assert_eq!(answered_by(&first), old, "{first:?}");
    reload_while_sending(&ck, &held, &first);
    // Stopping (they ignore SIGTERM) and still sent datagrams for three lingers: kept, with
    // their flows.
    let busy_until = Instant::now() + 3 * linger;
    while Instant::now() < busy_until {
        assert_eq!(held.round(), first, "a held flow left its stopping worker");
        std::thread::sleep(Duration::from_millis(50));
    }
    let running = ck.status().expect("ck status").worker_pids();
    assert!(
        old.is_subset(&running),
        "a stopping worker whose flows still send was ended: {old:?} not all in {running:?}"
    );
    // Quiet from now on: killed for the linger, long before the drain timeout.
    ck.wait_status("the old workers gone", READY_TIMEOUT, |s| {
        s.worker_pids().is_disjoint(&old) && s.slots.len() == 2
    })
    .expect("wait for the status");
    let log = ck.log();
    let quiet_kills = log
        .lines()
        .filter(|l| l.contains("worker killed (SIGKILL)") && l.contains("--udp-linger"))
        .count();
    assert_eq!(quiet_kills, 2, "expected 2 quiet kills in:\n{log}");
    assert!(!log.contains("drain timeout"), "{log}");
    // Their flows go to the new generation.
    let moved_on = held.round();
    assert!(answered_by(&moved_on).is_disjoint(&old), "{moved_on:?}");
}

#[test]
fn status_and_top_show_each_slots_datagrams_per_second() {
    let (ck, addr) = udp_fleet("udp-rates", 2, &[]);
    let flows = Flows::open(addr, 8);
    let mut top = ck_tests::ck::ck_command()
        .args(["top", "--once", "--name", ck.name()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting ck top --once");
    // The flows send for as long as ck top measures (between its two reports), and on until
    // the status's rate, read against the sampler's readings, covers them.
    while top.try_wait().expect("waiting for ck top").is_none() {
        answered_by(&flows.round());
    }
    let out = top.wait_with_output().expect("ck top's output");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let titles: Vec<&str> = text
        .lines()
        .find(|l| l.contains("dgram/s"))
        .unwrap_or_else(|| panic!("no dgram/s column: {text}"))
        .split_whitespace()
        .collect();
    let column = titles
        .iter()
        .position(|t| *t == "dgram/s")
        .expect("the column");
    let total: f64 = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"all"))
        // No pid, and the state is two fields ("2/2 ready"): the columns line up again.
        .and_then(|f| f.get(column)?.parse().ok())
        .unwrap_or_else(|| panic!("no total datagram rate: {text}"));
    assert!(total > 0.0, "{text}");
    let sent_until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < sent_until {
        answered_by(&flows.round());
    }
    let status = ck.status().expect("ck status");
    let udp = &status.udp[0];
    let rates: Vec<Option<f64>> = udp.slots.iter().map(|s| s.datagrams_per_s).collect();
    assert!(rates.iter().all(Option::is_some), "{udp:#?}");
    assert!(
        rates.iter().flatten().any(|r| *r > 0.0),
        "the slots with flows have a rate: {udp:#?}"
    );
    assert!(udp.datagrams_per_s.is_some_and(|r| r > 0.0), "{udp:#?}");
    let text = ck.ctl_ok(&["status"]).expect("ck status");
    assert!(text.contains("/s,"), "{text}");
}

#[test]
fn stateless_mode_answers_every_datagram_and_remembers_no_flow() {
    let (ck, addr) = udp_fleet("udp-stateless", 3, &["--udp-mode", "stateless"]);
    let flows = Flows::open(addr, FLOWS);
    for _ in 0..3 {
        assert_eq!(answered_by(&flows.round()).len(), 3);
    }
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert_eq!(udp.mode, "stateless", "{udp:#?}");
    assert_eq!(udp.flows, 0, "{udp:#?}");
    assert_eq!(udp.routes["stateless"], 3 * FLOWS as u64, "{udp:#?}");
    assert_eq!(udp.routes["flow"] + udp.routes["new"], 0, "{udp:#?}");
}

#[test]
fn an_upgrade_in_place_keeps_every_flow_on_its_worker() {
    let (mut ck, addr) = udp_fleet("udp-upgrade", 3, &[]);
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    // A scale-up first: the consistent table no longer gives every flow its worker, so only
    // the flow table (pinned, kept by the new image) can.
    ck.ctl_ok(&["scale", "4"]).expect("ck scale");
    wait_exactly(&mut ck, 4);
    answered_by(&before);
    ck.ctl_ok(&["upgrade"]).expect("ck upgrade");
    let upgraded = ck
        .wait_status("the upgrade done", READY_TIMEOUT, |s| {
            s.upgrades == 1 && s.ready_count() == 4 && s.bpf
        })
        .expect("wait for the status");
    assert!(
        upgraded
            .last_upgrade
            .as_deref()
            .is_some_and(|u| u.starts_with("ok"))
    );
    let after = flows.round();
    assert_eq!(moved(&before, &after), 0, "{before:?}\n{after:?}");
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert_eq!(udp.routes["stale"], 0, "{udp:#?}");
}

#[test]
fn a_fleet_taken_back_after_its_ck_was_killed_keeps_every_flow_on_its_worker() {
    let port = free_port();
    let (listen, base) = (
        format!("udp://127.0.0.1:{port}"),
        probe_base_for(port).to_string(),
    );
    let args = |workers: &'static str| {
        vec![
            "--listen".to_string(),
            listen.clone(),
            "--probe-port-base".to_string(),
            base.clone(),
            "-w".to_string(),
            workers.to_string(),
            "--survive-supervisor".to_string(),
        ]
    };
    let name = instance_name("udp-survive", port);
    let first_args = args("3");
    let first_args: Vec<&str> = first_args.iter().map(String::as_str).collect();
    let mut first = Ck::start(&name, &first_args).expect("start ck");
    first
        .wait_ready(3, READY_TIMEOUT)
        .expect("wait for ready slots");
    let flows = Flows::open(local(port), FLOWS);
    let before = flows.round();
    // A scale-up first: the consistent table no longer gives every flow its worker, so only
    // the flow table (pinned, read by the program while no ck runs) can.
    first.ctl_ok(&["scale", "4"]).expect("ck scale");
    wait_exactly(&mut first, 4);
    let was = first.status().expect("ck status");
    first.kill_supervisor().expect("kill the supervisor");
    first.abandon().expect("abandon the dead ck");
    // No ck: the workers serve on, every flow on its own.
    let alone = flows.round();
    assert_eq!(moved(&before, &alone), 0, "{before:?}\n{alone:?}");
    let again_args = args("4");
    let again_args: Vec<&str> = again_args.iter().map(String::as_str).collect();
    let mut second = Ck::start(&name, &again_args).expect("start ck");
    let now = second
        .wait_ready(4, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(now.worker_pids(), was.worker_pids(), "{was:#?}\n{now:#?}");
    assert!(
        second
            .log()
            .contains("took back the fleet of a ck that died"),
        "{}",
        second.log()
    );
    let after = flows.round();
    assert_eq!(moved(&before, &after), 0, "{before:?}\n{after:?}");
    let udp = second.status().expect("ck status").udp[0].clone();
    assert_eq!(udp.routes["stale"], 0, "{udp:#?}");
    assert_eq!(udp.flows, FLOWS as u64, "the table came through: {udp:#?}");
    second.ctl_ok(&["stop"]).expect("ck stop");
    second.wait_clean_exit().expect("ck exits cleanly");
}

#[test]
fn a_flood_of_one_datagram_flows_keeps_the_flow_table_bounded_and_the_fleet_serving() {
    let (ck, addr) = udp_fleet("udp-flood", 2, &[]);
    // 70,000 flows of one datagram each, more than the table holds (65,536): from as many
    // source addresses and ports (127.2.x.y, one port each), sent without reading answers.
    for i in 0..70_000u32 {
        let source = std::net::Ipv4Addr::new(127, 2, (i >> 8) as u8, i as u8);
        let Ok(socket) = std::net::UdpSocket::bind((source, 0)) else {
            continue;
        };
        let _ = socket.send_to(b"x", addr);
    }
    std::thread::sleep(Duration::from_millis(300));
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert!(udp.flows <= 65_536, "{udp:#?}");
    assert!(udp.flows > 10_000, "{udp:#?}");
    // Known flows and new ones are still answered.
    let flows = Flows::open(addr, FLOWS);
    answered_by(&flows.round());
    answered_by(&flows.round());
}

#[test]
fn flows_pushed_out_of_the_small_cache_keep_their_workers_from_the_flow_table() {
    let (mut ck, addr) = udp_fleet("udp-cache", 2, &[]);
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    answered_by(&before);
    // 12,000 one-datagram flows overwrite nearly every entry of the program's cache (2,048
    // entries, by the low bits of each flow's hash) but fit the flow table (65,536).
    for i in 0..12_000u32 {
        let source = std::net::Ipv4Addr::new(127, 3, (i >> 8) as u8, i as u8);
        if let Ok(socket) = std::net::UdpSocket::bind((source, 0)) {
            let _ = socket.send_to(b"x", addr);
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    // A bigger fleet changes the consistent table: only the flow table keeps the old flows.
    ck.ctl_ok(&["scale", "4"]).expect("ck scale");
    wait_exactly(&mut ck, 4);
    let after = flows.round();
    assert_eq!(moved(&before, &after), 0, "{before:?}\n{after:?}");
    let udp = ck.status().expect("ck status").udp[0].clone();
    assert_eq!(udp.routes["stale"], 0, "{udp:#?}");
    assert!(udp.flows >= 12_000, "{udp:#?}");
}

#[test]
fn an_ipv6_udp_group_keeps_its_flows_too() {
    let port = free_port();
    let (listen, base) = (
        format!("udp://[::1]:{port}"),
        probe_base_for(port).to_string(),
    );
    let args = ["--listen", &listen, "--probe-port-base", &base, "-w", "2"];
    let mut ck = Ck::start(&instance_name("udp-v6", port), &args).expect("start ck");
    let status = ck
        .wait_ready(2, READY_TIMEOUT)
        .expect("wait for ready slots");
    assert_eq!(status.groups, [format!("udp6-__1-{port}")], "{status:#?}");
    let addr = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let flows = Flows::open(addr, FLOWS);
    let before = flows.round();
    assert_eq!(answered_by(&before).len(), 2, "{before:?}");
    ck.ctl_ok(&["scale", "3"]).expect("ck scale");
    wait_exactly(&mut ck, 3);
    assert_eq!(moved(&before, &flows.round()), 0);
}

/// Instances started together send their canaries from one source port (the default probe
/// base) at the same moments each second: every one of them gets its steering checked all the
/// same.
#[test]
fn udp_instances_started_together_all_get_their_steering_checked() {
    let mut fleets: Vec<Ck> = (0..3)
        .map(|_| {
            let port = free_port();
            let listen = format!("udp://127.0.0.1:{port}");
            Ck::start(
                &instance_name("udp-together", port),
                &["--listen", &listen, "-w", "1"],
            )
            .expect("start ck")
        })
        .collect();
    for ck in &mut fleets {
        let status = ck
            .wait_status("steering checked by a canary", READY_TIMEOUT, |s| s.bpf)
            .expect("wait for the status");
        assert!(
            status.steering.iter().all(|g| g.attached == Some(true)),
            "{status:#?}"
        );
    }
    for mut ck in fleets {
        ck.ctl_ok(&["stop"]).expect("ck stop");
        ck.wait_clean_exit().expect("ck exits cleanly");
    }
}
