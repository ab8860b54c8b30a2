//! The pipes that carry a worker's stdout and stderr to ck (`--worker-output capture`): made
//! close-on-exec, their read ends non-blocking (ck's reader never waits on a quiet worker, the
//! worker's write end stays blocking), their buffers raised towards `fs.pipe-max-size` (1 MiB
//! at most) so a worker can write that much while no ck reads (`ck upgrade`, a dead ck under
//! `--survive-supervisor`) before its write blocks.
use std::{
    io,
    os::fd::{AsFd as _, AsRawFd as _, BorrowedFd, OwnedFd},
};

use nix::fcntl::{FcntlArg, OFlag, fcntl};

/// The most a worker's pipe is raised to.
pub const MAX_PIPE_BYTES: usize = 1 << 20;

/// One output pipe of a worker.
pub struct OutputPipe {
    /// ck's end (non-blocking, close-on-exec).
    pub read: OwnedFd,
    /// The worker's end: becomes its fd 1 or 2 (blocking).
    pub write: OwnedFd,
}

impl OutputPipe {
    /// A new pipe, its buffer raised to `min(fs.pipe-max-size, MAX_PIPE_BYTES)` where the
    /// kernel allows it (a refusal keeps the default 64 KiB).
    pub fn new() -> io::Result<OutputPipe> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let flags = OFlag::from_bits_truncate(fcntl(read.as_fd(), FcntlArg::F_GETFL)?);
        fcntl(read.as_fd(), FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
        let size = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .ok()
            .and_then(|s| s.trim().parse::<usize>().ok())
            .unwrap_or(MAX_PIPE_BYTES)
            .min(MAX_PIPE_BYTES);
        let _ = fcntl(read.as_fd(), FcntlArg::F_SETPIPE_SZ(size as libc::c_int));
        Ok(OutputPipe { read, write })
    }
}

/// The inode of a pipe (the same for both ends and every copy): a ck that takes a worker back
/// checks that the descriptor it copied is the very pipe it recorded.
pub fn inode(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(nix::sys::stat::fstat(fd)?.st_ino)
}

/// Checks that `fd` (copied from a worker with `pidfd_getfd`) is the read end of pipe `ino`,
/// and makes it non-blocking for ck's reader.
pub fn check_read_end(fd: BorrowedFd<'_>, ino: u64) -> io::Result<()> {
    let stat = nix::sys::stat::fstat(fd)?;
    let fifo = stat.st_mode & libc::S_IFMT == libc::S_IFIFO;
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    let read_only = flags & OFlag::O_ACCMODE == OFlag::O_RDONLY;
    if !fifo || !read_only || stat.st_ino != ino {
        return Err(io::Error::other(format!(
            "fd {} is not the read end of pipe {ino}",
            fd.as_raw_fd()
        )));
    }
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// A pipe's read end registered with the current tokio runtime's reactor.
pub struct AsyncReadEnd(tokio::io::unix::AsyncFd<std::fs::File>);

impl AsyncReadEnd {
    /// Registers `fd` (non-blocking) with the runtime entered now.
    pub fn new(fd: OwnedFd) -> io::Result<AsyncReadEnd> {
        // SAFETY: the AsyncFd owns the file for its whole life, so the fd it registers stays
        // open (and is not reused) until the registration is dropped with it.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(
                std::fs::File::from(fd),
                tokio::io::Interest::READABLE,
            )
        }?;
        Ok(AsyncReadEnd(fd))
    }

    /// Waits until the pipe holds something, then reads it and hands it to `take`, both
    /// while holding `gate` (so whoever holds the gate knows no read is half done): the count
    /// read, 0 at the pipe's end.
    pub async fn read_with(
        &self,
        buf: &mut [u8],
        gate: &std::sync::Mutex<()>,
        mut take: impl FnMut(&[u8]),
    ) -> io::Result<usize> {
        use std::io::Read as _;
        loop {
            let mut ready = self.0.readable().await?;
            let read = {
                let _held = gate.lock().unwrap_or_else(|e| e.into_inner());
                let read = ready.try_io(|f| f.get_ref().read(buf));
                if let Ok(Ok(n)) = read {
                    take(&buf[..n]);
                }
                read
            };
            match read {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(result) => return result,
                Err(_would_block) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};

    #[test]
    fn the_read_end_does_not_block_and_the_pipe_is_raised() {
        let pipe = OutputPipe::new().unwrap();
        let mut read = std::fs::File::from(pipe.read);
        let mut buf = [0u8; 8];
        let quiet = read.read(&mut buf).unwrap_err();
        assert_eq!(quiet.kind(), io::ErrorKind::WouldBlock);
        let size = fcntl(read.as_fd(), FcntlArg::F_GETPIPE_SZ).unwrap() as usize;
        let max: usize = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(size, max.min(MAX_PIPE_BYTES));
        let ino = inode(read.as_fd()).unwrap();
        let mut write = std::fs::File::from(pipe.write);
        assert_eq!(inode(write.as_fd()).unwrap(), ino);
        write.write_all(b"hi\n").unwrap();
        assert_eq!(read.read(&mut buf).unwrap(), 3);
        check_read_end(read.as_fd(), ino).unwrap();
        assert!(check_read_end(write.as_fd(), ino).is_err(), "a write end");
        assert!(
            check_read_end(read.as_fd(), ino + 1).is_err(),
            "another pipe"
        );
    }
}
