//! `environment.md`: the environment variables ck reads and the ones it sets for its workers,
//! kept in one table ([`VARIABLES`]) that a test checks against every name the code passes to
//! `std::env::var`, `var_os`, `Command::env`, `env_remove` or the worker environment's `set`.
use std::fmt::Write as _;

use super::text::{GENERATED, cell};

/// Who reads a variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// ck reads it from its own environment.
    ReadByCk,
    /// ck sets it for every worker (a worker's own value is replaced).
    SetForWorkers,
    /// ck reads it from its environment and sets its own for the workers.
    Both,
    /// ck's internal plumbing; never set it by hand.
    Internal,
}

impl Role {
    fn words(self) -> &'static str {
        match self {
            Role::ReadByCk => "read by ck",
            Role::SetForWorkers => "set for workers",
            Role::Both => "read by ck, set for workers",
            Role::Internal => "internal",
        }
    }
}

/// One environment variable.
#[derive(Clone, Copy, Debug)]
pub struct Variable {
    /// Its name.
    pub name: &'static str,
    /// Who reads it.
    pub role: Role,
    /// What it holds or does.
    pub meaning: &'static str,
}

const fn var(name: &'static str, role: Role, meaning: &'static str) -> Variable {
    Variable {
        name,
        role,
        meaning,
    }
}

/// Every environment variable ck reads or sets, in the order of the page.
pub const VARIABLES: &[Variable] = &[
    var(
        "LISTEN_FDS",
        Role::SetForWorkers,
        "Without --adopt: how many listening sockets the worker got, from fd 3 on (one per \
         listen address, in the order of --port/--listen), as systemd's socket activation.",
    ),
    var(
        "LISTEN_FDNAMES",
        Role::SetForWorkers,
        "Without --adopt: the sockets' group names (`tcp4-8080`), separated by `:`.",
    ),
    var(
        "LISTEN_PID",
        Role::SetForWorkers,
        "Without --adopt: the worker's own pid (set by ck's exec trampoline just before it \
         runs APP), so that a library can check the sockets are its own.",
    ),
    var(
        "NOTIFY_SOCKET",
        Role::Both,
        "For workers: the socket to send `READY=1`, `STATUS=...`, `WATCHDOG=1` and `STOPPING=1` \
         to (sd_notify). Read by ck: when a service manager (systemd `Type=notify`) set it, ck \
         reports its own readiness and status there.",
    ),
    var(
        "WATCHDOG_USEC",
        Role::SetForWorkers,
        "With --watchdog: the heartbeat timeout in microseconds; a worker sends `WATCHDOG=1` \
         more often than that.",
    ),
    var(
        "WATCHDOG_PID",
        Role::SetForWorkers,
        "Removed from workers' environment (a value inherited from ck's own service manager \
         would name the wrong process).",
    ),
    var(
        "PORT",
        Role::SetForWorkers,
        "With --adopt: the first port, for a server that binds it itself. The built-in demo \
         worker binds it when it gets no socket.",
    ),
    var(
        "CK_LISTEN",
        Role::SetForWorkers,
        "With --adopt: every listen address, separated by spaces: TCP ones as `0.0.0.0:8080`, \
         UDP ones as `udp://0.0.0.0:443`.",
    ),
    var(
        "CK_SLOT",
        Role::SetForWorkers,
        "The worker's slot (0, 1, ...): a worker restarted after a crash keeps its slot, a roll \
         (`ck reload`) moves workers to other slots.",
    ),
    var(
        "CK_QUIC_SERVER_ID",
        Role::SetForWorkers,
        "With --udp-mode quic and a udp:// group: the server ID (hex, 2 bytes: the slot and the \
         low byte of the worker's generation) to put in the QUIC connection IDs the worker \
         chooses, after a first octet whose top three bits are 0 and before at least 4 bytes of \
         its own (QUIC-LB's plaintext layout); ck routes packets by it. The ck-worker crate's \
         `quic` module builds such IDs.",
    ),
    var(
        "CK_WORKER_ID",
        Role::SetForWorkers,
        "A number unique to each worker of the instance (never reused), e.g. for a per-worker \
         pid file or control socket.",
    ),
    var(
        "WEB_CONCURRENCY",
        Role::ReadByCk,
        "The default of --workers (else the number of CPUs ck may use).",
    ),
    var(
        "CK_RUN_DIR",
        Role::ReadByCk,
        "Where control sockets and locks live (`NAME.sock`, `NAME.lock`); default `/run/ck`. \
         Every ck command of one instance needs the same value.",
    ),
    var(
        "CK_PIN_DIR",
        Role::ReadByCk,
        "Where the BPF maps and links are pinned (a directory on a bpffs); default \
         `/sys/fs/bpf/ck`.",
    ),
    var(
        "CK_LOG",
        Role::ReadByCk,
        "ck's log filter (tracing's `EnvFilter` syntax: `debug`, `ck=debug,info`); default \
         `info`.",
    ),
    var(
        "NO_COLOR",
        Role::ReadByCk,
        "Set: no colours in text logs, even on a terminal.",
    ),
    var(
        "PATH",
        Role::Both,
        "Where APP is looked up when its name has no `/`; workers inherit ck's environment, \
         PATH included.",
    ),
    var(
        "CK_READY_DETECT",
        Role::ReadByCk,
        "`proc`: see a silent worker accept (--ready auto) from /proc alone, without ck's accept \
         probe.",
    ),
    var(
        "CK_QUEUE_DEPTH",
        Role::ReadByCk,
        "`sampled`: least-queue steers by queue depths ck samples instead of exact ones read by \
         the BPF program (`exact` or unset: exact where the kernel allows it).",
    ),
    var(
        "CK_LEAST_CONN",
        Role::ReadByCk,
        "`sampled`: least-conn compares connection counts ck samples instead of the kernel's \
         (`kernel` or unset: the kernel's where it allows it).",
    ),
    var(
        "CK_CONN_COUNT",
        Role::ReadByCk,
        "`scan`: count workers' open connections with sock_diag instead of ck's kernel counter.",
    ),
    var(
        "CK_EXIT_WATCH",
        Role::ReadByCk,
        "`pidfd`: learn of worker exits from pidfds alone, without the exit tracepoint \
         (`tracepoint` or unset: both).",
    ),
    var(
        "CK_HANDOVER_FD",
        Role::Internal,
        "Set by `ck upgrade` for the new binary (the descriptor of the handed-over state); \
         removed from workers' environment.",
    ),
];

