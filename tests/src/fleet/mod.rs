//! A fleet of ck hosts behind a real balancer, in network namespaces: shared by `cargo xtask
//! fleet` (operators' timings) and `tests/tests/fleet_*.rs` (fast timings).
//!
//! A [`Rig`] is a LAN (a bridge in a namespace of its own, [`netns::Lan`]) joining three
//! [`host::Host`]s (each a namespace running its own `ck run -w 2 --metrics`; the last one runs
//! the Node example), a client namespace where the load runs ([`Rig::load`]) and a front
//! namespace with one of the [`FrontKind`]s: HAProxy ([`haproxy`]) or a Kubernetes Service's
//! data path (nftables DNAT, [`nft`], kept current by the endpoint controller,
//! [`endpoints`]). Addresses (`10.77.0.0/24`) exist only on the veths inside the rig's
//! namespaces, and every name carries a per-run prefix, so rigs run side by side. Dropping the
//! rig kills every process in its namespaces and deletes them (links, tables and all);
//! [`assert_gone`] checks that nothing of it is left. [`scenario`] has what the fleet goes
//! through.

pub mod endpoints;
pub mod haproxy;
pub mod host;
pub mod netns;
pub mod nft;
pub mod scenario;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::load::{self, LoadHandle, LoadSpec, Mode};

use endpoints::{Controller, Probes};
use haproxy::{Checks, Haproxy};
use host::{App, Host};
use netns::{Lan, Netns};

/// Hosts in a rig.
pub const HOSTS: usize = 3;
/// The front's address, `10.77.0.2`: the service address the client connects to.
const FRONT: u8 = 2;
/// The client's address.
const CLIENT: u8 = 3;
/// Port of the Service's address (the nftables front).
pub const SERVICE_PORT: u16 = 80;

/// Which balancer spreads the client's connections over the hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrontKind {
    /// HAProxy, `mode tcp`.
    HaproxyTcp,
    /// HAProxy, `mode http`.
    HaproxyHttp,
    /// A Kubernetes Service: nftables DNAT over the ready endpoints (kube-proxy's data path).
    Service,
}

impl FrontKind {
    /// Every front.
    pub const ALL: [FrontKind; 3] = [
        FrontKind::HaproxyTcp,
        FrontKind::HaproxyHttp,
        FrontKind::Service,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            FrontKind::HaproxyTcp => "HAProxy mode tcp",
            FrontKind::HaproxyHttp => "HAProxy mode http",
            FrontKind::Service => "Kubernetes Service (nftables numgen DNAT)",
        }
    }
}

/// How a rig is set up.
#[derive(Debug, Clone)]
pub struct RigSpec {
    /// The front.
    pub front: FrontKind,
    /// HAProxy's checks (HAProxy fronts).
    pub checks: Checks,
    /// The readiness probes and propagation (the Service front).
    pub probes: Probes,
    /// `ck run` options of every host (besides `-w 2 --port 8080 --metrics 0.0.0.0:9100`).
    pub ck_options: Vec<String>,
    /// The quiet wait's options (`--quiet-period`, `--quiet-max`; none: ck's defaults).
    pub quiet: Vec<String>,
    /// The preStop sleep of the scenario that turns the quiet wait off.
    pub pre_stop: Duration,
    /// Total new connections per second of the client's load.
    pub rate: f64,
    /// Concurrent connections of the client's load.
    pub connections: usize,
}

impl RigSpec {
    /// Operators' timings (HAProxy `inter 2s fall 3 rise 2`, Kubernetes' probe defaults), ck's
    /// own quiet wait defaults, a 10 s preStop sleep, 300 new connections per second over 16
    /// connections: `cargo xtask fleet`.
    pub fn operator(front: FrontKind) -> RigSpec {
        RigSpec {
            front,
            checks: Checks::OPERATOR,
            probes: Probes::KUBERNETES,
            ck_options: vec!["--survive-supervisor".into()],
            quiet: Vec::new(),
            pre_stop: Duration::from_secs(10),
            rate: 300.0,
            connections: 16,
        }
    }

    /// Fast timings for the tests: checks every 200 ms (`fall 2 rise 1`), probes every 200 ms
    /// (`failureThreshold: 2`) with a 300 ms propagation, a 500 ms `--quiet-period`, a 2 s
    /// preStop sleep; 150 new connections per second over 8 connections.
    pub fn fast(front: FrontKind) -> RigSpec {
        RigSpec {
            front,
            checks: Checks {
                inter: Duration::from_millis(200),
                fall: 2,
                rise: 1,
            },
            probes: Probes {
                period: Duration::from_millis(200),
                failure_threshold: 2,
                success_threshold: 1,
                timeout: Duration::from_millis(500),
                propagation: Duration::from_millis(300),
            },
            ck_options: vec!["--survive-supervisor".into()],
            quiet: ["--quiet-period", "500ms", "--quiet-max", "5s"]
                .map(String::from)
                .to_vec(),
            pre_stop: Duration::from_secs(2),
            rate: 150.0,
            connections: 8,
        }
    }
}

