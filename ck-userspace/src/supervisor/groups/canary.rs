//! What the kernel counts for a canary's slots (`--canary-max-resets`, `--canary-max-drops`,
//! `--canary-max-queue-age`), read across the TCP groups, and the queue watch turned on and
//! off in each group's program. Whether the limits asked can be counted here is said before a
//! canary starts.
use crate::settings::choices::CanaryLimits;
use crate::supervisor::{fleet::canary::Counted, groups::Groups, slots::SlotTable};

impl Groups {
    /// Why a canary with `limits` cannot be judged here (a limit the kernel does not count in
    /// every TCP group), if it cannot.
    pub(in crate::supervisor) fn canary_limits_refused(
        &self,
        limits: &CanaryLimits,
    ) -> Option<String> {
        if !limits.any() {
            return None;
        }
        if self.tcp().next().is_none() {
            return Some(
                "the canary's limits count TCP connections, and this instance has no TCP group; \
                 drop --canary-max-resets, --canary-max-drops and --canary-max-queue-age"
                    .into(),
            );
        }
        for group in self.tcp() {
            let why = match &group.bpf {
                None => Some("ck runs without its BPF program here (--no-bpf)".to_string()),
                Some(bpf) => {
                    let watch = bpf.canary_watch();
                    let resets = limits.max_resets.is_some() && !watch.counts_resets();
                    let ages = limits.max_queue_age_ms.is_some();
                    match (resets, ages.then(|| watch.queue_watch_refused()).flatten()) {
                        (true, _) => Some(format!(
                            "the kernel does not count resets here ({})",
                            bpf.conn_count_fallback()
                                .unwrap_or("its BTF does not say where a socket's error lies")
                        )),
                        (false, Some(why)) => Some(format!(
                            "the program cannot read queue ages from kernel memory here ({why})"
                        )),
                        (false, None) => None,
                    }
                }
            };
            let needs_bpf = limits.max_resets.is_some() || limits.max_queue_age_ms.is_some();
            if let Some(why) = why.filter(|_| needs_bpf) {
                return Some(format!(
                    "{why}: a canary with --canary-max-resets or --canary-max-queue-age cannot be \
                     judged in group {}; drop those limits (--canary-max-drops needs no program)",
                    group.addr
                ));
            }
        }
        None
    }

    /// What the kernel counted for slot `index` (its sockets in `table`), summed over the TCP
    /// groups: resets sent, connections dropped, the longest queue wait watched.
    pub(in crate::supervisor) fn counted(&self, table: &SlotTable, index: u32) -> Counted {
        let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        let mut counted = Counted::default();
        let sockets = table.slots.get(&index).map(|s| s.sockets.as_slice());
        for (position, group) in self.iter().enumerate() {
            if group.addr.is_udp() {
                continue;
            }
            let socket = sockets.and_then(|s| s.get(position));
            let drops = socket.and_then(|s| crate::os::sockets::listen_drops(s).ok());
            counted.drops = sum(counted.drops, drops.map(u64::from));
            let Some(bpf) = &group.bpf else { continue };
            let watch = bpf.canary_watch();
            counted.resets = sum(counted.resets, watch.resets(index));
            counted.queue_age = match (counted.queue_age, watch.queue_age(index)) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        counted
    }

    /// The share (0 to 1) of new connections the kernel gives `slots` now, the mean over the
    /// groups: read from each group's maps ([`crate::bpf::BpfGroup::share_of`]); without the
    /// program, the kernel's hash spreads over every socket of the group, so their share of
    /// its sockets. None when no group can tell.
    pub(in crate::supervisor) fn share_of(&self, table: &SlotTable, slots: &[u32]) -> Option<f64> {
        let shares: Vec<f64> = self
            .iter()
            .enumerate()
            .filter_map(|(position, group)| match &group.bpf {
                Some(bpf) => bpf.share_of(slots),
                None => {
                    let all: Vec<u32> = (table.slots.iter())
                        .filter(|(_, slot)| slot.sockets.get(position).is_some())
                        .map(|(index, _)| *index)
                        .collect();
                    let theirs = all.iter().filter(|s| slots.contains(s)).count();
                    (!all.is_empty()).then(|| theirs as f64 / all.len() as f64)
                }
            })
            .collect();
        (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64)
    }

    /// Watches the accept queues of exactly `slots` (none: the watch ends) in every TCP group.
    pub(in crate::supervisor) fn watch_queues(&mut self, slots: &[u32]) {
        for group in self.iter_mut().filter(|g| !g.addr.is_udp()) {
            let Some(bpf) = &mut group.bpf else { continue };
            if let Err(e) = bpf.watch_queues(slots) {
                tracing::warn!(group = %group.name, "the canary's queue watch: {e}");
            }
        }
    }
}
