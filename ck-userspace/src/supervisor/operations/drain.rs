//! `ck drain` / `ck undrain`: one slot, or with `--all` the whole host, out of the active set
//! and back. A drained slot keeps its socket open and its worker serving; with every slot
//! drained the program still chooses among them (the fallback tier of the active set: live
//! slots that are not ready), so connections that still arrive while a balancer has not yet
//! noticed `/readyz`'s 503 are served, never refused.
use crate::control::Response;
use crate::supervisor::{groups::Groups, lifecycle::Input, slots::SlotTable};

/// Why a drain cannot be done now (no BPF steering yet, or none at all), if so.
fn refused(groups: &Groups, no_bpf: bool) -> Option<Response> {
    if !groups.bpf_loaded() && !no_bpf {
        return Some(Response::Error(
            "BPF steering is still being set up (ck started a moment ago); try again".into(),
        ));
    }
    if !groups.bpf_loaded() {
        return Some(Response::Error(
            "draining without closing the socket needs BPF steering, which is off (--no-bpf); \
             restart ck without --no-bpf"
                .into(),
        ));
    }
    None
}

/// `ck drain SLOT` / `ck undrain SLOT`: the answer, and the input that does it (none when
/// refused or already so).
pub(in crate::supervisor) fn one(
    groups: &Groups,
    table: &SlotTable,
    no_bpf: bool,
    index: u32,
    drained: bool,
) -> (Response, Vec<(u32, Input)>) {
    if let Some(refused) = refused(groups, no_bpf) {
        return (refused, Vec::new());
    }
    let Some(slot) = table.slots.get(&index) else {
        let known: Vec<u32> = table.slots.keys().copied().collect();
        let why = format!("no slot {index}; slots in use: {known:?} (see `ck status`)");
        return (Response::Error(why), Vec::new());
    };
    if slot.life.drained == drained {
        let word = if drained { "drained" } else { "not drained" };
        let answer = Response::Ok(format!("slot {index} is already {word}"));
        return (answer, Vec::new());
    }
    let word = if drained { "drained" } else { "undrained" };
    let answer = Response::Ok(format!("slot {index} {word}"));
    (answer, vec![(index, Input::Drain(drained))])
}

/// `ck drain --all` / `ck undrain --all`: every slot in one batch (one publish), so the host
/// leaves or rejoins rotation at once: the answer, and the inputs that do it.
pub(in crate::supervisor) fn all(
    groups: &Groups,
    table: &SlotTable,
    no_bpf: bool,
    drained: bool,
) -> (Response, Vec<(u32, Input)>) {
    if let Some(refused) = refused(groups, no_bpf) {
        return (refused, Vec::new());
    }
    let changed: Vec<u32> = table
        .slots
        .values()
        .filter(|s| s.life.drained != drained)
        .map(|s| s.index)
        .collect();
    let word = if drained { "drained" } else { "undrained" };
    match drained {
        true => tracing::info!(
            slots = ?changed,
            "host drained (ck drain --all): /readyz answers 503, every socket stays open and \
             connections that still arrive are served"
        ),
        false => tracing::info!(slots = ?changed, "host undrained (ck undrain --all)"),
    }
    let answer = Response::Ok(format!(
        "every slot {word} ({} changed: {changed:?})",
        changed.len()
    ));
    let inputs = changed
        .iter()
        .map(|i| (*i, Input::Drain(drained)))
        .collect();
    (answer, inputs)
}
