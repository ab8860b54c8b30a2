//! Loading one group's BPF object: the maps created (or opened from their pins), the
//! program's read-only switches set (aya-log's level, reading kernel memory, summing the
//! per-CPU connection counts, the CPU count, the policy, the probe range and where a
//! connection's peer lies), and the group's program loaded (`ck_select`, or `ck_select_udp` for
//! a UDP group); plus the kernel's one-line answer when it refuses.
use anyhow::Context as _;
use aya::{Ebpf, EbpfLoader, programs::SkReuseport};
use ck_common::QueueOffsets;

use super::{
    error::{BpfError, load_err},
    pins::PINNED_MAPS,
};

/// The program's read-only switch that lets it read queue depths from kernel memory.
const READ_KERNEL: &str = "CK_READ_KERNEL";

/// The program's read-only switch that lets `least-conn` sum the per-CPU open-connection counts
/// (`bpf_map_lookup_percpu_elem`, Linux >= 5.19): off under the other policies, so that the
/// verifier drops that helper call and the program loads on older kernels too.
const SUM_CONNS: &str = "CK_SUM_CONNS";

/// The program's read-only count of possible CPUs: `least-conn` asks for the other CPUs' counts up
/// to it and no further.
const CPUS: &str = "CK_CPUS";

/// The UDP program's read-only `--udp-mode` code (`ck_common::udp::udp_mode`).
const UDP_MODE: &str = "CK_UDP_MODE";

/// The select program's read-only `--policy` code: the verifier drops the other policies' code.
const POLICY: &str = "CK_POLICY";

/// The programs' read-only first port of the probe range.
const PROBE_BASE: &str = "CK_PROBE_BASE";

/// The connection counter's read-only offsets of a connection's peer (`super::conns`).
const PEER_AT: &str = "CK_PEER_AT";

/// The connection counter's read-only offset of `sk_err` (`super::conns`), for the resets count.
const SK_ERR_AT: &str = "CK_SK_ERR_AT";

/// The program's read-only switches, set at load.
#[derive(Clone, Copy)]
pub(super) struct Switches {
    /// Read queue depths from kernel memory ([`READ_KERNEL`]).
    pub read_kernel: bool,
    /// Sum the per-CPU open-connection counts ([`SUM_CONNS`]).
    pub sum_conns: bool,
    /// A UDP group's mode code ([`UDP_MODE`]); None for a TCP group.
    pub udp_mode: Option<u32>,
    /// The first port of the probe range ([`PROBE_BASE`]).
    pub probe_base: u32,
    /// The `--policy` code ([`POLICY`]; a UDP group's program does not read it).
    pub policy: u32,
}

impl Switches {
    /// The group's select program.
    pub fn program(self) -> &'static str {
        program_name(self.udp_mode.is_some())
    }

    /// Whether the program reads `map` at full size: `flows` in UDP groups, `flow_cache` in
    /// `flow` mode, `pending` in `quic` mode (other groups' are one entry, not kilobytes or
    /// megabytes; the benches' `minimal_flows` always is).
    fn uses(self, map: &str) -> bool {
        use ck_common::udp::udp_mode::{FLOW, QUIC};
        match map {
            "flows" => self.udp_mode.is_some(),
            "flow_cache" => self.udp_mode == Some(FLOW),
            "pending" => self.udp_mode == Some(QUIC),
            // A bench's yardstick's (`ck_udp_minimal_recall`): never ck's.
            "minimal_flows" => false,
            _ => true,
        }
    }
}

/// The select program of a TCP group or (`udp`) a UDP group.
pub(super) fn program_name(udp: bool) -> &'static str {
    match udp {
        true => "ck_select_udp",
        false => "ck_select",
    }
}

