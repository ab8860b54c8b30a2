//! What a worker that ended on its own before it was ready did wrong ([`BootMistake`]), kept
//! with its slot for `ck status`. `supervisor::inputs::exits` reads it from the kernel as the
//! worker exits.

/// What a worker that ended on its own before it was ready did wrong, read from the kernel as
/// it exited: a server's process should neither end at once nor leave others running for it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum BootMistake {
    /// It exited 0 before it was ready, leaving nothing behind (a script that starts its
    /// server in the background and returns).
    ExitedAtOnce {
        /// Its pid.
        pid: u32,
        /// How long it ran, in ms.
        ran_ms: u64,
    },
    /// It exited before it was ready while processes it started ran on in its cgroup: it
    /// forked and exited (daemonized). ck stops what it left.
    Daemonized {
        /// Its pid.
        pid: u32,
        /// How long it ran, in ms.
        ran_ms: u64,
        /// How it ended (`exit 0`).
        exit: String,
        /// The processes it left (pid, command name).
        left: Vec<(u32, String)>,
    },
}

impl BootMistake {
    /// What the worker did and the fix, for `ck status`'s DEGRADED line and the log.
    pub(crate) fn describe(&self, slot: u32) -> String {
        match self {
            BootMistake::ExitedAtOnce { pid, ran_ms } => format!(
                "slot {slot} (pid {pid}): its worker exits 0 at once ({ran_ms} ms after it \
                 started, before it ever accepted), as a script that starts the server in the \
                 background and returns does: a worker must stay in the foreground and serve \
                 the socket ck passes it (fd 3); run the server itself (`exec` it, no `&`)"
            ),
            BootMistake::Daemonized {
                pid,
                ran_ms,
                exit,
                left,
            } => {
                let left: Vec<String> = left
                    .iter()
                    .map(|(pid, command)| format!("{pid} ({command})"))
                    .collect();
                format!(
                    "slot {slot} (pid {pid}): its worker daemonized: it ended ({exit}) {ran_ms} \
                     ms after it started, before it was ready, leaving pid {} running in its \
                     cgroup, which ck stopped: ck supervises the process it starts; run the \
                     server in the foreground (no fork-and-exit: its no-daemon or foreground \
                     option)",
                    left.join(", ")
                )
            }
        }
    }
}
