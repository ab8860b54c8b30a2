//! Latency over time: the p50 and p99 of the answers completed in each time bucket (100 ms in
//! the scenarios), one pair of lines per load, with the instants of kills or reloads marked as
//! vertical lines and failed requests as crosses along the top. One panel per run (ck, the
//! baseline, node:cluster, ...), stacked, on the same time and latency axes.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use ck_tests::load::{FailureKind, LoadReport, Sample};
use plotters::prelude::*;

use super::{FONT, WIDTH, colour, drawing};

/// Height of one panel, in pixels.
const PANEL_HEIGHT: u32 = 300;
/// Colour of the event lines (kills, reloads).
const EVENT: RGBColor = RGBColor(214, 39, 40);

/// One load's answers and failures.
pub struct Series<'a> {
    /// Legend text, e.g. `new-conn`.
    pub label: String,
    /// Its answers, in time order.
    pub samples: &'a [Sample],
    /// Its failures, with their time since the load's start.
    pub failures: &'a [(Duration, FailureKind)],
}

impl<'a> Series<'a> {
    /// The answers and failures of `report`, labelled `label`.
    pub fn of(label: impl Into<String>, report: &'a LoadReport) -> Series<'a> {
        Series {
            label: label.into(),
            samples: &report.samples,
            failures: &report.failures,
        }
    }
}

/// One run: its loads and the instants of its events, on the loads' clock.
pub struct Panel<'a> {
    /// Title above the panel, e.g. `ck`.
    pub title: String,
    /// The loads of that run (they started together).
    pub series: Vec<Series<'a>>,
    /// When the kills (or reloads) happened, since the loads' start.
    pub events: Vec<Duration>,
}

/// A latency-over-time figure.
pub struct Timeline<'a> {
    /// Title of the figure.
    pub title: String,
    /// What an event is, for the legend (`SIGKILL`, `ck reload`).
    pub event: &'a str,
    /// Width of a time bucket.
    pub bucket: Duration,
    /// One panel per run.
    pub panels: Vec<Panel<'a>>,
}

/// The latency of the answers of one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// The bucket's middle, in seconds since the load's start.
    pub mid_s: f64,
    /// Median latency, in ms.
    pub p50_ms: f64,
    /// 99th percentile, in ms.
    pub p99_ms: f64,
}

/// p50 and p99 of the answers in each `bucket`-wide window of time, for the windows that have
/// answers (a window without any has no point: the lines skip it). `samples` are in time order.
pub fn buckets(samples: &[Sample], bucket: Duration) -> Vec<Bucket> {
    let width = u64::try_from(bucket.as_micros()).unwrap_or(u64::MAX).max(1);
    let index = |s: &Sample| u64::from(s.at_us) / width;
    samples
        .chunk_by(|a, b| index(a) == index(b))
        .map(|chunk| {
            let mut latencies: Vec<u32> = chunk.iter().map(|s| s.latency_us).collect();
            latencies.sort_unstable();
            // Nearest rank: the smallest value with at least q of the answers at or below it.
            let at = |q: f64| {
                let rank = ((q * latencies.len() as f64).ceil() as usize).max(1);
                f64::from(latencies[rank - 1]) / 1000.0
            };
            Bucket {
                mid_s: (index(&chunk[0]) as f64 + 0.5) * width as f64 / 1e6,
                p50_ms: at(0.5),
                p99_ms: at(0.99),
            }
        })
        .collect()
}

