//! `/metrics` is complete from the first scrape: a Prometheus server that scrapes as soon as
//! `/healthz` answers 200 (as a pod's does) finds exactly the metric families a later scrape of
//! the same fleet has, and the program's per-slot counters of every slot (at 0), not missing
//! until steering is in. (The check is `ck_tests::promises::scrape`'s, shared with the promise
//! suite.)

#[test]
fn the_first_scrape_has_every_family_of_a_later_one() {
    ck_tests::promises::scrape::the_first_scrape_is_complete();
}
