//! SVG plots of the bench results (plotters, SVG backend only): latency over time around kills
//! and reloads ([`timeline`]) and grouped bar charts for shares, rates and costs ([`bars`]).
//! Each scenario writes its plots under the results directory (see [`super::Bench::plot_path`])
//! and lists them under its table.

pub mod bars;
pub mod timeline;

use std::path::Path;

use anyhow::anyhow;
use plotters::prelude::*;

/// Width of every plot, in pixels.
const WIDTH: u32 = 1000;
/// Font of titles and labels (the SVG viewer picks the actual face).
const FONT: &str = "sans-serif";

/// Colours of the series (and bars) in order: distinguishable, and readable on white.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// The colour of series (or bar) number `i`.
fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Turns a plotters error into one naming the file being drawn.
fn drawing(path: &Path) -> impl Fn(DrawingAreaErrorKind<std::io::Error>) -> anyhow::Error + '_ {
    move |e| anyhow!("drawing {}: {e}", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colours_repeat_after_the_palette() {
        assert_eq!(colour(0), colour(PALETTE.len()));
        assert_ne!(colour(0), colour(1));
    }
}
