//! `RunArgs::into_config`: the options checked together (what one option cannot say alone:
//! `--udp-mode` without a UDP group, a readiness probe with `--ready spawn`, ...) and turned
//! into the supervisor's [`RunConfig`].
use std::time::Duration;

use anyhow::bail;

use crate::settings::{
    health::{HealthConfig, ProbeKind},
    restart_policy::RestartPolicy,
    run_config::{self, ListenAddr, Policy, ReadyMode, RunConfig},
};

use super::RunArgs;

/// The longest `--queue-patience`: the program holds it in whole microseconds in a `u32`.
const MAX_QUEUE_PATIENCE: Duration = Duration::from_secs(3600);

impl RunArgs {
    /// The canary limits given (`--canary-max-resets`, `--canary-max-drops`,
    /// `--canary-max-queue-age`).
    fn canary_limits(&self) -> crate::settings::choices::CanaryLimits {
        crate::settings::choices::CanaryLimits {
            max_resets: self.canary_max_resets,
            max_drops: self.canary_max_drops,
            max_queue_age_ms: self.canary_max_queue_age.map(|d| d.as_millis() as u64),
        }
    }

    /// Checks the options and turns them into the supervisor's configuration.
    pub fn into_config(self) -> anyhow::Result<RunConfig> {
        self.check_ready_probe()?;
        let canary_limits = self.canary_limits();
        let listen = run_config::listen_addrs(&self.ports, &self.listen)?;
        self.check_udp(&listen)?;
        let name = self
            .name
            .unwrap_or_else(|| format!("ck-{}", listen[0].addr.port()));
        run_config::validate_name(&name)?;
        if self.reload_batch == 0 {
            bail!("--reload-batch 0: give at least 1");
        }
        if self.adopt && self.no_bpf {
            bail!(
                "--adopt needs BPF (its bind hook makes the workers' own sockets share the port, \
                 and its program steers them): drop --no-bpf"
            );
        }
        if self.spares > run_config::MAX_WORKERS {
            bail!(
                "--spares {} is out of range: give a number from 0 to {}",
                self.spares,
                run_config::MAX_WORKERS
            );
        }
        if self.max_requests.is_some() && self.no_bpf {
            bail!(
                "--max-requests counts the connections ck's BPF program sends each worker, and \
                 --no-bpf has no program: drop one of them"
            );
        }
        if self.min_workers > run_config::MAX_WORKERS {
            bail!(
                "--min-workers {} is out of range: give a number from 0 to {}",
                self.min_workers,
                run_config::MAX_WORKERS
            );
        }
        if let Some(metrics) = self.metrics
            && let Some(clash) = listen.iter().find(|l| {
                l.addr.port() == metrics.port()
                    && l.addr.is_ipv4() == metrics.is_ipv4()
                    && (l.addr.ip().is_unspecified()
                        || metrics.ip().is_unspecified()
                        || l.addr.ip() == metrics.ip())
            })
        {
            bail!(
                "--metrics {metrics} overlaps the listen address {clash}: give --metrics another \
                 port"
            );
        }
        if let Some(user) = &self.user {
            user.check(self.adopt).map_err(anyhow::Error::msg)?;
        }
        if !self.quiet_period.is_zero() && self.quiet_period > self.quiet_max {
            bail!(
                "--quiet-period {:?} is longer than --quiet-max {:?}: the wait would always end at \
                 --quiet-max before the host is quiet; give a --quiet-period shorter than \
                 --quiet-max (or raise --quiet-max, or --quiet-period 0 for no wait)",
                self.quiet_period,
                self.quiet_max
            );
        }
        if !self.queue_patience.is_zero() && self.policy != Policy::LeastQueue {
            bail!(
                "--queue-patience is least-queue's (how long a queue may wait before its depth is \
                 compared), and --policy is {}: add --policy least-queue or drop --queue-patience",
                self.policy.name()
            );
        }
        if self.queue_patience > MAX_QUEUE_PATIENCE {
            bail!(
                "--queue-patience {:?} is longer than the program can hold: give at most {:?} \
                 (0 compares every non-empty queue)",
                self.queue_patience,
                MAX_QUEUE_PATIENCE
            );
        }
        if self.crash_limit == 0 {
            bail!("--crash-limit 0: give at least 1 (crashes that open the breaker)");
        }
        let workers = run_config::validate_workers(
            self.workers
                .unwrap_or_else(crate::settings::worker_count::default_workers),
        )?;
        run_config::check_room(
            workers,
            self.spares,
            self.reload_batch,
            !self.keep_previous.is_zero(),
        )
        .map_err(anyhow::Error::msg)?;
        let app = match self.app.split_first() {
            Some((program, args)) => run_config::resolve_app(program, args.to_vec())?,
            None => run_config::AppSpec {
                program: std::env::current_exe()?,
                args: vec!["demo-worker".to_string()],
            },
        };
        if let Some(user) = &self.user {
            // Without --adopt the worker first runs ck's own `exec-worker`.
            let ck = (!self.adopt).then(std::env::current_exe).transpose()?;
            user.check_can_run(&app.program, ck.as_deref())
                .map_err(anyhow::Error::msg)?;
        }
        Ok(RunConfig {
            name,
            listen,
            workers,
            policy: self.policy,
            udp_mode: self.udp_mode,
            queue_patience: self.queue_patience,
            ready: self.ready,
            ready_timeout: self.ready_timeout,
            ready_grace: self.ready_grace,
            drain_timeout: self.drain_timeout,
            udp_linger: self.udp_linger,
            quiet_period: self.quiet_period,
            quiet_max: self.quiet_max,
            stop_signal: self.stop_signal,
            health: HealthConfig {
                watchdog: self.watchdog,
                probe: self.probe,
                probe_interval: self.probe_interval,
                probe_timeout: self.probe_timeout,
                probe_fails: self.probe_fails.max(1),
                probe_passes: self.probe_passes.max(1),
                probe_port_base: self.probe_port_base,
                stall_timeout: (!self.stall_timeout.is_zero()).then_some(self.stall_timeout),
                sample_interval: self.sample_interval.max(Duration::from_millis(1)),
                unhealthy_replace_after: self.unhealthy_replace_after,
            },
            reload_batch: self.reload_batch,
            keep_previous: (!self.keep_previous.is_zero()).then_some(self.keep_previous),
            slow_start: (!self.slow_start.is_zero()).then_some(self.slow_start),
            canary: self
                .canary
                .map(|percent| crate::settings::choices::CanaryAsk {
                    percent,
                    for_ms: self.canary_for.as_millis() as u64,
                    by: self.canary_by,
                    limits: canary_limits,
                }),
            canary_limits,
            restart: RestartPolicy {
                initial: self.restart_backoff.initial,
                max: self.restart_backoff.max,
                multiplier: self.restart_backoff.multiplier,
                jitter: self.restart_backoff.jitter,
                stable_after: self.restart_stable,
                crash_limit: self.crash_limit,
                window: self.crash_window,
                cooldown: self.crash_cooldown,
            },
            min_workers: self.min_workers,
            adopt: self.adopt,
            worker_memory_max: self.worker_memory_max,
            max_memory: self.max_memory,
            max_requests: self.max_requests,
            spares: self.spares,
            boot_boost: self.boot_boost,
            survive_supervisor: self.survive_supervisor,
            orphan_timeout: self.orphan_timeout,
            no_bpf: self.no_bpf,
            bpf_log: self.bpf_log,
            metrics: self.metrics,
            log_format: self.log_format,
            worker_output: self.worker_output,
            app,
            user: self.user,
        })
    }

