//! The `ck` command line: `ck run` starts a supervisor; `status`, `drain`, `undrain`, `top`,
//! `stop`, ... talk to a running one over its control socket, `maps` reads its pinned maps;
//! `demo-worker` is the built-in worker.
use std::{ffi::OsString, process::ExitCode, time::Duration};

use anyhow::bail;
use ck::{
    control::{Request, Response, client, instances},
    settings::health::ProbeKind,
    settings::{
        layers,
        run_args::RunArgs,
        usage::{self, EXIT_USAGE, UsageError},
    },
};
use ck_worker::units::duration::parse_duration;
use clap::{Args, CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

mod cli;

use cli::control::{answer, probe_slot, simple};

/// What `ck --help` (and `ck(1)`) says after the commands: the exit status.
const EXIT_STATUS: &str = "\
Exit status:
  0  done
  1  the command failed; the message says why and what to do
  2  the command line is wrong (an unknown option or command, a bad or missing value, an
     instance not named where several run): nothing was done";

#[derive(Parser)]
#[command(
    name = "ck",
    version = ck::VERSION,
    about = "Supervisor for SO_REUSEPORT worker fleets, steered by eBPF",
    after_long_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a fleet of workers behind one SO_REUSEPORT group per listen address.
    Run(Box<RunArgs>),
    /// Show the fleet of a running instance.
    Status {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Wait until the instance answers (it may not have started yet) and every slot is
        /// ready, then print the status; exits non-zero after --timeout, naming the slots not
        /// ready.
        ///
        /// Without --name or --pid it waits for the only instance, and refuses when several run
        /// or start; right after `ck run ... &`, give --pid $!.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (500ms, 30s, 2m; a bare number is seconds).
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s", requires = "wait")]
        timeout: Duration,
    },
    /// Take a slot (--all: the whole host) out of the active set.
    ///
    /// Its socket stays open and its worker keeps serving what it already has.
    /// With --all: the whole host out of rotation (/readyz 503, reason drained), every socket
    /// open, and connections that still arrive (the balancer has not noticed yet) served.
    Drain {
        /// The slot (see `ck status`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        slot: Option<u32>,
        /// Every slot: take the whole host out of rotation.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Put a drained slot back into the active set.
    Undrain {
        /// The slot.
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        slot: Option<u32>,
        /// Every slot: put the whole host back into rotation.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Re-execute ck in place, keeping its workers, sockets and steering.
    ///
    /// Same pid; from the binary it was started from (as that file is now) or from --binary;
    /// exits non-zero, with the old ck still running, if the new binary cannot take over.
    /// SIGUSR2 does the same.
    Upgrade {
        /// The new ck binary.
        #[arg(long, value_name = "PATH")]
        binary: Option<std::path::PathBuf>,
        /// How long to wait for the new image to report back (a bare number is seconds).
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "30s")]
        timeout: Duration,
        #[command(flatten)]
        target: Target,
    },
    /// Prints what this binary needs to take over a running ck (handover format, map layout):
    /// asked by `ck upgrade` of the new binary before it is exec'd. With the running ck's
    /// command line after `--`, first checks that this binary accepts it (options, --config).
    #[command(hide = true)]
    UpgradeCheck {
        /// The running ck's arguments (`run --name ...`).
        #[arg(last = true)]
        args: Vec<OsString>,
    },
    /// With --survive-supervisor: stops the workers of instance NAME if its ck (SUPERVISOR)
    /// dies and no new ck takes them back within TIMEOUT. Started by `ck run`.
    #[command(hide = true)]
    OrphanGuard {
        /// The instance.
        #[arg(long)]
        name: String,
        /// How long the workers wait for a new ck.
        #[arg(long, value_parser = parse_duration)]
        timeout: Duration,
        /// How long a worker may drain after the stop signal.
        #[arg(long, value_parser = parse_duration)]
        drain_timeout: Duration,
        /// The signal that stops a worker gracefully (`ck run --stop-signal`).
        #[arg(long, default_value_t = ck::settings::defaults::STOP_SIGNAL)]
        stop_signal: ck::settings::stop_signal::StopSignal,
        /// The pid of the ck to watch.
        #[arg(long)]
        supervisor: u32,
    },
    /// Rolling restart: replace every worker without dropping a connection.
    ///
    /// One batch (--reload-batch) at a time; a slot whose worker crashed (backing off, or its
    /// breaker open) gets a fresh worker at once. Exits non-zero if the roll is aborted or such
    /// a fresh worker still fails.
    Reload {
        #[command(flatten)]
        canary: cli::reload::CanaryArgs,
        #[command(flatten)]
        target: Target,
    },
    /// Put back the workers the last reload replaced (with `ck run --keep-previous`).
    ///
    /// The kept release goes back into the active set in one map write; the workers serving
    /// now leave gracefully. Mid-reload: what the roll took out so far, and the roll ends.
    /// Exits non-zero, saying why and what to run instead, when no release is kept.
    Rollback {
        #[command(flatten)]
        target: Target,
    },
    /// Change the number of workers (removed workers are drained, not killed).
    Scale {
        /// The new worker count.
        workers: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Probe one worker through its own listening socket.
    ///
    /// Whatever its state; prints the answer and the worker's pid.
    Probe {
        /// The slot.
        slot: u32,
        /// What to probe: `tcp`, `http` or `http:/PATH` (default: the instance's --probe, else
        /// `http:/`).
        #[arg(long)]
        kind: Option<ProbeKind>,
        /// Time the probe may take (a bare number is seconds).
        #[arg(long, value_name = "DUR", value_parser = parse_duration, default_value = "2s")]
        timeout: Duration,
        #[command(flatten)]
        target: Target,
    },
    /// Live view of the slots, refreshed every second.
    ///
    /// Pid, state, new connections per second, accept queue, memory, CPU, restarts; keys
    /// drain (d), undrain (u), reload (r), quit (q).
    Top {
        #[command(flatten)]
        target: Target,
        /// Print one frame as text and exit (rates over one second between two reports).
        #[arg(long)]
        once: bool,
    },
    /// Every BPF map of every group, decoded.
    ///
    /// Slot states as words, per-CPU counters summed.
    Maps {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Drain and stop every worker, then exit.
    ///
    /// With --metrics, ck first answers /readyz with 503 and waits until no new connection
    /// came for --quiet-period (at most --quiet-max).
    Stop {
        /// Skip the quiet wait (or the rest of it): drain at once.
        #[arg(long)]
        now: bool,
        /// Return only once the fleet is down: ck and every worker exited, the control socket
        /// gone; exits non-zero after --timeout, naming what is still up.
        ///
        /// With --pid, the instance may still be starting: its control socket is waited for
        /// first (at most --timeout, else 30s).
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (default: the rest of the quiet wait, if one began,
        /// plus the instance's --drain-timeout, plus 10s; a bare number is seconds).
        #[arg(long, value_name = "DUR", value_parser = parse_duration, requires = "wait")]
        timeout: Option<Duration>,
        #[command(flatten)]
        target: Target,
    },
    /// The built-in demo worker (HTTP/1.1): run by `ck run` when no APP is given.
    DemoWorker(ck_worker::demo::DemoOptions),
    /// Write ck's man pages into DIR.
    ///
    /// ck(1), one page per command (ck-run(1), ...) and ck.toml(5); prints their paths.
    Man {
        /// The directory (created if missing).
        dir: std::path::PathBuf,
    },
    /// Print ck's completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Writes the generated reference (Markdown and JSON Schemas: commands, config keys,
    /// metrics, status and maps JSON, environment) into DIR; `cargo xtask docs` runs it.
    #[command(hide = true)]
    Reference {
        /// The directory (created if missing).
        dir: std::path::PathBuf,
    },
    /// Internal: sets LISTEN_PID and execs the worker's program.
    #[command(hide = true)]
    ExecWorker {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<OsString>,
    },
}

/// The instance a control command is about.
#[derive(Args)]
struct Target {
    /// Instance name (default: the only instance running).
    #[arg(long, conflicts_with = "pid")]
    name: Option<String>,
    /// The instance whose ck has this pid (`ck run ... &` then --pid $!).
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
}

impl Target {
    /// Which instance the options name.
    fn which(self) -> instances::Which {
        instances::Which::new(self.name, self.pid)
    }
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let parsed = Cli::command()
        .try_get_matches_from(&argv)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        // Help and version, and the help `ck` alone prints, are clap's to print.
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            let message = usage::message(&e, &Cli::command(), &argv[1..]);
            eprintln!("ck: error: {message}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match run(cli.command, &matches) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ck: error: {e:#}");
            match usage::is_usage(&e) {
                true => ExitCode::from(EXIT_USAGE),
                false => ExitCode::FAILURE,
            }
        }
    }
}

fn run(command: Command, matches: &clap::ArgMatches) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => {
            let run_matches = matches.subcommand_matches("run").expect("`run` was parsed");
            // Options or a config file ck refuses: nothing was started.
            let (cfg, command_line) =
                layers::configure(*args, run_matches).map_err(|e| UsageError::from_error(&e))?;
            let format = cfg.log_format;
            cli::logging::init(format);
            let code = match ck::supervisor::run_with(cfg, command_line) {
                // A JSON log stays JSON to its last line.
                Err(e) if format == ck::settings::run_config::LogFormat::Json => {
                    tracing::error!(error = format!("{e:#}"), "ck run failed");
                    Ok(ExitCode::FAILURE)
                }
                result => result.map(|()| ExitCode::SUCCESS),
            };
            cli::logging::flush();
            code
        }
        Command::Status {
            target,
            json,
            wait,
            timeout,
        } => {
            let response = match wait {
                true => Response::Status(cli::wait_ready::wait_ready(target.which(), timeout)?),
                false => client::request(&instances::resolve(&target.which())?, &Request::Status)?,
            };
            match response {
                Response::Status(report) if json => {
                    cli::stdout::print_line(&serde_json::to_string_pretty(&report)?)?
                }
                Response::Status(report) => cli::stdout::print(&cli::status_text::render(&report))?,
                other => return answer(other),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Drain { slot, all, target } => simple(
            &target.which(),
            match slot {
                Some(slot) if !all => Request::Drain { slot },
                _ => Request::DrainAll,
            },
        ),
        Command::Undrain { slot, all, target } => simple(
            &target.which(),
            match slot {
                Some(slot) if !all => Request::Undrain { slot },
                _ => Request::UndrainAll,
            },
        ),
        Command::Stop {
            now,
            wait,
            timeout,
            target,
        } => cli::stop::stop(target.which(), now, wait, timeout),
        Command::Top { target, once } => cli::top::run(&target.which(), once),
        Command::Maps { target, json } => cli::maps::run(&target.which(), json),
        Command::Probe {
            slot,
            kind,
            timeout,
            target,
        } => probe_slot(&target.which(), slot, kind, timeout),
        Command::Reload { canary, target } => simple(
            &target.which(),
            Request::Reload {
                canary: canary.ask(),
            },
        ),
        Command::Rollback { target } => simple(&target.which(), Request::Rollback),
        Command::Upgrade {
            binary,
            timeout,
            target,
        } => cli::control::upgrade(&target.which(), binary, timeout),
        Command::OrphanGuard {
            name,
            timeout,
            drain_timeout,
            stop_signal,
            supervisor,
        } => {
            ck::supervisor::continuity::orphan_guard::run(
                ck::supervisor::continuity::orphan_guard::GuardSpec {
                    name,
                    timeout,
                    drain_timeout,
                    stop_signal: stop_signal.signal(),
                    supervisor,
                },
            )?;
            Ok(ExitCode::SUCCESS)
        }
        Command::UpgradeCheck { args } => {
            if !args.is_empty() {
                cli::upgrade_check::check_run_args(args)?;
            }
            println!(
                "{}",
                serde_json::to_string(&ck::supervisor::Compat::this())?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Scale { workers, target } => simple(&target.which(), Request::Scale { workers }),
        Command::DemoWorker(opts) => {
            ck_worker::demo::run(opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Man { dir } => {
            cli::docs::man_pages(Cli::command(), &dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Reference { dir } => {
            cli::docs::reference(Cli::command(), &dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Completions { shell } => {
            cli::docs::completions(Cli::command(), shell)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::ExecWorker { argv } => {
            let mut argv = argv.into_iter();
            let Some(program) = argv.next() else {
                bail!("exec-worker needs a program");
            };
            let err = ck::os::spawn::exec_worker(program, argv.collect());
            eprintln!("ck: worker: {err}");
            Ok(ExitCode::from(127))
        }
    }
}
