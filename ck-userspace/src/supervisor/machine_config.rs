//! What the pure core decides with, from the run's configuration: the lifecycle machine's
//! [`Settings`] and the fleet core's [`Shape`], made at a run's start and again at a reload
//! that changes them.
use crate::settings::run_config::{ReadyMode, RunConfig};
use crate::supervisor::{fleet::Shape, lifecycle::Settings};

/// Whether the run probes its workers over HTTP (a TCP probe passes on ck's own listening
/// socket before the worker accepts: it says nothing about readiness).
fn http_probe(cfg: &RunConfig) -> bool {
    matches!(
        cfg.health.probe,
        Some(crate::settings::health::ProbeKind::Http(_))
    )
}

/// The lifecycle settings of a run.
pub(in crate::supervisor) fn settings(cfg: &RunConfig) -> Settings {
    Settings {
        ready_on_spawn: cfg.ready == ReadyMode::Spawn,
        // With an HTTP probe, a silent worker is ready at its first passing probe instead;
        // adopted, when its socket is. The grace only says when to look whether ck can see the
        // worker wait for connections at all (`detect`).
        ready_grace: (cfg.ready == ReadyMode::Auto && !http_probe(cfg) && !cfg.adopt)
            .then_some(cfg.ready_grace),
        ready_timeout: cfg.ready_timeout,
        stop_timeout: cfg.drain_timeout,
        restart: cfg.restart,
        min_workers: cfg.min_workers,
        adopt: cfg.adopt,
        // Without the program nothing counts a slot's connections, and its socket keeps taking
        // new ones from the kernel's hash: it stops at once.
        linger: (!cfg.no_bpf).then_some(cfg.drain_timeout),
    }
}

/// The numbers the fleet core decides with.
pub(in crate::supervisor) fn shape(cfg: &RunConfig) -> Shape {
    Shape {
        reload_batch: cfg.reload_batch,
        spares: cfg.spares,
        min_workers: cfg.min_workers,
        restart: cfg.restart,
        keep_previous: cfg.keep_previous,
        slow_start: cfg.slow_start,
    }
}