    /// What UDP groups cannot do: probes go through a worker's TCP socket.
    fn check_udp(&self, listen: &[ListenAddr]) -> anyhow::Result<()> {
        if listen.iter().all(|l| l.is_udp())
            && (self.probe.is_some() || self.ready == ReadyMode::Probe)
        {
            bail!(
                "--probe and --ready probe go through a worker's TCP socket, and this fleet has \
                 only UDP groups: add a TCP group (--listen tcp://HOST:PORT, e.g. for the \
                 server's health endpoint), or drop them and use --watchdog (WATCHDOG=1) for \
                 health and READY=1 or --ready auto for readiness"
            );
        }
        Ok(())
    }

    /// `--ready probe` needs an HTTP readiness probe, sent to each worker by probe steering.
    fn check_ready_probe(&self) -> anyhow::Result<()> {
        if self.ready != ReadyMode::Probe {
            return Ok(());
        }
        match &self.probe {
            None => bail!(
                "--ready probe waits for the readiness probe to pass, and there is no probe: add \
                 --probe http:/PATH (e.g. --probe http:/healthz), or use --ready auto"
            ),
            Some(ProbeKind::Tcp) => bail!(
                "--ready probe with --probe tcp would take a booting worker as ready (the kernel \
                 completes the handshake on ck's socket before the worker accepts): use --probe \
                 http:/PATH (e.g. --probe http:/healthz)"
            ),
            Some(ProbeKind::Http(_)) if self.no_bpf => bail!(
                "--ready probe probes each worker through its own socket (probe steering), which \
                 needs ck's BPF program, and --no-bpf has none: drop one of them"
            ),
            Some(ProbeKind::Http(_)) => Ok(()),
        }
    }
}