/// Parses the object (maps created, or opened from their pins in `pin_dir` with `reuse`) and
/// loads the program with `switches`.
pub(super) fn open(
    pin_dir: &std::path::Path,
    group: &str,
    log: bool,
    reuse: bool,
    switches: Switches,
    started: std::time::Instant,
) -> Result<Ebpf, BpfError> {
    // No CO-RE relocations in the program: do not relocate against the kernel's BTF. (aya
    // 0.14's `EbpfLoader::new` still reads and parses it, 10 to 25 ms of ck's start-up; its API
    // has no way around that. ck's own parse, for the offsets below, runs beside it.)
    // aya-log's level lives in the object's read-only data: 0 turns every log statement off
    // (the verifier then drops them), so the program writes no record without --bpf-log. The
    // kernel-read switch works the same way.
    let level: u8 = if log { u8::MAX } else { 0 };
    // The program reads 0 in a TCP group, which never runs its UDP code.
    let udp_mode = switches.udp_mode.unwrap_or(0);
    let read_kernel = u8::from(switches.read_kernel);
    let sum_conns = u8::from(switches.sum_conns);
    let cpus = aya::util::nr_cpus()
        .ok()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    let mut loader = super::kernel_layout::resolve_beside(EbpfLoader::new);
    let peer_at = super::conns::peer_offsets();
    let sk_err_at = super::conns::sk_err_offset();
    loader
        .btf(None)
        .override_global(aya_log::LEVEL, &level, true)
        .override_global(READ_KERNEL, &read_kernel, true)
        .override_global(SUM_CONNS, &sum_conns, true)
        .override_global(CPUS, &cpus, true)
        .override_global(UDP_MODE, &udp_mode, true)
        .override_global(PROBE_BASE, &switches.probe_base, true)
        .override_global(POLICY, &switches.policy, true)
        .override_global(PEER_AT, &peer_at, true)
        .override_global(SK_ERR_AT, &sk_err_at, true);
    for map in ["flows", "flow_cache", "pending", "minimal_flows"] {
        if !switches.uses(map) {
            loader.map_max_entries(map, 1);
        }
    }
    let paths: Vec<_> = PINNED_MAPS.iter().map(|m| (*m, pin_dir.join(m))).collect();
    if reuse {
        // aya opens a map pinned at the path instead of creating one.
        for (map, path) in &paths {
            if !path.exists() {
                return Err(BpfError::Pin {
                    what: "finding the pinned map",
                    path: path.display().to_string(),
                    error: std::io::Error::from(std::io::ErrorKind::NotFound),
                    advice: String::new(),
                });
            }
            loader.map_pin_path(map, path.as_path());
        }
    }
    let mut ebpf = super::object::object()
        .and_then(|object| loader.load(object).context("loading the BPF object"))
        .map_err(load_err("loading the BPF program"))?;
    tracing::debug!(
        group,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "BPF object parsed, maps created"
    );
    let name = switches.program();
    let program: &mut SkReuseport = ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing from the object"))
        .and_then(|p| {
            p.try_into()
                .with_context(|| format!("{name} is not an sk_reuseport program"))
        })
        .map_err(load_err("finding the program"))?;
    program
        .load()
        .context("the kernel refused the program")
        .map_err(load_err("loading the program"))?;
    tracing::debug!(
        group,
        ms = started.elapsed().as_secs_f64() * 1e3,
        "BPF object and program loaded"
    );
    Ok(ebpf)
}

/// The kernel's answer in a load error, without the verifier's log.
pub(super) fn refusal(e: &BpfError) -> String {
    let text = match e {
        BpfError::Load { error, .. } => format!("{error:#}"),
        other => other.to_string(),
    };
    let first = text.split(". Verifier output").next().unwrap_or_default();
    first.lines().next().unwrap_or_default().to_string()
}

/// What a group's program is loaded for.
#[derive(Clone, Copy)]
pub(super) struct Target {
    /// The `--policy` code (a UDP group's program ignores it).
    pub policy: u32,
    /// A UDP group's `--udp-mode` code; None for a TCP group.
    pub udp_mode: Option<u32>,
    /// The first port of the instance's probe range.
    pub probe_base: u16,
    /// A canary's queue ages may be watched: the program reads kernel memory under any
    /// policy (else only under least-queue).
    pub watch_queues: bool,
}

/// Why a program loaded without a queue watch cannot watch a canary's queue ages.
const NO_WATCH: &str = "ck run was started without --canary-max-queue-age, so its program was \
     loaded without its reads of kernel memory (they add about 0.4 s to the start); give \
     --canary-max-queue-age to ck run or its config";

/// A group's object as [`open_for`] loaded it for its policy.
pub(super) struct Loaded {
    /// The object, its program loaded.
    pub ebpf: Ebpf,
    /// least-queue: the offsets its exact depth reads use, or why it steers by samples.
    pub queue: Result<QueueOffsets, String>,
    /// least-conn: Ok when the program sums the kernel's counts, else why it cannot.
    pub conn_sum: Result<(), String>,
    /// The offsets the program reads kernel memory at (least-queue's depths, the canary's
    /// queue watch), or why it cannot read it.
    pub reads: Result<QueueOffsets, String>,
}

