//! The three paced loads that the `reload`, `upgrade` and `survive` tables run at once on one
//! instance: keep-alive (retrying once a request its reused connection lost before any answer,
//! as HTTP clients do), keep-alive that never retries (as wrk), and a new connection per request,
//! each [`CONNECTIONS`] connections at [`RATE`] requests a second.

use std::time::Duration;

use ck_tests::load::{self, LoadHandle, LoadReport, LoadSpec, Mode};

use crate::instance::Instance;

/// Connections of each load.
pub(super) const CONNECTIONS: usize = 16;
/// Requests per second of each load.
pub(super) const RATE: f64 = 1000.0;
/// Limit of one request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The three loads of one window.
pub(super) struct Window {
    pub(super) keep_alive: LoadReport,
    pub(super) no_retry: LoadReport,
    pub(super) new_conn: LoadReport,
}

/// The three loads under way.
pub(super) struct Loads {
    keep_alive: LoadHandle,
    no_retry: LoadHandle,
    new_conn: LoadHandle,
}

impl Loads {
    /// Starts the three loads on `inst` for at most `duration`.
    pub(super) fn start(inst: &Instance, duration: Duration) -> Loads {
        let spec = |mode, retry| {
            let mut spec = LoadSpec::for_duration(inst.addr(), mode, CONNECTIONS, duration);
            spec.rate = Some(RATE);
            spec.timeout = REQUEST_TIMEOUT;
            spec.retry = retry;
            spec
        };
        Loads {
            keep_alive: load::start(spec(Mode::KeepAlive, true)),
            no_retry: load::start(spec(Mode::KeepAlive, false)),
            new_conn: load::start(spec(Mode::NewConnection, true)),
        }
    }

    /// Waits for the loads to end.
    pub(super) fn join(self) -> Window {
        Window {
            keep_alive: self.keep_alive.join(),
            no_retry: self.no_retry.join(),
            new_conn: self.new_conn.join(),
        }
    }

    /// Stops the loads.
    pub(super) fn stop(&self) {
        for handle in [&self.keep_alive, &self.no_retry, &self.new_conn] {
            handle.stop();
        }
    }
}
