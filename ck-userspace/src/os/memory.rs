//! ck's own memory: giving freed heap back to the kernel after a one-off allocation burst.

/// Returns the freed parts of the calling thread's malloc arena to the kernel (`malloc_trim`).
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
