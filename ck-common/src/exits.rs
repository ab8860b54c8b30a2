//! The exit watch (`ck_exits`, `tp_btf/sched_process_exit`): the moment a watched worker's
//! last thread exits, before the kernel frees its memory, the program sends the worker's pid
//! and wait status. The supervisor replaces a worker that died on its own then, instead of
//! when the process has been torn down and its pidfd reports it (8-11 ms later for a Node
//! server of 100 MB, longer for larger heaps).

/// Most processes watched at once (workers and spares of every slot, with room for pids not
/// unwatched yet).
pub const MAX_WATCHED: u32 = 1024;

/// `SIGNAL_GROUP_EXIT` in `signal_struct.flags` (`include/linux/sched/signal.h`): the group is
/// exiting, and `group_exit_code` is its wait status.
pub const SIGNAL_GROUP_EXIT: u32 = 0x4;

/// Where the program finds a dying task's wait status, resolved from the kernel's BTF at load
/// (the `exit_offsets` map, one entry).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitOffsets {
    /// `task_struct.signal` (a pointer).
    pub signal: u32,
    /// `signal_struct.flags`.
    pub signal_flags: u32,
    /// `signal_struct.group_exit_code`.
    pub group_exit_code: u32,
    /// `task_struct.group_leader` (a pointer).
    pub group_leader: u32,
    /// `task_struct.exit_code`.
    pub exit_code: u32,
}

/// A watched process is exiting (the `exits` ring buffer).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitEvent {
    /// Its pid (thread-group id).
    pub pid: u32,
    /// Its wait status as `waitid` will report it: the group's exit code when the group exits
    /// (`exit_group`, a fatal signal), else its leader's.
    pub status: i32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: `#[repr(C)]`, `Copy`, five u32 fields: no padding.
    unsafe impl aya::Pod for super::ExitOffsets {}
    // SAFETY: `#[repr(C)]`, `Copy`, a u32 and an i32: no padding.
    unsafe impl aya::Pod for super::ExitEvent {}
}
