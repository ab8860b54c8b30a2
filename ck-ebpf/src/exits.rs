//! The exit watch: `ck_exits` (`tp_btf/sched_process_exit`) sends the pid and wait status of a
//! watched worker (`exit_watch`, written by the supervisor) in the `exits` ring buffer when its
//! last thread exits. The kernel fires the tracepoint before it frees the process's memory
//! (kernels whose tracepoint carries `group_dead`; on older ones the program does not load), so
//! the supervisor learns of a death before the pidfd reports it.
use aya_ebpf::{
    btf_maps::{Array, HashMap, RingBuf},
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task, bpf_probe_read_kernel},
    macros::{btf_map, btf_tracepoint},
    programs::BtfTracePointContext,
};
use ck_common::exits::{ExitEvent, ExitOffsets, MAX_WATCHED, SIGNAL_GROUP_EXIT};

/// Watched pids (thread-group ids) -> their slot.
#[btf_map(name = "exit_watch")]
static WATCHED: HashMap<u32, u32, { MAX_WATCHED as usize }> = HashMap::new();

/// Where the wait status lies (one entry, from BTF).
#[btf_map(name = "exit_offsets")]
static OFFSETS: Array<ExitOffsets, 1> = Array::new();

/// Exits of watched processes.
#[btf_map(name = "exits")]
static EXITS: RingBuf<ExitEvent, 16384> = RingBuf::new();

#[btf_tracepoint(function = "sched_process_exit")]
pub fn ck_exits(ctx: BtfTracePointContext) -> i32 {
    // sched_process_exit(struct task_struct *p, bool group_dead), fired by the exiting task
    // itself. Reading the second argument is what refuses the load where it does not exist.
    let group_dead: u64 = ctx.arg(1);
    if group_dead & 0xff == 0 {
        return 0;
    }
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: a lookup whose value is only tested for presence.
    if unsafe { WATCHED.get(&pid) }.is_none() {
        return 0;
    }
    let Some(at) = OFFSETS.get(0) else {
        return 0;
    };
    if let Some(status) = wait_status(at) {
        // A full ring buffer loses the event: the pidfd still reports the exit, later.
        let _ = EXITS.output(&ExitEvent { pid, status }, 0);
    }
    0
}

/// The exiting task's wait status, as `wait_task_zombie` computes it: the group's exit code
/// when the group exits (`exit_group`, a fatal signal: the usual case), else its leader's.
#[inline(always)]
fn wait_status(at: &ExitOffsets) -> Option<i32> {
    // SAFETY: a helper without arguments; the task is `current`, the exiting one. Taken as a
    // number (not the tracepoint's typed pointer) so that offsets from a map can be added.
    let task = unsafe { bpf_get_current_task() };
    let signal: u64 = read(task + u64::from(at.signal))?;
    let flags: u32 = read(signal + u64::from(at.signal_flags))?;
    if flags & SIGNAL_GROUP_EXIT != 0 {
        return read(signal + u64::from(at.group_exit_code));
    }
    let leader: u64 = read(task + u64::from(at.group_leader))?;
    read(leader + u64::from(at.exit_code))
}

/// A `T` copied from kernel memory at `addr` (None where it cannot be read).
#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    // SAFETY: `bpf_probe_read_kernel` copies without faulting (an unmapped address is an error
    // return) into a value of the requested type.
    unsafe { bpf_probe_read_kernel(addr as *const T) }.ok()
}