/// `environment.md`.
pub fn markdown() -> String {
    let mut out = format!(
        "{GENERATED}\n\n# Environment\n\nWorkers inherit ck's environment, with these variables \
         set or removed; ck itself reads the others. The `CK_QUEUE_DEPTH`, `CK_LEAST_CONN`, \
         `CK_CONN_COUNT`, `CK_EXIT_WATCH` and `CK_READY_DETECT` switches force a fallback that ck \
         otherwise picks only where the kernel lacks something (`ck status` shows which is in \
         use).\n\n| Variable | Role | Meaning |\n| --- | --- | --- |\n"
    );
    for v in VARIABLES {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            v.name,
            v.role.words(),
            cell(v.meaning)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::{collections::BTreeSet, path::Path};

    use super::*;

    /// Upper-case string literals (`"CK_RUN_DIR"`) on `line`.
    fn names(line: &str) -> Vec<String> {
        line.split('"')
            .skip(1)
            .step_by(2)
            .filter(|s| {
                s.len() > 2
                    && s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                    && s.chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            })
            .map(str::to_string)
            .collect()
    }

    /// Whether `line` passes a variable's name to the environment (or names one for that).
    fn about_the_environment(line: &str) -> bool {
        [
            "env::var",
            "var_os(",
            ".env(",
            "env_remove(",
            "try_from_env(",
            "set(\"",
            "ENV: &str",
        ]
        .iter()
        .any(|p| line.contains(p))
    }

    /// Every variable named in the non-test code of `dir`'s `.rs` files (not `tests.rs`, not
    /// `tests/`, nothing after `#[cfg(test)]`).
    fn scan(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && !path.ends_with("tests") {
                scan(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with("tests.rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                // The removal list of the worker environment spans lines.
                let mut in_list = false;
                for line in code.lines() {
                    in_list = (in_list || line.contains("for stale in [")) && !line.contains("] {");
                    if in_list || about_the_environment(line) {
                        found.extend(names(line));
                    }
                }
            }
        }
    }

    #[test]
    fn every_variable_in_the_code_is_in_the_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut found = BTreeSet::new();
        scan(&root.join("src"), &mut found);
        scan(&root.join("../ck-worker/src"), &mut found);
        // Test switches (`CK_TEST_*`, e.g. the idle check's CPU burn) are not ck's interface:
        // the reference leaves them out.
        found.retain(|name| !name.starts_with("CK_TEST_"));
        assert!(found.len() >= 15, "{found:?}");
        let listed: BTreeSet<&str> = VARIABLES.iter().map(|v| v.name).collect();
        let missing: Vec<&String> = found
            .iter()
            .filter(|n| !listed.contains(n.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "the code uses these environment variables, which are not in reference::environment::\
             VARIABLES (add each with its meaning): {missing:?}"
        );
        let unused: Vec<&&str> = listed.iter().filter(|n| !found.contains(**n)).collect();
        assert!(unused.is_empty(), "listed but not in the code: {unused:?}");
    }
}
