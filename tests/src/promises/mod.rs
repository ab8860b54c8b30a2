//! The promise suite: every headline promise of README.md, each beside the README section that
//! makes it ([`promises`]), checked on the binary `ck_bin()` names (`cargo xtask promises` runs
//! them on the release build, one at a time, and `cargo xtask test` after the tests) at the
//! figures README states, each a constant of [`figures`] that a unit test compares with
//! README: failed requests counted by the clients against what the kernel said the workers
//! held, connections counted by the clients against ck's counts, ck's CPU time and wake-ups
//! read from the kernel, files and processes left.
//!
//! Each check panics, with what broke, when its promise does not hold; the runner runs each in
//! a process of its own and reports them all.
pub mod counts;
pub mod figures;
pub mod fleet;
pub mod idle;
pub mod kill;
pub mod scrape;
pub mod servers;

use figures::PROMISES_SECTION;

use servers::Server;

/// How a promise is checked.
#[derive(Clone, Copy, Debug)]
pub enum Check {
    /// A check of its own.
    Fn(fn()),
    /// [`fleet::server_keeps_its_promises`] for a real server.
    Server(Server),
}

/// One promise: what README says, where, and the check that holds ck to it.
#[derive(Clone, Debug)]
pub struct Promise {
    /// A short name (`cargo xtask promises --only NAME`).
    pub name: String,
    /// The README section (its heading's text) that makes the promise.
    pub readme: &'static str,
    /// The promise, as the section makes it.
    pub claim: &'static str,
    /// Panics when the promise is broken.
    pub check: Check,
}

impl Promise {
    /// Runs the check (panics when the promise is broken).
    pub fn check(&self) {
        match self.check {
            Check::Fn(check) => check(),
            Check::Server(server) => fleet::server_keeps_its_promises(server),
        }
    }
}

/// What the real servers promise (each checked by [`fleet::server_keeps_its_promises`]).
const SERVER_CLAIM: &str = "rolls, a scale-up and a scale-down under a new-connection load and \
    under a keep-alive load, from a client that never retries, fail no request (with a server \
    that closes idle keep-alive connections at its stop signal, no more than the old workers \
    held when signalled); a SIGKILLed worker fails only requests on connections it had \
    accepted; `ck stop` leaves no process, cgroup, socket, pin or file";

/// A promise checked by a function of its own: name, README section, claim, check.
type OwnCheck = (&'static str, &'static str, &'static str, fn());

/// The promises checked by a function of their own.
const OWN_CHECKS: [OwnCheck; 5] = [
    (
        "idle-cost",
        PROMISES_SECTION,
        "an idle ck, with every policy and with --no-bpf, costs at most the CPU and the \
         wake-ups README states (the median of its windows); the check fails a ck that burns \
         more on purpose",
        idle::idle_fleets_are_cheap,
    ),
    (
        "first-scrape",
        PROMISES_SECTION,
        "the first scrape has exactly the metric families of a later one, and the per-slot \
         counters of every slot",
        scrape::the_first_scrape_is_complete,
    ),
    (
        "counts-first",
        PROMISES_SECTION,
        "open connections per worker are counted exactly from the first connection, made \
         while the workers are still starting, on ck's sockets and with --adopt",
        counts::the_first_connections_are_counted,
    ),
    (
        "counts-fleet",
        PROMISES_SECTION,
        "the counts are exact after a scale-up, a scale-down, a roll, `ck upgrade` and a \
         --survive-supervisor take-back, and nothing is left after `ck stop`",
        counts::counts_stay_exact_on_cks_sockets,
    ),
    (
        "counts-fleet-adopt",
        PROMISES_SECTION,
        "adopted sockets are counted like ck's own across scale, roll, upgrade and take-back",
        counts::counts_stay_exact_with_adopt,
    ),
];

/// Every promise, in the order the suite checks them: the own checks, then each real server
/// (`server-LABEL`, beside the README section that tells how to run it).
pub fn promises() -> Vec<Promise> {
    let own = OWN_CHECKS
        .iter()
        .map(|(name, readme, claim, check)| Promise {
            name: name.to_string(),
            readme,
            claim,
            check: Check::Fn(*check),
        });
    let servers = Server::ALL.iter().map(|server| Promise {
        name: format!("server-{}", server.label()),
        readme: server.readme(),
        claim: SERVER_CLAIM,
        check: Check::Server(*server),
    });
    own.chain(servers).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every promise names a section README.md has, and every name is unique.
    #[test]
    fn every_promise_names_a_readme_section() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let headings: Vec<&str> = readme
            .lines()
            .filter_map(|l| l.strip_prefix('#'))
            .map(|l| l.trim_start_matches('#').trim())
            .collect();
        let mut names = std::collections::BTreeSet::new();
        for promise in promises() {
            assert!(
                headings.contains(&promise.readme),
                "promise {}: README.md has no section {:?}",
                promise.name,
                promise.readme
            );
            assert!(names.insert(promise.name.clone()), "{} twice", promise.name);
        }
    }
}