impl RigSpec {
    /// The hosts' `ck run` options: with ck's quiet wait (`quiet`), or with it off
    /// (`--quiet-period 0`).
    pub fn options(&self, quiet: bool) -> Vec<String> {
        let mut options = self.ck_options.clone();
        if quiet {
            options.extend(self.quiet.iter().cloned());
        } else {
            options.extend(["--quiet-period".to_string(), "0".to_string()]);
        }
        options
    }
}

/// The front of a rig.
#[derive(Debug)]
enum Balancer {
    Haproxy(Haproxy),
    Service(Controller),
}

/// The front: a balancer in a namespace of its own.
#[derive(Debug)]
pub struct Front {
    kind: FrontKind,
    /// Dropped before the namespace.
    balancer: Balancer,
    probes: Probes,
    checks: Checks,
    hosts: Vec<String>,
    ns: Netns,
}

impl Front {
    /// The address the client connects to.
    pub fn addr(&self) -> SocketAddr {
        let port = match self.kind {
            FrontKind::HaproxyTcp => haproxy::TCP_PORT,
            FrontKind::HaproxyHttp => haproxy::HTTP_PORT,
            FrontKind::Service => SERVICE_PORT,
        };
        SocketAddr::from((netns::addr(FRONT), port))
    }

    /// Its kind.
    pub fn kind(&self) -> FrontKind {
        self.kind
    }

    /// Its namespace.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// The HAProxy backend of this front.
    fn backend(&self) -> &'static str {
        match self.kind {
            FrontKind::HaproxyHttp => haproxy::HTTP_BACKEND,
            _ => haproxy::TCP_BACKEND,
        }
    }

    /// Host `i` is being deleted (a pod's termination): the Service removes it from its
    /// endpoints after the propagation delay; HAProxy learns only from its checks.
    pub fn terminating(&self, i: usize) {
        if let Balancer::Service(controller) = &self.balancer {
            controller.terminating(i, self.probes);
        }
    }

    /// Host `i` runs a new ck (a new pod): the Service probes it afresh.
    pub fn started(&self, i: usize) {
        if let Balancer::Service(controller) = &self.balancer {
            controller.started(i);
        }
    }

    /// Whether the front sends new connections to host `i`.
    pub fn in_rotation(&self, i: usize) -> bool {
        match &self.balancer {
            Balancer::Haproxy(h) => h.in_rotation(self.backend(), &self.hosts[i]),
            Balancer::Service(c) => c.in_rotation(i),
        }
    }

    /// Waits (at most `timeout`) until host `i` is in rotation (`want`) or out of it, and
    /// returns when the front changed it (for the Service, when the set was written).
    pub fn wait_rotation(&self, i: usize, want: bool, timeout: Duration) -> Option<Instant> {
        match &self.balancer {
            Balancer::Haproxy(h) => h.wait_rotation(self.backend(), &self.hosts[i], want, timeout),
            Balancer::Service(c) => {
                let done = crate::sys::poll_until(timeout, Duration::from_millis(5), || {
                    c.in_rotation(i) == want
                });
                if done { c.changed_at(i, want) } else { None }
            }
        }
    }

    /// The longest a host that stopped answering its health check stays in rotation.
    pub fn detection_bound(&self) -> Duration {
        match self.kind {
            FrontKind::Service => self.probes.detection_bound(),
            _ => self.checks.detection_bound(),
        }
    }

    /// What the front says about itself when a scenario fails.
    pub fn describe(&self) -> String {
        match &self.balancer {
            Balancer::Haproxy(h) => format!("--- haproxy log ---\n{}", h.log()),
            Balancer::Service(_) => String::new(),
        }
    }
}

/// Three ck hosts, a client and a front in namespaces of a LAN; removed on drop.
#[derive(Debug)]
pub struct Rig {
    /// The hosts (dropped first: their ck, then their namespaces).
    pub hosts: Vec<Host>,
    /// The front.
    pub front: Front,
    client: Netns,
    lan: Lan,
    prefix: String,
    spec: RigSpec,
}

