//! A program in a real terminal: a tmux server of the test's own (`tmux -S <socket>` in a
//! temporary directory, no user configuration) with one detached session of a given size, to read the screen
//! (`capture-pane`), press keys (`send-keys`) and see how the program left the terminal (the
//! alternate screen). The server is killed on drop, whatever the test did.

use std::process::{Command, Output};
use std::time::Duration;

use crate::sys::{self, TempDir};

/// The session's name inside its private server.
const SESSION: &str = "t";

/// A tmux server running one session; killed (and its socket removed) on drop.
#[derive(Debug)]
pub struct Tmux {
    /// Holds the server's socket.
    dir: TempDir,
}

impl Tmux {
    /// Starts `command` (a shell command line) in a new detached `width` x `height` session on
    /// a private server (`name` names its directory). The pane stays after the command exits (`remain-on-exit`), so
    /// its screen and terminal modes can be read.
    ///
    /// # Panics
    /// When tmux is missing (`cargo xtask test` installs it) or cannot start the session.
    pub fn start(name: &str, width: u16, height: u16, command: &str) -> Tmux {
        let tmux = Tmux {
            dir: TempDir::new(&format!("tmux-{name}")),
        };
        let (w, h) = (width.to_string(), height.to_string());
        tmux.run_ok(&[
            "new-session",
            "-d",
            "-s",
            SESSION,
            "-x",
            &w,
            "-y",
            &h,
            command,
            ";",
            "set-option",
            "-t",
            SESSION,
            "remain-on-exit",
            "on",
        ]);
        tmux
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new("tmux");
        cmd.args(["-f", "/dev/null", "-S"])
            .arg(self.dir.path().join("socket"));
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        sys::output_within(self.command().args(args), Duration::from_secs(10))
            .unwrap_or_else(|| panic!("`tmux {}` did not exit within 10 s", args.join(" ")))
    }

    fn run_ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "`tmux {}` failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows now, one line per row.
    pub fn screen(&self) -> String {
        self.run_ok(&["capture-pane", "-p", "-t", SESSION])
    }

    /// Presses `keys` (tmux key names: `j`, `Escape`, `C-c`), in order.
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", SESSION];
        args.extend_from_slice(keys);
        self.run_ok(&args);
    }

    /// A pane format variable (`pane_dead`, `pane_pid`, `alternate_on`).
    pub fn pane(&self, variable: &str) -> String {
        let format = format!("#{{{variable}}}");
        self.run_ok(&["display-message", "-p", "-t", SESSION, &format])
            .trim()
            .to_string()
    }

    /// Polls the screen until `done` holds for it and returns that screen.
    ///
    /// # Panics
    /// After `timeout`, with the last screen.
    pub fn wait_screen(
        &self,
        what: &str,
        timeout: Duration,
        mut done: impl FnMut(&str) -> bool,
    ) -> String {
        let mut last = String::new();
        let seen = sys::poll_until(timeout, Duration::from_millis(50), || {
            last = self.screen();
            done(&last)
        });
        assert!(
            seen,
            "timed out after {timeout:?} waiting for {what}; screen:\n{last}"
        );
        last
    }

    /// Waits until the pane's program exited (its terminal closed). tmux 3.3 does not always
    /// record the exit status (`pane_dead_status` stays empty about once in 30 exits), so a
    /// test that needs it has the command write it to a file.
    ///
    /// # Panics
    /// After `timeout`, with the screen.
    pub fn wait_exit(&self, timeout: Duration) {
        let dead = sys::poll_until(timeout, Duration::from_millis(50), || {
            self.pane("pane_dead") == "1"
        });
        assert!(
            dead,
            "the program did not exit within {timeout:?}; screen:\n{}",
            self.screen()
        );
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
