//! The promise suite: every headline promise of README.md, each beside the README section that
//! makes it ([`PROMISES`]), checked on the binary `ck_bin()` names (`cargo xtask promises` runs
//! them on the release build, and `cargo xtask test` after the tests) with bounds that do not
//! depend on the machine's speed: failed requests counted by the clients, connections counted
//! by the clients against ck's counts, CPU time against a spin's, files and processes left.
//!
//! Each check panics, with what broke, when its promise does not hold; the runner runs each on
//! a thread of its own and reports them all.
pub mod counts;
pub mod fleet;
pub mod quiet;
pub mod servers;

use servers::Server;

/// One promise: what README says, where, and the check that holds ck to it.
pub struct Promise {
    /// A short name (`cargo xtask promises --only NAME`).
    pub name: &'static str,
    /// The README section (its heading's text) that makes the promise.
    pub readme: &'static str,
    /// The promise, as the section makes it.
    pub claim: &'static str,
    /// Panics when the promise is broken.
    pub check: fn(),
}

/// What the real servers promise (each checked by [`fleet::server_keeps_its_promises`]).
const SERVER_CLAIM: &str = "five rolls, a scale-up and a scale-down under a new-connection \
    load and under a keep-alive load fail no request; a SIGKILLed worker fails no more requests \
    than it held; `ck stop` leaves no process, cgroup, socket, pin or file";

/// Every promise, in the order the suite checks them.
pub const PROMISES: &[Promise] = &[
    Promise {
        name: "idle-cost",
        readme: "ck",
        claim: "ck itself sleeps between its chores: an idle fleet costs it next to no CPU (a \
                spin, a core, fails)",
        check: quiet::idle_fleets_leave_ck_asleep,
    },
    Promise {
        name: "first-scrape",
        readme: "Metrics and health endpoints",
        claim: "every metric is there from the first scrape (counters at 0), and none vanishes",
        check: quiet::the_first_scrape_is_complete,
    },
    Promise {
        name: "counts-first",
        readme: "Metrics and health endpoints",
        claim: "open connections per worker are counted exactly from the first connection, on \
                ck's sockets and with --adopt",
        check: counts::the_first_connections_are_counted,
    },
    Promise {
        name: "counts-fleet",
        readme: "Metrics and health endpoints",
        claim: "the counts are exact after a scale-up, a scale-down, a roll, `ck upgrade` and a \
                --survive-supervisor take-back, and nothing is left after `ck stop`",
        check: counts::counts_stay_exact_on_cks_sockets,
    },
    Promise {
        name: "counts-fleet-adopt",
        readme: "Servers that bind the port themselves (`--adopt`)",
        claim: "adopted sockets are counted like ck's own across scale, roll, upgrade and \
                take-back",
        check: counts::counts_stay_exact_with_adopt,
    },
    Promise {
        name: "server-hyper",
        readme: "The worker contract",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Hyper),
    },
    Promise {
        name: "server-node",
        readme: "Examples and real servers",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Node),
    },
    Promise {
        name: "server-gunicorn",
        readme: "Examples and real servers",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Gunicorn),
    },
    Promise {
        name: "server-uvicorn",
        readme: "Examples and real servers",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Uvicorn),
    },
    Promise {
        name: "server-puma",
        readme: "Examples and real servers",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Puma),
    },
    Promise {
        name: "server-go",
        readme: "Servers that bind the port themselves (`--adopt`)",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Go),
    },
    Promise {
        name: "server-go-bare",
        readme: "Servers that bind the port themselves (`--adopt`)",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::GoBare),
    },
    Promise {
        name: "server-nginx",
        readme: "Servers that bind the port themselves (`--adopt`)",
        claim: SERVER_CLAIM,
        check: || fleet::server_keeps_its_promises(Server::Nginx),
    },
];

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
        for promise in PROMISES {
            assert!(
                headings.contains(&promise.readme),
                "promise {}: README.md has no section {:?}",
                promise.name,
                promise.readme
            );
            assert!(names.insert(promise.name), "{} twice", promise.name);
        }
    }
}
