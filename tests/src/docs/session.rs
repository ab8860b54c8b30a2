//! One page's shell: a `bash` (`set -euo pipefail`) in a session of its own, in a fresh
//! directory holding a copy of the repository's `examples/`, with the built `ck` first on
//! `PATH`, `CK_RUN_DIR` and `CK_PIN_DIR` of its own and `NODE_PATH` at the repository's
//! `packages/`. Each step is written to a script and sourced (`. step.sh`) with its output in a
//! file of its own, so variables, `cd` and background jobs (`ck run ... &`) carry over to the
//! page's later steps; a marker line on the shell's stdout says when a step is done.

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::Checkout;
use super::cleanup;
use super::ports::PortMap;
use crate::sys::TempDir;

/// What the shell said after a step was written to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The step ran to its end with this exit status (always 0 for a step whose failure ends
    /// the shell).
    Done(i32),
    /// The shell exited during the step (a failing command under `set -e`), with this status.
    ShellExited(Option<i32>),
    /// The page's time ran out during the step.
    TimedOut,
}

/// The marker the shell prints after each step: `MARKER N STATUS`.
const MARKER: &str = "__ck_docs_step_done__";

/// A page's running shell. [`Session::finish`] ends it and says what it left behind; dropping
/// it unfinished ends it too, silently.
#[derive(Debug)]
pub struct Session {
    dir: TempDir,
    run_dir: PathBuf,
    pin_dir: PathBuf,
    ports: PortMap,
    env: Vec<(String, OsString)>,
    shell: Option<Child>,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    deadline: Instant,
    steps: usize,
}

impl Session {
    /// Starts the shell of a page labelled `label` (used in the directory names), which must
    /// be done within `timeout`.
    ///
    /// # Panics
    /// When the directories cannot be made or bash cannot be started.
    pub fn start(label: &str, timeout: Duration) -> Session {
        Session::start_in(&Checkout::this(), label, timeout)
    }

    /// Like [`Session::start`], from `checkout`.
    ///
    /// # Panics
    /// As [`Session::start`].
    pub fn start_in(checkout: &Checkout, label: &str, timeout: Duration) -> Session {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let dir = TempDir::new(&format!("docs-{label}"));
        copy_dir(
            &checkout.root.join("examples"),
            &dir.path().join("examples"),
        );
        let steps_dir = dir.path().join(".ck-docs");
        let run_dir = dir.path().join(".ck-docs/run");
        fs::create_dir_all(&run_dir).expect("creating the page's run dir");
        fs::create_dir_all(&steps_dir).expect("creating the page's step dir");
        // bpffs refuses dots in names; the pid and a counter keep it unique.
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/ckdocs_{}_{n}", std::process::id()));
        let _ = fs::remove_dir_all(&pin_dir);
        fs::create_dir_all(&pin_dir)
            .unwrap_or_else(|e| panic!("creating {} (is bpffs mounted?): {e}", pin_dir.display()));
        let env = page_env(checkout, &run_dir, &pin_dir);
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-s"])
            .current_dir(dir.path())
            .env_remove("CK_LOG")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WEB_CONCURRENCY")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // SAFETY: setsid is async-signal-safe and touches no memory of the parent; the page's
        // processes share the shell's session, so the clean-up finds them.
        unsafe {
            cmd.pre_exec(|| {
                nix::unistd::setsid()
                    .map(drop)
                    .map_err(std::io::Error::from)
            });
        }
        let mut shell = cmd.spawn().expect("starting bash for the page");
        let mut stdin = shell.stdin.take().expect("piped stdin");
        let stdout = shell.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        stdin
            .write_all(b"set -euo pipefail\n")
            .expect("writing to the page's bash");
        Session {
            dir,
            run_dir,
            pin_dir,
            ports: PortMap::new(),
            env,
            shell: Some(shell),
            stdin: Some(stdin),
            lines,
            deadline: Instant::now() + timeout,
            steps: 0,
        }
    }

    /// The page's directory (its shell's working directory at the start).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The page's ports and the free ports standing in for them.
    pub fn ports(&mut self) -> &mut PortMap {
        &mut self.ports
    }