/// Loads the object for `policy` (a UDP group, `udp_mode` set: its own program, whatever the
/// policy): a TCP group's program reads kernel memory where the kernel lets it (BTF offsets
/// found, and the kernel takes the program that reads it: least-queue's exact depths, the
/// canary's queue watch), least-conn's sums the per-CPU connection counts where the kernel has the helper
/// (Linux >= 5.19); otherwise the same program is loaded without those parts, and why is kept.
pub(super) fn open_for(
    pin_dir: &std::path::Path,
    group: &str,
    log: bool,
    reuse: bool,
    target: Target,
    started: std::time::Instant,
) -> Result<Loaded, BpfError> {
    let Target {
        policy,
        udp_mode,
        probe_base,
        watch_queues,
    } = target;
    let open = |read_kernel: bool, sum_conns: bool| {
        let switches = Switches {
            read_kernel,
            sum_conns,
            udp_mode,
            probe_base: u32::from(probe_base),
            policy,
        };
        open(pin_dir, group, log, reuse, switches, started)
    };
    let not_queue = || Err("the policy does not read queue depths".to_string());
    let not_conn = || Err("the policy does not sum connection counts".to_string());
    if udp_mode.is_some() {
        let none = || Err("a UDP group has no accept queue".to_string());
        return Ok(Loaded {
            ebpf: open(false, false)?,
            queue: none(),
            conn_sum: Err("a UDP group has no connections".into()),
            reads: none(),
        });
    }
    // A TCP group's program reads kernel memory where the kernel lets it for least-queue's
    // depths, and under any policy when a canary's queue ages may be watched (dead code until
    // one is). Where it refuses, the same program without the reads, and why.
    let with_reads = |sum_conns: bool| -> Result<(Ebpf, Result<QueueOffsets, String>), BpfError> {
        // Without a queue watch only least-queue needs the reads: the verifier's walk of them
        // is left out of the start-up.
        if policy != ck_common::policy::LEAST_QUEUE && !watch_queues {
            return Ok((open(false, sum_conns)?, Err(NO_WATCH.into())));
        }
        let offsets = super::queue_depth::offsets();
        if offsets.is_err() {
            return Ok((open(false, sum_conns)?, offsets));
        }
        match open(true, sum_conns) {
            Ok(ebpf) => Ok((ebpf, offsets)),
            Err(refused) => {
                tracing::debug!(group, "the program that reads kernel memory: {refused}");
                let why = format!(
                    "the kernel refused the program that reads them ({}); \
                     bpf_probe_read_kernel needs CAP_PERFMON and no kernel lockdown",
                    refusal(&refused)
                );
                Ok((open(false, sum_conns)?, Err(why)))
            }
        }
    };
    match policy {
        ck_common::policy::LEAST_QUEUE => {
            let (ebpf, reads) = with_reads(false)?;
            Ok(Loaded {
                ebpf,
                queue: reads.clone(),
                conn_sum: not_conn(),
                reads,
            })
        }
        ck_common::policy::LEAST_CONN => {
            let forced = super::conn_steering::forced().map_err(|e| BpfError::Load {
                what: "choosing least-conn's counts".into(),
                error: anyhow::anyhow!(e),
                advice: String::new(),
            })?;
            if let Some(why) = forced {
                let (ebpf, reads) = with_reads(false)?;
                return Ok(Loaded {
                    ebpf,
                    queue: not_queue(),
                    conn_sum: Err(why),
                    reads,
                });
            }
            match with_reads(true) {
                Ok((ebpf, reads)) => Ok(Loaded {
                    ebpf,
                    queue: not_queue(),
                    conn_sum: Ok(()),
                    reads,
                }),
                Err(refused) => {
                    tracing::debug!(group, "the program that sums connection counts: {refused}");
                    let why = format!(
                        "the kernel refused the program that sums them ({}); \
                         bpf_map_lookup_percpu_elem needs Linux >= 5.19",
                        refusal(&refused)
                    );
                    let (ebpf, reads) = with_reads(false)?;
                    Ok(Loaded {
                        ebpf,
                        queue: not_queue(),
                        conn_sum: Err(why),
                        reads,
                    })
                }
            }
        }
        _ => {
            let (ebpf, reads) = with_reads(false)?;
            Ok(Loaded {
                ebpf,
                queue: not_queue(),
                conn_sum: not_conn(),
                reads,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason `ck status` gives for a refused program is the kernel's answer, without the
    /// verifier's log.
    #[test]
    fn a_refusal_is_the_kernels_answer_without_the_log() {
        let error = anyhow::anyhow!(
            "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier output: \
             0: R1=ctx()\n1: (85) call bpf_probe_read_kernel#113\nunknown func"
        )
        .context("the kernel refused the program");
        let err = BpfError::Load {
            what: "loading the program".into(),
            error,
            advice: "run with --no-bpf".into(),
        };
        assert_eq!(
            refusal(&err),
            "the kernel refused the program: the BPF_PROG_LOAD syscall returned Invalid argument \
             (os error 22)"
        );
    }
}
