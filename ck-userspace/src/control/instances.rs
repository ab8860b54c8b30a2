//! Which instance a command is about: the one `--name` names, the one whose ck has the pid
//! `--pid` gives, or the only one there is. "The only one" counts the instances that are
//! starting too (a `ck run` with no control socket yet, seen in `/proc`), so a command asked
//! right after `ck run ... &` never answers for another instance that was already running.
use crate::{
    os::{ck_runs, instance},
    settings::usage::UsageError,
};

/// The instance a command is about, as its options say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Which {
    /// `--name NAME`.
    Named(String),
    /// `--pid PID`: the instance whose ck has this pid.
    Pid(u32),
    /// Neither: the only instance running or starting.
    Only,
}

impl Which {
    /// From `--name` and `--pid` (clap lets at most one through).
    pub fn new(name: Option<String>, pid: Option<u32>) -> Which {
        match (name, pid) {
            (Some(name), _) => Which::Named(name),
            (None, Some(pid)) => Which::Pid(pid),
            (None, None) => Which::Only,
        }
    }
}

/// A running instance: a control socket its ck answers on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Running {
    /// Its name.
    pub name: String,
    /// Its ck's pid.
    pub pid: u32,
}

/// What the run directory holds now: the instances that answer and the `ck run` processes
/// (with the same run directory) that have no control socket yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Census {
    /// The instances that answer, by name.
    pub running: Vec<Running>,
    /// The pids of `ck run` processes that are no running instance's ck: starting (or failing
    /// to).
    pub starting: Vec<u32>,
}

impl Census {
    /// Counts the instances of the run directory now.
    pub fn take() -> Census {
        let dir = instance::run_dir();
        let running: Vec<Running> = socket_names()
            .into_iter()
            .filter_map(|name| {
                let pid = ck_runs::listener_pid(&instance::control_path(&name))?;
                Some(Running { name, pid })
            })
            .collect();
        let starting = ck_runs::ck_run_pids(&dir)
            .into_iter()
            .filter(|pid| !running.iter().any(|r| r.pid == *pid))
            .collect();
        Census { running, starting }
    }

    /// The instances as a list for messages: `web (pid 812), api (pid 913), a ck run starting
    /// (pid 1010, no control socket yet)`; `none` when empty.
    pub fn list(&self) -> String {
        let mut items: Vec<String> = self
            .running
            .iter()
            .map(|r| format!("{} (pid {})", r.name, r.pid))
            .collect();
        items.extend(
            self.starting
                .iter()
                .map(|pid| format!("a ck run starting (pid {pid}, no control socket yet)")),
        );
        if items.is_empty() {
            "none".into()
        } else {
            items.join(", ")
        }
    }

    /// The only instance, if there is exactly one and none is starting; an error when there
    /// are several (a [`UsageError`]: the command needs `--name` or `--pid`); None when there is
    /// none yet, or one that is still starting.
    pub fn only(&self) -> anyhow::Result<Option<String>> {
        match (self.running.as_slice(), self.starting.len()) {
            ([], 0 | 1) => Ok(None),
            ([one], 0) => Ok(Some(one.name.clone())),
            _ => Err(UsageError(format!(
                "several ck instances: {}; choose one with --name NAME, or --pid PID (the pid of \
                 its ck: `ck run ... &` then --pid $!)",
                self.list()
            ))
            .into()),
        }
    }

    /// The name of the running instance whose ck has `pid`.
    pub fn named_by_pid(&self, pid: u32) -> Option<String> {
        self.running
            .iter()
            .find(|r| r.pid == pid)
            .map(|r| r.name.clone())
    }
}

/// The names of the control sockets in the run directory, sorted (none when the directory
/// does not exist); a socket may be left by a ck that was killed (see [`Census`]).
pub fn socket_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(instance::run_dir())
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let file = e.file_name().to_string_lossy().to_string();
                    file.strip_suffix(".sock").map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The instance `which` names, now (no waiting): its name, or an error that says what is
/// running and the fix.
pub fn resolve(which: &Which) -> anyhow::Result<String> {
    match which {
        Which::Named(name) => Ok(name.clone()),
        Which::Pid(pid) => {
            let census = Census::take();
            census
                .named_by_pid(*pid)
                .ok_or_else(|| anyhow::anyhow!(no_instance_with_pid(*pid, &census)))
        }
        Which::Only => {
            let census = Census::take();
            match (census.only()?, census.starting.first()) {
                (Some(name), _) => Ok(name),
                (None, Some(pid)) => anyhow::bail!(
                    "the only ck instance is still starting (pid {pid}) and has no control \
                     socket yet; wait for it with `ck status --wait --pid {pid}`"
                ),
                (None, None) => anyhow::bail!(
                    "no ck instance is running (no control socket in {}); start one with `ck \
                     run`, or set CK_RUN_DIR to the run directory of the one you mean",
                    run_dir_shown()
                ),
            }
        }
    }
}

/// `/run/ck`, or `$CK_RUN_DIR`.
fn run_dir_shown() -> String {
    instance::run_dir().display().to_string()
}

/// Why no instance has a ck of pid `pid`, from what `census` found and what `pid` is, and
/// the fix.
pub fn no_instance_with_pid(pid: u32, census: &Census) -> String {
    let (what, fix) = match ck_runs::command_of(pid) {
        None => (
            format!(
                "no process has pid {pid} (a ck run started as it has exited: its output says why)"
            ),
            "give the pid of a running ck, or --name NAME".to_string(),
        ),
        Some(_) if census.starting.contains(&pid) => (
            format!("ck (pid {pid}) is starting and has no control socket yet"),
            format!("wait for it with `ck status --wait --pid {pid}`"),
        ),
        Some(command) => (
            format!("pid {pid} is {command:?}, not the ck of an instance"),
            "give the pid of ck itself (when sudo or a shell started it, $! is theirs), or \
             --name NAME"
                .to_string(),
        ),
    };
    format!("{what}; ck instances here: {}; {fix}", census.list())
}
