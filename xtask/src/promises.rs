//! `cargo xtask promises`: README's headline promises (`ck_tests::promises::promises`, each
//! beside the README section that makes it) checked on a given ck binary, the release build:
//! each check on a thread of its own, one line per promise as it ends, a table at the end, and
//! an error if any promise is broken. `cargo xtask test` runs them after the tests.
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use ck_tests::promises::{Promise, promises};

/// How one promise went.
struct Outcome {
    promise: Promise,
    took: Duration,
    /// The panic message, when it is broken.
    broken: Option<String>,
}

/// Checks every promise (or those whose name contains `only`) on the ck at `bin`.
pub fn run(bin: &Path, only: Option<&str>) -> Result<()> {
    // SAFETY: xtask runs on one thread until the checks start below; nothing reads the
    // environment concurrently. The checks find ck (and its examples) through `CK_BIN`.
    unsafe { std::env::set_var("CK_BIN", bin) };
    let all = promises();
    let names: Vec<String> = all.iter().map(|p| p.name.clone()).collect();
    let chosen: Vec<Promise> = all
        .into_iter()
        .filter(|p| only.is_none_or(|o| p.name.contains(o)))
        .collect();
    if chosen.is_empty() {
        bail!(
            "no promise is named like {:?}: choose among {}",
            only.unwrap_or_default(),
            names.join(", ")
        );
    }
    println!(
        "promises: checking {} on {} ({})",
        chosen.len(),
        bin.display(),
        crate::bench::machine_line()
    );
    let outcomes: Vec<Outcome> = chosen.into_iter().map(check).collect();
    print_table(&outcomes);
    let broken = outcomes.iter().filter(|o| o.broken.is_some()).count();
    if broken > 0 {
        bail!("{broken} of {} promises broken (see above)", outcomes.len());
    }
    Ok(())
}

/// Runs one promise's check on a thread of its own (a broken promise panics there).
fn check(promise: Promise) -> Outcome {
    println!("promise {}: {}", promise.name, promise.claim);
    let started = Instant::now();
    let on_thread = promise.clone();
    let joined = std::thread::Builder::new()
        .name(promise.name.clone())
        .spawn(move || on_thread.check())
        .map(|handle| handle.join());
    let broken = match joined {
        Ok(Ok(())) => None,
        Ok(Err(panic)) => Some(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "the check panicked".into()),
        ),
        Err(e) => Some(format!("could not start its thread: {e}")),
    };
    let took = started.elapsed();
    let verdict = if broken.is_some() { "BROKEN" } else { "kept" };
    println!("promise {}: {verdict} ({took:.1?})", promise.name);
    Outcome {
        promise,
        took,
        broken,
    }
}

/// One row per promise: its name, README section, verdict and time; then each broken one's
/// first line of why.
fn print_table(outcomes: &[Outcome]) {
    println!();
    println!("| promise | README section | verdict | time |");
    println!("| --- | --- | --- | --- |");
    for o in outcomes {
        let verdict = if o.broken.is_some() { "BROKEN" } else { "kept" };
        println!(
            "| {} | {} | {verdict} | {:.1} s |",
            o.promise.name,
            o.promise.readme,
            o.took.as_secs_f64()
        );
    }
    for o in outcomes {
        if let Some(why) = &o.broken {
            let first = why.lines().next().unwrap_or_default();
            println!("broken: {}: {first}", o.promise.name);
        }
    }
}