/// Draws `t` into the SVG file `path`.
pub fn draw(path: &Path, t: &Timeline) -> Result<()> {
    let err = drawing(path);
    let per_panel: Vec<Vec<Vec<Bucket>>> = t
        .panels
        .iter()
        .map(|p| {
            p.series
                .iter()
                .map(|s| buckets(s.samples, t.bucket))
                .collect()
        })
        .collect();
    let (x_end, y_min, y_max) = extent(t, &per_panel);

    let height = 40 + PANEL_HEIGHT * t.panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let root = root.titled(&t.title, (FONT, 18)).map_err(&err)?;
    let areas = root.split_evenly((t.panels.len().max(1), 1));
    for ((area, panel), buckets) in areas.iter().zip(&t.panels).zip(&per_panel) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, (FONT, 15))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(56)
            .build_cartesian_2d(0f64..x_end, (y_min..y_max).log_scale())
            .map_err(&err)?;
        chart
            .configure_mesh()
            .x_desc("seconds since the load started")
            .y_desc("latency (ms)")
            .light_line_style(WHITE.mix(0.0))
            .label_style((FONT, 12))
            .draw()
            .map_err(&err)?;
        let event_style = EVENT.mix(0.45).stroke_width(1);
        chart
            .draw_series(panel.events.iter().map(|at| {
                let x = at.as_secs_f64();
                PathElement::new(vec![(x, y_min), (x, y_max)], event_style)
            }))
            .map_err(&err)?
            .label(t.event)
            .legend(move |(x, y)| PathElement::new(vec![(x, y - 6), (x, y + 6)], event_style));
        // Failures along the top of the panel: their number per moment, not their latency.
        let top = y_max / 1.6;
        for (i, (series, points)) in panel.series.iter().zip(buckets).enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|b| (b.mid_s, b.p99_ms)),
                    c.stroke_width(2),
                ))
                .map_err(&err)?
                .label(format!("{} p99", series.label))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(2))
                });
            let light = c.mix(0.45);
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|b| (b.mid_s, b.p50_ms)),
                    light.stroke_width(1),
                ))
                .map_err(&err)?
                .label(format!("{} p50", series.label))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], light));
            if !series.failures.is_empty() {
                chart
                    .draw_series(
                        series
                            .failures
                            .iter()
                            .map(|(at, _)| Cross::new((at.as_secs_f64(), top), 4, c)),
                    )
                    .map_err(&err)?
                    .label(format!(
                        "{} failed ({})",
                        series.label,
                        series.failures.len()
                    ))
                    .legend(move |(x, y)| Cross::new((x + 8, y), 4, c));
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font((FONT, 11))
            .draw()
            .map_err(&err)?;
    }
    root.present().map_err(&err)?;
    Ok(())
}

/// The axes' ranges shared by every panel: the time until the last answer, failure or event
/// (a little more, at least 1 s), and the latencies (ms) of every bucket, with room above for
/// the failure crosses and the legend.
fn extent(t: &Timeline, per_panel: &[Vec<Vec<Bucket>>]) -> (f64, f64, f64) {
    let mut x_end: f64 = 1.0;
    for panel in &t.panels {
        for series in &panel.series {
            let last_answer = series.samples.last().map_or(0.0, |s| s.at().as_secs_f64());
            let last_failure = series.failures.last().map_or(0.0, |f| f.0.as_secs_f64());
            x_end = x_end.max(last_answer).max(last_failure);
        }
        for at in &panel.events {
            x_end = x_end.max(at.as_secs_f64());
        }
    }
    let all = per_panel.iter().flatten().flatten();
    let low = all.clone().map(|b| b.p50_ms).fold(f64::INFINITY, f64::min);
    let high = all.map(|b| b.p99_ms).fold(0.0, f64::max);
    let y_min = if low.is_finite() {
        (low / 2.0).max(0.001)
    } else {
        0.01
    };
    let y_max = (high * 8.0).max(y_min * 100.0);
    (x_end * 1.02, y_min, y_max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u32, latency_us: u32) -> Sample {
        Sample {
            at_us: at_ms * 1000,
            latency_us,
        }
    }

    #[test]
    fn quantiles_per_bucket() {
        // 100 answers in the first 100 ms (1..=100 ms each), none in the second, 1 in the third.
        let mut samples: Vec<Sample> = (1..=100).map(|i| sample(i - 1, i * 1000)).collect();
        samples.push(sample(250, 7000));
        let b = buckets(&samples, Duration::from_millis(100));
        assert_eq!(b.len(), 2, "{b:?}");
        assert_eq!((b[0].p50_ms, b[0].p99_ms), (50.0, 99.0));
        assert!((b[0].mid_s - 0.05).abs() < 1e-9);
        assert_eq!((b[1].p50_ms, b[1].p99_ms), (7.0, 7.0));
        assert!((b[1].mid_s - 0.25).abs() < 1e-9);
        assert!(buckets(&[], Duration::from_millis(100)).is_empty());
    }

    #[test]
    fn draws_a_valid_svg() {
        let dir = std::env::temp_dir().join(format!("ck-plot-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("timeline.svg");
        let samples: Vec<Sample> = (0..3000).map(|i| sample(i, 500 + i % 97 * 10)).collect();
        let failures = vec![(Duration::from_millis(1500), FailureKind::Reset)];
        let t = Timeline {
            title: "test".into(),
            event: "SIGKILL",
            bucket: Duration::from_millis(100),
            panels: vec![
                Panel {
                    title: "ck".into(),
                    series: vec![Series {
                        label: "new-conn".into(),
                        samples: &samples,
                        failures: &failures,
                    }],
                    events: vec![Duration::from_millis(1500)],
                },
                Panel {
                    title: "empty".into(),
                    series: Vec::new(),
                    events: Vec::new(),
                },
            ],
        };
        draw(&path, &t).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        for text in [
            "new-conn p99",
            "new-conn failed (1)",
            "SIGKILL",
            "<polyline",
        ] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
    }
}
