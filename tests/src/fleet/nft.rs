//! A Kubernetes Service's data path in the front's namespace, as kube-proxy's nftables mode
//! programs it: the service address DNATs, per new connection, to one of the ready endpoints
//! chosen by `numgen random mod N` over a verdict map of per-endpoint chains, and the return
//! traffic comes back through the front (`masquerade` of what was DNATed; kube-proxy does the
//! same for traffic that would otherwise bypass it). A change of the endpoints replaces the
//! service chain's rule in one `nft -f` transaction, so no connection ever sees a half-written
//! set; with no endpoint the chain is empty and the service port refuses, like kube-proxy's
//! reject of a service without endpoints. The table goes with the namespace, and [`Table`]
//! deletes it on drop.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use super::netns::{Netns, run};

/// The table's name (family `ip`).
pub const TABLE: &str = "ck_fleet";

/// The nftables table of a service in a namespace.
#[derive(Debug)]
pub struct Table {
    ns_path: std::path::PathBuf,
    service: SocketAddr,
    endpoints: Vec<SocketAddr>,
}

impl Table {
    /// Creates the table in `ns` for `service` over `endpoints` (one chain each), none of them
    /// ready yet, and turns on forwarding in `ns`.
    pub fn create(ns: &Netns, service: SocketAddr, endpoints: &[SocketAddr]) -> Table {
        ns.sysctl("net.ipv4.ip_forward", "1");
        // The front forwards out of the interface the packet came in on: no redirects.
        ns.sysctl("net.ipv4.conf.all.send_redirects", "0");
        ns.sysctl("net.ipv4.conf.eth0.send_redirects", "0");
        let table = Table {
            ns_path: ns.path(),
            service,
            endpoints: endpoints.to_vec(),
        };
        table.apply(&table.ruleset());
        table.set_ready(&[]);
        table
    }

    /// The whole table, its service chain empty.
    fn ruleset(&self) -> String {
        let mut text = format!("table ip {TABLE} {{\n  chain service {{\n  }}\n");
        for (i, ep) in self.endpoints.iter().enumerate() {
            text += &format!("  chain endpoint{i} {{\n    meta l4proto tcp dnat to {ep}\n  }}\n");
        }
        text += &format!(
            "  chain prerouting {{\n    type nat hook prerouting priority dstnat; policy accept;\n    \
             ip daddr {} tcp dport {} jump service\n  }}\n  \
             chain postrouting {{\n    type nat hook postrouting priority srcnat; policy accept;\n    \
             ct status dnat masquerade\n  }}\n",
            self.service.ip(),
            self.service.port()
        );
        text += "}\n";
        text
    }

    /// Makes the endpoints of `ready` (indices into the endpoints) the service's, in one
    /// transaction.
    pub fn set_ready(&self, ready: &[usize]) {
        self.apply(&service_script(ready));
    }

    /// The table as the kernel has it (`nft list table`).
    pub fn list(&self) -> String {
        run(self.nft().args(["list", "table", "ip", TABLE]))
    }

    /// An `nft` command in the table's namespace.
    fn nft(&self) -> std::process::Command {
        let mut cmd = std::process::Command::new("nsenter");
        cmd.arg(format!("--net={}", self.ns_path.display()))
            .args(["--", "nft"]);
        cmd
    }

    /// Runs `script` with `nft -f -`.
    fn apply(&self, script: &str) {
        let mut child = self
            .nft()
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("running nft: {e} (install it: apt-get install nftables)"));
        child
            .stdin
            .take()
            .expect("piped stdin")
            .write_all(script.as_bytes())
            .expect("writing to nft");
        let out = crate::sys::wait_output(child, Duration::from_secs(20))
            .expect("nft did not exit within 20 s");
        assert!(
            out.status.success(),
            "nft -f failed ({}): {}\n--- script ---\n{script}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The transaction that makes the endpoints of `ready` the service's: the service chain
/// flushed and, with any endpoint, one `numgen random mod N` rule over a verdict map of their
/// chains.
fn service_script(ready: &[usize]) -> String {
    let mut text = format!("flush chain ip {TABLE} service\n");
    if !ready.is_empty() {
        let arms: Vec<String> = ready
            .iter()
            .enumerate()
            .map(|(n, ep)| format!("{n} : goto endpoint{ep}"))
            .collect();
        text += &format!(
            "add rule ip {TABLE} service numgen random mod {} vmap {{ {} }}\n",
            ready.len(),
            arms.join(", ")
        );
    }
    text
}

impl Drop for Table {
    fn drop(&mut self) {
        if self.ns_path.exists() {
            let _ = crate::sys::output_within(
                self.nft().args(["delete", "table", "ip", TABLE]),
                Duration::from_secs(20),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_picks_among_the_ready_endpoints_only() {
        let script = service_script(&[0, 2]);
        assert_eq!(
            script,
            "flush chain ip ck_fleet service\n\
             add rule ip ck_fleet service numgen random mod 2 vmap { 0 : goto endpoint0, 1 : goto endpoint2 }\n"
        );
        assert_eq!(service_script(&[]), "flush chain ip ck_fleet service\n");
    }
}