impl Rig {
    /// Builds the rig of `spec`: namespaces, LAN, the hosts' ck (ready; with the quiet wait
    /// when `quiet`), the front, and waits until the front has every host in rotation.
    pub fn start(spec: RigSpec, quiet: bool) -> Rig {
        let prefix = netns::unique_prefix();
        let mut lan = Lan::new(&format!("{prefix}-lan"));
        let client = Netns::add(&format!("{prefix}-cl"));
        lan.join(&client, CLIENT);
        let front_ns = Netns::add(&format!("{prefix}-fr"));
        lan.join(&front_ns, FRONT);
        let mut hosts: Vec<Host> = (0..HOSTS)
            .map(|i| {
                let app = if i == HOSTS - 1 { App::Node } else { App::Demo };
                Host::new(&prefix, i, &mut lan, app, &spec.options(quiet))
            })
            .collect();
        for host in &mut hosts {
            host.start();
        }
        let names: Vec<String> = (0..HOSTS).map(|i| format!("h{i}")).collect();
        let balancer = match spec.front {
            FrontKind::HaproxyTcp | FrontKind::HaproxyHttp => {
                let servers: Vec<_> = hosts
                    .iter()
                    .zip(&names)
                    .map(|(h, n)| (n.clone(), h.ip()))
                    .collect();
                Balancer::Haproxy(Haproxy::start(
                    &front_ns,
                    netns::addr(FRONT),
                    &servers,
                    spec.checks,
                ))
            }
            FrontKind::Service => {
                let service = SocketAddr::from((netns::addr(FRONT), SERVICE_PORT));
                let endpoints: Vec<_> = hosts.iter().map(Host::service).collect();
                let table = nft::Table::create(&front_ns, service, &endpoints);
                let probes: Vec<_> = hosts
                    .iter()
                    .map(|h| SocketAddr::from((h.ip(), host::METRICS_PORT)))
                    .collect();
                Balancer::Service(Controller::start(
                    table,
                    &front_ns.path(),
                    &probes,
                    spec.probes,
                ))
            }
        };
        let front = Front {
            kind: spec.front,
            balancer,
            probes: spec.probes,
            checks: spec.checks,
            hosts: names,
            ns: front_ns,
        };
        let rig = Rig {
            hosts,
            front,
            client,
            lan,
            prefix,
            spec,
        };
        for i in 0..HOSTS {
            rig.wait_in_rotation(i);
        }
        rig
    }

    /// The per-run prefix of every name of the rig.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// How it was set up.
    pub fn spec(&self) -> &RigSpec {
        &self.spec
    }

    /// The LAN's namespace.
    pub fn lan(&self) -> &Netns {
        self.lan.netns()
    }

    /// Waits until the front has host `i` in rotation (a rollout waits for the new pod's
    /// readiness before it replaces the next one).
    ///
    /// # Panics
    /// When it is not within a generous bound of the front's timings.
    pub fn wait_in_rotation(&self, i: usize) -> Instant {
        let timeout = self.front.detection_bound() * 3 + Duration::from_secs(30);
        self.front
            .wait_rotation(i, true, timeout)
            .unwrap_or_else(|| {
                panic!(
                    "the front did not take host {i} into rotation within {timeout:?}\n{}",
                    self.front.describe()
                )
            })
    }

    /// Starts the client's load through the front: new connections (each one balanced) at
    /// the spec's rate, until stopped.
    pub fn load(&self) -> LoadHandle {
        let mut spec = LoadSpec::for_duration(
            self.front.addr(),
            Mode::NewConnection,
            self.spec.connections,
            Duration::from_secs(3600),
        );
        spec.rate = Some(self.spec.rate);
        load::start_in_netns(spec, &self.client.path())
    }
}

/// Asserts that nothing named with `prefix` is left: no network namespace, no link in the
/// caller's namespace, no process of the rig's ck instances.
///
/// # Panics
/// When something is left, naming it.
pub fn assert_gone(prefix: &str) {
    let namespaces: Vec<String> = netns::namespaces()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    assert!(
        namespaces.is_empty(),
        "namespaces left behind: {namespaces:?}"
    );
    let links: Vec<String> = netns::links()
        .into_iter()
        .filter(|l| l.starts_with(prefix))
        .collect();
    assert!(links.is_empty(), "links left behind: {links:?}");
    for i in 0..HOSTS {
        let name = format!("{prefix}-h{i}");
        let left = crate::sys::instance_processes(&name);
        assert!(left.is_empty(), "processes of {name} left behind: {left:?}");
        assert!(
            !crate::ck::pins_dir(&name).exists(),
            "pins of {name} left behind"
        );
    }
}
