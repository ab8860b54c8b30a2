//! The spares' decisions on literal fleets: how many boot (none while stopping or rolling, or
//! while a lost one's delay runs), and how a lost spare slows the next.
use std::time::{Duration, Instant};

use super::tests::{map, ready, run, shape, spare, view};
use super::*;
use crate::supervisor::lifecycle::{Input, State};

#[test]
fn spares_boot_up_to_their_count_unless_stopping_rolling_or_backing_off() {
    let lives = map(&[(0, ready(1)), (1, spare(State::Starting(run(2))))]);
    let now = Instant::now();
    let pacing = spares::Pacing::default();
    assert_eq!(
        spares::wanted(&view(&lives), &shape(1, 3), &pacing, now, false, false),
        2
    );
    assert_eq!(
        spares::wanted(&view(&lives), &shape(1, 3), &pacing, now, true, false),
        0
    );
    assert_eq!(
        spares::wanted(&view(&lives), &shape(1, 3), &pacing, now, false, true),
        0
    );
    let mut pacing = spares::Pacing::default();
    assert_eq!(pacing.failed(now), Duration::from_millis(100));
    assert_eq!(
        spares::wanted(&view(&lives), &shape(1, 3), &pacing, now, false, false),
        0
    );
    let later = now + Duration::from_millis(100);
    assert_eq!(
        spares::wanted(&view(&lives), &shape(1, 3), &pacing, later, false, false),
        2
    );
    assert_eq!(
        spares::retire_all(&view(&lives)),
        vec![(
            1,
            Input::Retire("spares are replaced by the rolling restart".into())
        )]
    );
}

#[test]
fn a_lost_spare_doubles_the_delay_up_to_ten_seconds_and_a_ready_one_resets_it() {
    let now = Instant::now();
    let mut pacing = spares::Pacing::default();
    let delays: Vec<u64> = (0..10)
        .map(|_| pacing.failed(now).as_millis() as u64)
        .collect();
    assert_eq!(
        delays,
        vec![100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000]
    );
    pacing.ready();
    assert_eq!(pacing, spares::Pacing::default());
}
