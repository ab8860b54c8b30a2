//! ck's own memory: giving freed heap back to the kernel after a one-off allocation burst.

/// Makes glibc's malloc give a large freed block back to the kernel when it is freed, whichever
/// thread's arena held it: blocks of 128 KiB or more are mapped on their own (`mmap`) and
/// unmapped when freed, and a helper thread's arena shrinks as its top is freed.
///
/// By default glibc raises both thresholds each time a mapped block is freed (up to 32 and
/// 64 MiB): after the first parse of the kernel's BTF (a 5 MiB file, ~14 MiB of types), the next
/// parses allocate from the arenas and, freed, stay there. `malloc_trim` ([`trim_heap`]) cannot
/// return the top of a helper thread's arena, so a parse made on a thread of its own left ~9 MiB
/// resident in a supervisor of 10 (`bench footprint`, glibc build: 19.2 MiB idle, 10.2 MiB with
/// this). Setting the threshold once, at its default, turns that raising off. ck allocates
/// little once started, so the extra `mmap` calls cost nothing that shows. Nothing to do in the
/// static (musl) build, whose allocator gives freed pages back by itself.
pub fn give_large_blocks_back() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; it takes no pointer and may be called
    // at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024)
    };
}

/// Returns the freed parts of the malloc arenas to the kernel (`malloc_trim`).
/// Called once the BPF load thread is done: its arena held the parsed object and BTF. Nothing
/// to do in the static (musl) build: musl has no `malloc_trim`, and its allocator gives freed
/// pages back by itself.
pub fn trim_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks and releases free blocks of the allocator; it takes no
    // pointer from us and is safe to call at any time from any thread.
    unsafe {
        libc::malloc_trim(0)
    };
}
