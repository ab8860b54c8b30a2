//! The operator's commands in the property test: `ck scale`, a roll (`ck reload`, or the
//! replacement of one worker) and `ck rollback`, run through the fleet executor as the
//! supervisor runs them, each checked for what it must refuse and what it must leave.
use super::{Model, Op};
use crate::supervisor::{executor::decisions, fleet::roll::Revival, lifecycle::Life};

impl Model {
    /// Runs the operator's command `op`.
    pub(super) fn operator(&mut self, op: Op) {
        match op {
            Op::Scale(target) => {
                let refused = self.stopping || self.core.roll.is_some();
                let result = decisions::scale_to(self, target);
                assert!(
                    !refused || matches!(result, Err(Ok(_))),
                    "a scale was not refused while stopping or rolling"
                );
            }
            Op::Roll(n) => {
                let lives =
                    crate::supervisor::fleet::lives(self.lives.iter().map(|(i, l)| (*i, l)));
                let all = crate::supervisor::fleet::roll::reload_targets(&lives);
                let pending = match n % 2 {
                    0 => all,
                    _ => all.get(n % all.len().max(1)).copied().into_iter().collect(),
                };
                let reload = n % 2 == 0;
                let crashed = match reload {
                    true => crate::supervisor::fleet::roll::revive_targets(&lives),
                    false => Vec::new(),
                };
                let rolling = self.core.roll.is_some();
                // Every other reload starts as a canary of half the fleet, judged for 1 s.
                let canary = (n % 4 == 0).then_some(crate::settings::choices::CanaryAsk {
                    percent: 50,
                    for_ms: 1000,
                    by: crate::settings::choices::CanaryBy::Connection,
                    limits: Default::default(),
                });
                let started = decisions::begin_roll(self, pending, reload, canary).is_ok();
                assert!(
                    started != (self.stopping || rolling),
                    "a roll started while stopping or rolling, or was refused otherwise"
                );
                // A reload gives every slot without a worker a fresh one at once (or says it
                // could not start).
                for index in crashed.into_iter().filter(|_| started) {
                    let revived = self.lives[&index].state.run().is_some();
                    let failed =
                        self.core.roll.as_ref().is_none_or(|r| {
                            matches!(r.revived.get(&index), Some(Revival::Failed(_)))
                        });
                    assert!(
                        revived || failed,
                        "slot {index} not revived: {:#?}",
                        self.lives
                    );
                }
            }
            Op::Rollback => {
                let refused = self.stopping;
                if let Ok(plan) = decisions::rollback(self) {
                    assert!(!refused, "a rollback while stopping");
                    assert!(
                        self.core.roll.is_none(),
                        "a rollback ends the roll in flight"
                    );
                    let gone_or =
                        |i: &u32, f: &dyn Fn(&Life) -> bool| self.lives.get(i).is_none_or(f);
                    assert!(
                        plan.back
                            .iter()
                            .all(|i| gone_or(i, &|l| !l.standby && l.kept.is_none()))
                    );
                    assert!(plan.leaving.iter().all(|i| gone_or(i, &|l| !l.serving())));
                }
            }
            _ => unreachable!("not an operator's command: {op:?}"),
        }
    }
}
