//! Reading what a program writes to a ring buffer (or aya-log's logger) on the runtime, as
//! soon as the kernel says it is readable.

/// Reads the ring buffer `ring` on the runtime and hands every record, a `T` the program wrote,
/// to `send`, until it returns false (a record shorter than a `T` is skipped).
pub(crate) fn forward_records<T: aya::Pod + Send + 'static>(
    ring: aya::maps::RingBuf<aya::maps::MapData>,
    send: impl Fn(T) -> bool + Send + 'static,
) -> anyhow::Result<()> {
    read_when_ready(ring, move |ring| {
        while let Some(record) = ring.next() {
            if record.len() < std::mem::size_of::<T>() {
                continue;
            }
            // SAFETY: the record holds at least one `T` (checked above), a plain-data type
            // (`Pod`), read without alignment assumptions.
            let value = unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<T>()) };
            if !send(value) {
                return false;
            }
        }
        true
    })
}

/// Watches `source` (a ring buffer, aya-log's logger) on the runtime and calls `drain` each
/// time it is readable, until `drain` returns false.
pub(crate) fn read_when_ready<T>(
    source: T,
    mut drain: impl FnMut(&mut T) -> bool + Send + 'static,
) -> anyhow::Result<()>
where
    T: std::os::fd::AsRawFd + Send + 'static,
{
    // SAFETY: `source` owns its fd for its whole life and `as_raw_fd` always returns that fd;
    // the AsyncFd owns `source`, so the fd outlives the registration.
    let mut fd = unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(source, tokio::io::Interest::READABLE)
    }
    .map_err(|e| anyhow::anyhow!("watching a BPF buffer: {e}"))?;
    tokio::spawn(async move {
        loop {
            let Ok(mut guard) = fd.readable_mut().await else {
                return;
            };
            if !drain(guard.get_inner_mut()) {
                return;
            }
            guard.clear_ready();
        }
    });
    Ok(())
}
