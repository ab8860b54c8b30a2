//! The HAProxy front of a fleet rig, configured as operators run it: one `mode tcp` frontend
//! and one `mode http` frontend on the front's address, each with a backend of every host and
//! `option httpchk GET /readyz` on the host's metrics port (`check port 9100 inter .. fall ..
//! rise ..`). HAProxy runs in the front's namespace in the foreground (`haproxy -db -f cfg`);
//! its admin socket (`show stat`) says which hosts it has in rotation.

use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::sys::{self, TempDir};

use super::host::{METRICS_PORT, SERVICE_PORT};
use super::netns::Netns;

/// Port of the `mode tcp` frontend.
pub const TCP_PORT: u16 = 80;
/// Port of the `mode http` frontend.
pub const HTTP_PORT: u16 = 81;

/// HAProxy's health-check timings (`inter`, `fall`, `rise` of `default-server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    /// Time between two checks of a host.
    pub inter: Duration,
    /// Failed checks in a row that take a host out.
    pub fall: u32,
    /// Good checks in a row that put it back.
    pub rise: u32,
}

impl Checks {
    /// What operators run: `inter 2s fall 3 rise 2`.
    pub const OPERATOR: Checks = Checks {
        inter: Duration::from_secs(2),
        fall: 3,
        rise: 2,
    };

    /// The longest a host that went down stays in rotation: `fall` intervals, plus one for
    /// the phase of the first failed check.
    pub fn detection_bound(&self) -> Duration {
        self.inter * (self.fall + 1)
    }
}

/// A running HAProxy in `ns`, killed on drop.
#[derive(Debug)]
pub struct Haproxy {
    child: Child,
    admin: PathBuf,
    _dir: TempDir,
}

/// The backend of the `mode tcp` frontend.
pub const TCP_BACKEND: &str = "hosts_tcp";
/// The backend of the `mode http` frontend.
pub const HTTP_BACKEND: &str = "hosts_http";

