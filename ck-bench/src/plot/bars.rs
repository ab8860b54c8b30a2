//! Grouped bar charts: one group per thing compared (a load, a worker count, a policy's round),
//! one bar per key in each group (ck / baseline / `--adopt`, a slot, a policy), each bar's value
//! written above it, optional dots for the single runs behind a bar (a median), and optional
//! horizontal reference lines (an even share, a goal).

use std::path::Path;

use anyhow::Result;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{FONT, WIDTH, colour, drawing};

/// Height of a bar chart, in pixels.
const HEIGHT: u32 = 420;

/// One group of bars.
pub struct Group {
    /// Label under the group.
    pub label: String,
    /// One value per key (`NaN`: no bar).
    pub values: Vec<f64>,
    /// Per key, the single measurements behind the value (drawn as dots); may be empty.
    pub runs: Vec<Vec<f64>>,
}

/// A bar chart.
pub struct Bars {
    /// Title of the chart.
    pub title: String,
    /// What the bars measure, with the unit.
    pub y_desc: String,
    /// The bars of a group, in order (the legend).
    pub keys: Vec<String>,
    /// The groups, left to right.
    pub groups: Vec<Group>,
    /// Horizontal reference lines: value and legend text.
    pub lines: Vec<(f64, String)>,
    /// Decimals of the values written above the bars.
    pub decimals: usize,
}

/// Draws `b` into the SVG file `path`.
pub fn draw(path: &Path, b: &Bars) -> Result<()> {
    let err = drawing(path);
    let n = b.groups.len().max(1);
    let highest = b
        .groups
        .iter()
        .flat_map(|g| g.values.iter().chain(g.runs.iter().flatten()))
        .chain(b.lines.iter().map(|(v, _)| v))
        .copied()
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let y_max = if highest > 0.0 { highest * 1.25 } else { 1.0 };

    let root = SVGBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(&b.title, (FONT, 17))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..y_max)
        .map_err(&err)?;
    // The x axis has no numbers: each group's label goes under its middle instead.
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(WHITE.mix(0.0))
        .x_labels(0)
        .y_label_formatter(&|v| format!("{v}"))
        .y_desc(b.y_desc.as_str())
        .label_style((FONT, 12))
        .draw()
        .map_err(&err)?;
    let under = TextStyle::from((FONT, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (g, group) in b.groups.iter().enumerate() {
        let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
        root.draw(&Text::new(group.label.as_str(), (x, y + 8), under.clone()))
            .map_err(&err)?;
    }

    let keys = b.keys.len().max(1);
    let width = 0.8 / keys as f64;
    let left = |group: usize, key: usize| group as f64 + 0.1 + key as f64 * width;
    for (k, key) in b.keys.iter().enumerate() {
        let c = colour(k);
        let bars = b.groups.iter().enumerate().filter_map(|(g, group)| {
            let v = *group.values.get(k)?;
            v.is_finite()
                .then(|| Rectangle::new([(left(g, k), 0.0), (left(g, k) + width, v)], c.filled()))
        });
        chart
            .draw_series(bars)
            .map_err(&err)?
            .label(key.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        let values = b.groups.iter().enumerate().filter_map(|(g, group)| {
            let v = *group.values.get(k)?;
            let text = format!("{v:.prec$}", prec = b.decimals);
            // Above the bar and above its dots.
            let top = group
                .runs
                .get(k)
                .into_iter()
                .flatten()
                .fold(v, |a, r| a.max(*r));
            let style =
                TextStyle::from((FONT, 11).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
            v.is_finite()
                .then(|| Text::new(text, (left(g, k) + width / 2.0, top), style))
        });
        chart.draw_series(values).map_err(&err)?;
        let dots = b.groups.iter().enumerate().flat_map(|(g, group)| {
            let x = left(g, k) + width / 2.0;
            group
                .runs
                .get(k)
                .into_iter()
                .flatten()
                .map(move |v| Circle::new((x, *v), 3, BLACK.mix(0.6).filled()))
        });
        chart.draw_series(dots).map_err(&err)?;
    }
    for (i, (value, text)) in b.lines.iter().enumerate() {
        let style = BLACK.mix(0.35 + 0.3 * i as f64).stroke_width(1);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, *value), (n as f64, *value)],
                style,
            )))
            .map_err(&err)?
            .label(text.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font((FONT, 11))
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_a_valid_svg() {
        let dir = std::env::temp_dir().join(format!("ck-bars-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bars.svg");
        let b = Bars {
            title: "share".into(),
            y_desc: "% of connections".into(),
            keys: vec!["slot 0".into(), "slot 1".into()],
            groups: vec![
                Group {
                    label: "hash".into(),
                    values: vec![40.0, 60.0],
                    runs: vec![vec![39.0, 41.0], vec![]],
                },
                Group {
                    label: "round-robin".into(),
                    values: vec![50.0, f64::NAN],
                    runs: Vec::new(),
                },
            ],
            lines: vec![(50.0, "even".into())],
            decimals: 1,
        };
        draw(&path, &b).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        for text in ["round-robin", "slot 1", "60.0", "even", "<rect"] {
            assert!(svg.contains(text), "no {text:?} in the SVG");
        }
        // Per key, its bars (the NaN one is left out) and its box in the legend.
        let boxes = |c: RGBColor| {
            svg.matches(&format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
                .count()
        };
        assert_eq!(
            (boxes(colour(0)), boxes(colour(1))),
            (2 + 1, 1 + 1),
            "{svg}"
        );
    }
}
