//! `cargo xtask fleet`: ck beyond one host. Three ck hosts in network namespaces behind each
//! front (HAProxy `mode tcp`, HAProxy `mode http`, a Kubernetes Service's nftables DNAT),
//! with operators' timings (HAProxy `inter 2s fall 3 rise 2`, Kubernetes' probe defaults and a
//! 1.5 s endpoint propagation, ck's own quiet-wait defaults, a 10 s preStop sleep for the
//! comparison) go through every scenario of `ck_tests::fleet::scenario` under 300 new
//! connections per second from a client namespace; one table per front is printed and written
//! to `target/bench/fleet-hosts.md`. It runs the debug `ck` the integration tests run (the
//! timings measured are the balancers' and ck's waits, not its speed); about 5 minutes per
//! front.

use std::fs;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use anyhow::{Context as _, Result, anyhow};
use ck_tests::fleet::scenario::{self, ALL};
use ck_tests::fleet::{FrontKind, RigSpec, assert_gone};

/// Which fronts to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Front {
    /// HAProxy `mode tcp`.
    Tcp,
    /// HAProxy `mode http`.
    Http,
    /// A Kubernetes Service's data path (nftables DNAT, endpoint controller).
    Service,
    /// All three, one after the other.
    All,
}

impl Front {
    /// The rig fronts it stands for.
    fn kinds(self) -> Vec<FrontKind> {
        match self {
            Front::Tcp => vec![FrontKind::HaproxyTcp],
            Front::Http => vec![FrontKind::HaproxyHttp],
            Front::Service => vec![FrontKind::Service],
            Front::All => FrontKind::ALL.to_vec(),
        }
    }
}

/// Runs every scenario through each front of `front` and prints (and writes into `results`)
/// one table per front.
pub fn run(front: Front, results: &Path) -> Result<()> {
    let mut text = String::new();
    for kind in front.kinds() {
        let spec = RigSpec::operator(kind);
        let heading = heading(&spec);
        eprintln!("xtask: fleet: {heading}");
        let (rows, prefix) = catch_unwind(AssertUnwindSafe(|| {
            scenario::run_all(spec, &ALL, |row| {
                eprintln!(
                    "xtask: fleet: {}: {} requests, failed {}, stop {}",
                    row.scenario,
                    row.report.ok + row.report.failed(),
                    row.failed_text(),
                    row.stop_text()
                );
            })
        }))
        .map_err(|_| anyhow!("the {} fleet failed (its message is above)", kind.name()))?;
        catch_unwind(|| assert_gone(&prefix))
            .map_err(|_| anyhow!("the {} fleet left something behind", kind.name()))?;
        let table = format!("### {heading}\n\n{}", scenario::table(&rows));
        println!("{table}");
        text += &table;
        text += "\n";
    }
    fs::create_dir_all(results).with_context(|| format!("creating {}", results.display()))?;
    let file = results.join("fleet-hosts.md");
    fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
    println!("tables written to {}", file.display());
    Ok(())
}

/// The front and its timings, for a table's heading.
fn heading(spec: &RigSpec) -> String {
    let timings = match spec.front {
        FrontKind::Service => format!(
            "periodSeconds {}, failureThreshold {}, successThreshold {}, propagation {:.1} s",
            spec.probes.period.as_secs(),
            spec.probes.failure_threshold,
            spec.probes.success_threshold,
            spec.probes.propagation.as_secs_f64()
        ),
        _ => format!(
            "inter {}s fall {} rise {}",
            spec.checks.inter.as_secs(),
            spec.checks.fall,
            spec.checks.rise
        ),
    };
    format!(
        "{} ({timings}; {} new connections/s over {} connections)",
        spec.front.name(),
        spec.rate,
        spec.connections
    )
}