    /// A command of `program` with the page's environment (`PATH`, `CK_RUN_DIR`,
    /// `CK_PIN_DIR`...) in the page's directory: e.g. `ck status --json` for the instance the
    /// page started.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.dir.path())
            .env_remove("CK_LOG")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Writes `text` to `path` relative to the page's directory (as a `file=PATH` block).
    ///
    /// # Errors
    /// When `path` is absolute or leaves the directory, or writing fails.
    pub fn write_file(&self, path: &str, text: &str) -> Result<(), String> {
        let rel = Path::new(path);
        if rel.is_absolute() || rel.components().any(|c| c.as_os_str() == "..") {
            return Err(format!(
                "`file={path}` must name a path inside the page's directory (relative, no `..`)"
            ));
        }
        let full = self.dir.path().join(rel);
        if let Some(parent) = full.parent() {
            fs::create_dir_all(parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        fs::write(&full, text).map_err(|e| format!("writing {}: {e}", full.display()))
    }

    /// Runs `script` in the shell and returns how it ended and what it printed (stdout and
    /// stderr together). When `fatal`, a failing command ends the shell (`set -e`), as a
    /// shell block; else the exit status is returned, as a console command's.
    pub fn run(&mut self, script: &str, fatal: bool) -> (Outcome, String) {
        self.steps += 1;
        let n = self.steps;
        let steps_dir = self.dir.path().join(".ck-docs");
        let (file, out) = (steps_dir.join(format!("step-{n}.sh")), self.output_path(n));
        fs::write(&file, script).expect("writing the step's script");
        let (file, out) = (file.display(), out.display());
        let line = if fatal {
            format!(". '{file}' </dev/null >'{out}' 2>&1\necho '{MARKER} {n} 0'\n")
        } else {
            format!(
                "__ck_docs_rc=0; . '{file}' </dev/null >'{out}' 2>&1 || __ck_docs_rc=$?\n\
                 echo \"{MARKER} {n} $__ck_docs_rc\"\n"
            )
        };
        let outcome = match self.stdin.as_mut().map(|s| s.write_all(line.as_bytes())) {
            Some(Ok(())) => self.wait_marker(n),
            _ => Outcome::ShellExited(self.shell_status()),
        };
        (outcome, self.output(n))
    }

    /// Waits for step `n`'s marker, the shell's exit or the page's deadline.
    fn wait_marker(&mut self, n: usize) -> Outcome {
        let prefix = format!("{MARKER} {n} ");
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(status) = line.strip_prefix(&prefix) {
                        return Outcome::Done(status.trim().parse().unwrap_or(-1));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return Outcome::TimedOut,
                Err(RecvTimeoutError::Disconnected) => {
                    return Outcome::ShellExited(self.shell_status());
                }
            }
        }
    }

    /// The shell's exit status once it has exited (waits up to 5 s).
    fn shell_status(&mut self) -> Option<i32> {
        let shell = self.shell.as_mut()?;
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match shell.try_wait() {
                Ok(Some(status)) => return status.code(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return None,
            }
        }
    }

    /// Where step `n`'s output goes.
    fn output_path(&self, n: usize) -> PathBuf {
        self.dir.path().join(format!(".ck-docs/step-{n}.out"))
    }

    /// What step `n` has printed so far (its background jobs keep writing there), with the
    /// page's ports shown as the page shows them.
    pub fn output(&self, n: usize) -> String {
        let raw = fs::read(self.output_path(n)).unwrap_or_default();
        self.ports.map_back(&String::from_utf8_lossy(&raw))
    }

    /// How many steps have been run.
    pub fn steps_run(&self) -> usize {
        self.steps
    }

    /// Ends the shell (end of input), then whatever the page left running, and removes its
    /// pins and cgroups. Returns what it left behind, as messages (empty when nothing).
    pub fn finish(mut self) -> Vec<String> {
        self.end()
    }

    /// [`Session::finish`]'s work; idempotent.
    fn end(&mut self) -> Vec<String> {
        let Some(mut shell) = self.shell.take() else {
            return Vec::new();
        };
        drop(self.stdin.take());
        let sid = shell.id();
        let exited =
            crate::sys::poll_until(Duration::from_secs(5), Duration::from_millis(20), || {
                shell.try_wait().ok().flatten().is_some()
            });
        if !exited {
            let _ = shell.kill();
        }
        let _ = shell.wait();
        let marker = format!("CK_RUN_DIR={}", self.run_dir.display());
        let mut problems = Vec::new();
        let left = cleanup::end_processes(sid, &marker);
        if !left.is_empty() {
            let left: Vec<String> = left.iter().map(|l| self.ports.map_back(l)).collect();
            problems.push(format!(
                "the page leaves {} running: end it with `ck stop --wait`",
                left.join(", ")
            ));
        }
        let pins = cleanup::remove_pins(&self.pin_dir);
        if !pins.is_empty() {
            problems.push(format!(
                "the page leaves BPF pins in its CK_PIN_DIR: {} (end every fleet with `ck \
                 stop --wait`)",
                pins.join(", ")
            ));
        }
        cleanup::remove_cgroups(&self.run_dir);
        problems
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.end();
    }
}

/// The page's environment: `PATH` (ck's directory, the tests' Python servers, then the
/// caller's), `CK_RUN_DIR`, `CK_PIN_DIR`, `NODE_PATH`, `NO_COLOR`.
fn page_env(checkout: &Checkout, run_dir: &Path, pin_dir: &Path) -> Vec<(String, OsString)> {
    let ck_dir = checkout.ck.parent().expect("ck's directory").to_path_buf();
    // The tests' Python servers are this repository's (a clone made for a test has none).
    let py_servers = super::repo_root().join("target/py-servers/bin");
    let mut path = vec![ck_dir, py_servers];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let path = std::env::join_paths(path).expect("PATH entries without ':'");
    vec![
        ("PATH".to_string(), path),
        ("CK_RUN_DIR".to_string(), run_dir.into()),
        ("CK_PIN_DIR".to_string(), pin_dir.into()),
        (
            "NODE_PATH".to_string(),
            checkout.root.join("packages").into(),
        ),
        ("NO_COLOR".to_string(), "1".into()),
    ]
}

/// Copies the directory `from` to `to`, recursively (symlinks followed).
///
/// # Panics
/// When a file cannot be copied.
pub fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("creating {}: {e}", to.display()));
    let Ok(entries) = fs::read_dir(from) else {
        return;
    };
    for entry in entries.flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            fs::copy(&src, &dst)
                .unwrap_or_else(|e| panic!("copying {} to {}: {e}", src.display(), dst.display()));
        }
    }
}
