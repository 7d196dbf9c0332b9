//! SVG plots of `bench compare`, drawn with `plotters` (text is written as
//! SVG text, so no font files are needed on the machine).

use crate::compare::Record;
use plotters::prelude::*;
use std::path::Path;

/// One line of a plot: a label and its points.
pub type Series = (String, Vec<(f64, f64)>);

const COLOURS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x94, 0x67, 0xbd),
];

/// Draws `series` into the SVG file `path`, log-log if `log`.
pub fn lines(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    log: bool,
) -> Result<(), String> {
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 || y0 > y1 {
        return Err(format!("{title}: nothing to plot"));
    }
    if x0 == x1 {
        x1 = x0 * 2.0 + 1.0;
    }
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let e = |e: DrawingAreaErrorKind<_>| format!("{}: {e:?}", path.display());
    root.fill(&WHITE).map_err(e)?;
    let mut b = ChartBuilder::on(&root);
    b.caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let style = |i: usize| COLOURS[i % COLOURS.len()];
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart.map_err(e)?;
            chart
                .configure_mesh()
                .x_desc(x_label)
                .y_desc(y_label)
                .draw()
                .map_err(e)?;
            for (i, (label, p)) in series.iter().enumerate() {
                let c = style(i);
                chart
                    .draw_series(LineSeries::new(p.iter().copied(), c.stroke_width(2)))
                    .map_err(e)?
                    .label(label.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
                chart
                    .draw_series(p.iter().map(|&xy| Circle::new(xy, 3, c.filled())))
                    .map_err(e)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }};
    }
    if log {
        draw!(b.build_cartesian_2d(
            (x0 / 1.5..x1 * 1.5).log_scale(),
            (y0 / 1.5..y1 * 1.5).log_scale()
        ));
    } else {
        draw!(b.build_cartesian_2d(0.0..x1 * 1.05, 0.0..y1 * 1.1));
    }
    root.present().map_err(e)?;
    Ok(())
}

/// The series of `scenario` at `np`: time (ms) against size (KiB) per side,
/// or against K for `concurrent`; `tail` plots the tails instead.
pub fn series_of(records: &[Record], scenario: &str, np: u32, tail: bool) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    let mut sides: Vec<&str> = Vec::new();
    for r in records {
        if crate::report::is_taskfold(&r.side) && !sides.contains(&r.side.as_str()) {
            sides.push(&r.side);
        }
    }
    sides.extend(["openmpi", "mpich"]);
    for side in sides {
        let mut p: Vec<(f64, f64)> = records
            .iter()
            .filter(|r| r.side == side && r.scenario == scenario && r.np == np)
            .map(|r| {
                let x = if scenario == "concurrent" {
                    f64::from(r.k)
                } else {
                    r.size as f64 / 1024.0
                };
                let y = if tail { r.tail_median_s } else { r.median_s };
                (x, y * 1e3)
            })
            .filter(|&(_, y)| y.is_finite() && y > 0.0)
            .collect();
        p.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !p.is_empty() {
            let name = match side {
                "openmpi" => "Open MPI",
                "mpich" => "MPICH",
                s => s,
            };
            out.push((name.to_string(), p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let s = vec![
            ("taskfold".to_string(), vec![(128.0, 1.0), (8192.0, 30.0)]),
            ("Open MPI".to_string(), vec![(128.0, 0.5), (8192.0, 25.0)]),
        ];
        lines(&path, "quiet, p = 8", "KiB", "ms", &s, true).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("Open MPI") && svg.contains("taskfold"));
        assert!(lines(&path, "empty", "x", "y", &[], false).is_err());
    }
}