impl Haproxy {
    /// Writes the configuration for `hosts` (name, address) and starts HAProxy listening on
    /// `front` in `ns`; waits until its admin socket answers.
    pub fn start(
        ns: &Netns,
        front: Ipv4Addr,
        hosts: &[(String, Ipv4Addr)],
        checks: Checks,
    ) -> Haproxy {
        let dir = TempDir::new("ck-fleet-haproxy");
        let admin = dir.path().join("admin.sock");
        let cfg = config(&admin, front, hosts, checks);
        let path = dir.write("haproxy.cfg", &cfg, false);
        let log = std::fs::File::create(dir.path().join("haproxy.log")).expect("creating the log");
        let child = ns
            .command("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning the log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting haproxy: {e} (install it: apt-get install haproxy)")
            });
        let haproxy = Haproxy {
            child,
            admin,
            _dir: dir,
        };
        let up = sys::poll_until(Duration::from_secs(10), Duration::from_millis(20), || {
            haproxy.try_stat().is_ok()
        });
        assert!(up, "haproxy did not start: {}", haproxy.log());
        haproxy
    }

    /// What HAProxy wrote.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("haproxy.log")).unwrap_or_default()
    }

    /// `show stat` on the admin socket.
    fn try_stat(&self) -> std::io::Result<String> {
        let mut stream = UnixStream::connect(&self.admin)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.write_all(b"show stat\n")?;
        let mut out = String::new();
        stream.read_to_string(&mut out)?;
        Ok(out)
    }

    /// The check status (`UP`, `DOWN`, `UP 1/3`, ...) of server `host` in `backend`.
    ///
    /// # Panics
    /// When the admin socket does not answer or has no such server.
    pub fn status(&self, backend: &str, host: &str) -> String {
        let stat = self
            .try_stat()
            .unwrap_or_else(|e| panic!("haproxy's admin socket: {e}\n{}", self.log()));
        server_status(&stat, backend, host)
            .unwrap_or_else(|| panic!("no server {backend}/{host} in haproxy's stats:\n{stat}"))
    }

    /// Whether HAProxy sends new connections of `backend` to `host` (`UP`, or `UP n/m` on its
    /// way down).
    pub fn in_rotation(&self, backend: &str, host: &str) -> bool {
        self.status(backend, host).starts_with("UP")
    }

    /// Waits until `host` is in or out of rotation (`want`) in `backend`, at most `timeout`;
    /// returns when it was seen so.
    pub fn wait_rotation(
        &self,
        backend: &str,
        host: &str,
        want: bool,
        timeout: Duration,
    ) -> Option<Instant> {
        let mut seen = None;
        sys::poll_until(timeout, Duration::from_millis(10), || {
            if self.in_rotation(backend, host) == want {
                seen = Some(Instant::now());
            }
            seen.is_some()
        });
        seen
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The configuration: the admin socket, defaults with HAProxy's retries and redispatch as
/// operators set them, the two frontends and their backends.
fn config(
    admin: &std::path::Path,
    front: Ipv4Addr,
    hosts: &[(String, Ipv4Addr)],
    checks: Checks,
) -> String {
    let mut cfg = format!(
        "global\n  maxconn 4000\n  stats socket {} mode 600 level admin\n\n\
         defaults\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n  \
         timeout check 1s\n  retries 3\n  option redispatch\n\n",
        admin.display()
    );
    for (mode, port, backend) in [
        ("tcp", TCP_PORT, TCP_BACKEND),
        ("http", HTTP_PORT, HTTP_BACKEND),
    ] {
        cfg += &format!(
            "frontend {mode}_in\n  mode {mode}\n  bind {}\n  default_backend {backend}\n\n\
             backend {backend}\n  mode {mode}\n  balance roundrobin\n  option httpchk GET /readyz\n  \
             default-server check port {METRICS_PORT} inter {}ms fall {} rise {}\n",
            SocketAddr::from((front, port)),
            checks.inter.as_millis(),
            checks.fall,
            checks.rise
        );
        for (name, ip) in hosts {
            cfg += &format!(
                "  server {name} {}\n",
                SocketAddr::from((*ip, SERVICE_PORT))
            );
        }
        cfg += "\n";
    }
    cfg
}

/// The `status` column of server `host` of `backend` in the CSV of `show stat`.
fn server_status(stat: &str, backend: &str, host: &str) -> Option<String> {
    let mut lines = stat.lines();
    let header: Vec<&str> = lines.next()?.trim_start_matches("# ").split(',').collect();
    let column = |name| header.iter().position(|h| *h == name);
    let (px, sv, status) = (column("pxname")?, column("svname")?, column("status")?);
    lines
        .map(|line| line.split(',').collect::<Vec<_>>())
        .find(|f| f.get(px) == Some(&backend) && f.get(sv) == Some(&host))
        .and_then(|f| f.get(status).map(|s| s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_servers_status_from_show_stat() {
        let stat = "# pxname,svname,qcur,status,weight\n\
                    hosts_tcp,FRONTEND,,OPEN,\n\
                    hosts_tcp,h0,0,UP,1\n\
                    hosts_tcp,h1,0,DOWN,1\n\
                    hosts_http,h1,0,UP 1/3,1\n";
        assert_eq!(
            server_status(stat, "hosts_tcp", "h0").as_deref(),
            Some("UP")
        );
        assert_eq!(
            server_status(stat, "hosts_tcp", "h1").as_deref(),
            Some("DOWN")
        );
        assert_eq!(
            server_status(stat, "hosts_http", "h1").as_deref(),
            Some("UP 1/3")
        );
        assert_eq!(server_status(stat, "hosts_http", "h2"), None);
    }

    #[test]
    fn the_config_checks_readyz_on_the_metrics_port() {
        let hosts = [("h0".to_string(), Ipv4Addr::new(10, 77, 0, 11))];
        let cfg = config(
            std::path::Path::new("/x.sock"),
            Ipv4Addr::new(10, 77, 0, 2),
            &hosts,
            Checks::OPERATOR,
        );
        assert!(cfg.contains("option httpchk GET /readyz"), "{cfg}");
        assert!(
            cfg.contains("check port 9100 inter 2000ms fall 3 rise 2"),
            "{cfg}"
        );
        assert!(cfg.contains("server h0 10.77.0.11:8080"), "{cfg}");
        assert!(
            cfg.contains("bind 10.77.0.2:80\n") && cfg.contains("bind 10.77.0.2:81\n"),
            "{cfg}"
        );
    }
}
