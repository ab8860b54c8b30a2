//! README's promises, one test each (`ck_tests::promises::promises`, named as the promise):
//! `cargo xtask promises` runs them on the release build, one at a time, through nextest's
//! `promises` profile; `cargo xtask test` runs that after the other tests. The list is made
//! at run time from the promise table, so a promise added there is checked here.

use ck_tests::promises::promises;
use libtest_mimic::{Arguments, Failed, Trial};

fn main() {
    let args = Arguments::from_args();
    let trials = promises()
        .into_iter()
        .map(|promise| {
            Trial::test(promise.name.clone(), move || {
                std::panic::catch_unwind(|| promise.check()).map_err(|panic| {
                    let why = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "the check panicked".into());
                    Failed::from(why)
                })
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit();
}
