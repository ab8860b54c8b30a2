//! Two `bpf(2)` commands aya 0.14 has no call for, used by the connection counter on cgroups:
//! writing a cgroup storage's value (`slot_cgroups`), and attaching a program to a cgroup
//! without a bpf link (`BPF_PROG_ATTACH`), which then stays attached as long as the cgroup
//! lives, even once removed, while a socket created there is open. (aya attaches through a
//! link where the kernel has them, and a link detaches when its last descriptor or pin goes.)
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd},
};

use aya::{
    Ebpf,
    maps::{Map, MapData},
};
use ck_common::SlotCgroup;

/// The `bpf(2)` commands (`linux/bpf.h`).
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_ATTACH: libc::c_long = 8;
/// `BPF_CGROUP_SOCK_OPS` of `enum bpf_attach_type`.
const BPF_CGROUP_SOCK_OPS: u32 = 3;
/// Programs attached with it run beside every other program of the cgroup (and its parents').
const BPF_F_ALLOW_MULTI: u32 = 2;

/// One `bpf(2)` call with `attr` (the command's part of `union bpf_attr`).
fn bpf<T>(command: libc::c_long, attr: &T) -> io::Result<()> {
    // SAFETY: the kernel reads a `bpf_attr` prefix of the size passed (zero-filling the rest),
    // which `attr` is, alive for the call; what its pointers point at is the caller's.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            std::ptr::from_ref(attr),
            std::mem::size_of::<T>(),
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Writes `value` as the value of cgroup `id` (its directory's inode) in the cgroup storage
/// `storage`. The value exists once a program using the map is attached to that cgroup.
pub(super) fn write_slot(storage: &MapData, id: u64, value: SlotCgroup) -> io::Result<()> {
    #[repr(C)]
    struct UpdateAttr {
        map_fd: u32,
        _pad: u32,
        key: u64,
        value: u64,
        flags: u64,
    }
    bpf(
        BPF_MAP_UPDATE_ELEM,
        &UpdateAttr {
            map_fd: storage.fd().as_fd().as_raw_fd() as u32,
            _pad: 0,
            // Pointers to the map's key (a u64) and value, alive for the call.
            key: std::ptr::from_ref(&id) as u64,
            value: std::ptr::from_ref(&value) as u64,
            flags: 0,
        },
    )
}

/// Attaches the `sock_ops` program `program` to the cgroup `cgroup` beside its other programs,
/// with no link: it stays until the cgroup is released (after its removal, once the last
/// socket created in it closes). EEXIST: this program is attached there already.
pub(super) fn attach_sock_ops_for_life(
    program: BorrowedFd<'_>,
    cgroup: BorrowedFd<'_>,
) -> io::Result<()> {
    #[repr(C)]
    struct AttachAttr {
        target_fd: u32,
        attach_bpf_fd: u32,
        attach_type: u32,
        attach_flags: u32,
    }
    bpf(
        BPF_PROG_ATTACH,
        &AttachAttr {
            target_fd: cgroup.as_raw_fd() as u32,
            attach_bpf_fd: program.as_raw_fd() as u32,
            attach_type: BPF_CGROUP_SOCK_OPS,
            attach_flags: BPF_F_ALLOW_MULTI,
        },
    )
}

/// The `slot_cgroups` cgroup storage of `ebpf` (aya 0.14 has no typed map for it).
pub(super) fn take_storage(ebpf: &mut Ebpf) -> anyhow::Result<MapData> {
    match ebpf.take_map("slot_cgroups") {
        Some(Map::CgroupStorage(data)) => Ok(data),
        _ => anyhow::bail!("map slot_cgroups missing from the object, or not a cgroup storage"),
    }
}
