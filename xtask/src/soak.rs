//! `cargo xtask soak CHECK`: one check of the test harness run many times against the debug
//! `ck`, each run's count printed and the total; fails if any run counted a failure. The checks
//! live in `tests/src` (the suite runs each once); this only repeats them.
use anyhow::{Result, bail};
use ck_tests::udp_refusals::{self, Mode};

/// A check to soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Check {
    /// A UDP server that refuses new flows after its stop signal, through rolls and scaling,
    /// in `flow` and `quic` mode (`ck_tests::udp_refusals`): refused flows.
    Udp,
}

/// Runs `check` `runs` times, printing one line per run and the total.
pub fn run(check: Check, runs: u32) -> Result<()> {
    match check {
        Check::Udp => {
            let mut total = 0;
            for run in 1..=runs {
                let mut refused = 0;
                for mode in [Mode::Flow, Mode::Quic] {
                    let counted = udp_refusals::check(mode)?;
                    println!("soak udp: run {run} {}: {}", mode.name(), counted.summary());
                    // Both counts see the same refusals; either one counting more fails.
                    refused += counted.refused.max(counted.refused_by_servers);
                }
                println!("soak udp: run {run}: {refused} refused");
                total += refused;
            }
            println!("soak udp: {runs} runs, {total} refused");
            if total > 0 {
                bail!("{total} flows refused in {runs} runs: see the lines above");
            }
            Ok(())
        }
    }
}
