//! Finding the instance a waiting command (`ck status --wait`, `ck stop --wait`) is about
//! while it may not run yet: by `--name` at once; by `--pid` once that ck has made its control
//! socket (an error as soon as the process is gone); or the only one, once one runs, refusing
//! as soon as there are several (running or starting), so it never answers for another.
use std::time::{Duration, Instant};

use anyhow::bail;
use ck::control::instances::{self, Census, Which};

/// How often a wait looks again.
pub const POLL: Duration = Duration::from_millis(50);

/// A search for the instance `which` names.
pub struct Finder {
    which: Which,
    /// With `--pid`: that process's pidfd, to tell a ck that exited from one that is slow.
    pidfd: Option<std::os::fd::OwnedFd>,
    found: Option<String>,
}

impl Finder {
    /// Starts looking for `which`; an error at once when `--pid` names no process.
    pub fn new(which: Which) -> anyhow::Result<Finder> {
        let pidfd = match which {
            Which::Pid(pid) => match ck::os::pidfd::open(pid) {
                Ok(fd) => Some(fd),
                Err(_) => bail!(instances::no_instance_with_pid(pid, &Census::take())),
            },
            _ => None,
        };
        Ok(Finder {
            which,
            pidfd,
            found: None,
        })
    }

    /// The instance's name once it runs (None: not yet); an error when it never will here:
    /// the `--pid` process exited first, or several instances run or start and none was named.
    pub fn poll(&mut self) -> anyhow::Result<Option<String>> {
        if self.found.is_some() {
            return Ok(self.found.clone());
        }
        self.found = match &self.which {
            Which::Named(name) => Some(name.clone()),
            Which::Pid(pid) => {
                let census = Census::take();
                match census.named_by_pid(*pid) {
                    Some(name) => Some(name),
                    None if self.pid_gone() => bail!(
                        "ck (pid {pid}) exited before its control socket appeared: its output \
                         (stderr) says why; fix that and start it again"
                    ),
                    None => None,
                }
            }
            Which::Only => Census::take().only()?,
        };
        Ok(self.found.clone())
    }

    /// Whether the `--pid` process has exited.
    fn pid_gone(&self) -> bool {
        self.pidfd.as_ref().is_some_and(ck::os::pidfd::has_exited)
    }

    /// The instance's name, waiting for it until `timeout` has passed since `began`.
    pub fn wait(&mut self, began: Instant, timeout: Duration) -> anyhow::Result<String> {
        loop {
            if let Some(name) = self.poll()? {
                return Ok(name);
            }
            if began.elapsed() >= timeout {
                bail!(self.not_found(timeout));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Why no instance was found within `timeout`, and the fix.
    pub fn not_found(&self, timeout: Duration) -> String {
        let census = Census::take();
        match &self.which {
            Which::Pid(pid) => format!(
                "no ck instance with pid {pid} within {timeout:?}: {}",
                instances::no_instance_with_pid(*pid, &census)
            ),
            Which::Named(name) => format!(
                "ck instance {name:?} did not answer within {timeout:?}; ck instances here: {}; \
                 is `ck run --name {name}` running, with the same CK_RUN_DIR? Look at its log \
                 (its stderr), or wait longer with --timeout",
                census.list()
            ),
            Which::Only => format!(
                "no ck instance started within {timeout:?} (ck instances here: {}; control \
                 sockets in {}); is `ck run` running, with the same CK_RUN_DIR? Look at its log \
                 (its stderr), or wait longer with --timeout",
                census.list(),
                ck::os::instance::run_dir().display()
            ),
        }
    }
}
