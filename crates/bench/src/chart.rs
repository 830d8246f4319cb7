//! The report's pictures, drawn with plotters as SVG (no fonts or bitmaps to
//! build: the viewer's sans-serif draws the text).
//!
//! Two kinds, both plain on purpose:
//! - [`ranges`]: one row per measured thing, a bar from the smallest to the
//!   largest sample, a dot at the median (and optionally a cross for a second
//!   figure, such as the worst case); a log axis when the rows span decades.
//! - [`log_log`]: panels of lines, cost against executor count, both axes
//!   logarithmic, with a grey dashed line of slope 1 (linear growth) to compare.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
pub use plotters::style::RGBColor;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::stats::{Summary, num};

/// Colours, picked for contrast on white and for colour-blind readers.
pub const BLUE: RGBColor = RGBColor(0, 114, 178);
pub const ORANGE: RGBColor = RGBColor(230, 159, 0);
pub const GREEN: RGBColor = RGBColor(0, 158, 115);
pub const RED: RGBColor = RGBColor(213, 94, 0);
pub const GREY: RGBColor = RGBColor(120, 120, 120);

/// One row of a [`ranges`] chart.
pub struct RangeRow {
    pub label: String,
    pub summary: Summary,
    /// A second figure drawn as a cross (e.g. the worst lateness), if any.
    pub mark: Option<f64>,
    pub color: RGBColor,
}

/// Maps a value to the axis: log10 for log axes, so both kinds share one type.
fn to_axis(value: f64, log: bool) -> f64 {
    if log { value.max(1e-9).log10() } else { value }
}

/// An axis tick's label: for log axes the value 10^v, rounded to read well.
fn tick_label(v: f64, log: bool) -> String {
    let value = if log { 10f64.powf(v) } else { v };
    if value == 0.0 {
        return "0".into();
    }
    let digits = value.abs().log10().floor();
    let decimals = if digits >= 0.0 { 0 } else { (-digits) as usize };
    // Two significant figures at most.
    let rounded = if digits >= 1.0 {
        let unit = 10f64.powf(digits - 1.0);
        (value / unit).round() * unit
    } else {
        value
    };
    num(rounded, decimals.min(4))
}

/// Tick positions (in log10 space) for a log axis from `lo` to `hi`: every
/// 1, 2 and 5 when it spans few decades, every 1 and 3 for a few more, else
/// every power of ten.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let span = hi - lo;
    let steps: &[f64] = if span <= 2.5 {
        &[1.0, 2.0, 5.0]
    } else if span <= 4.5 {
        &[1.0, 3.0]
    } else {
        &[1.0]
    };
    let mut ticks = Vec::new();
    for decade in (lo.floor() as i32)..=(hi.ceil() as i32) {
        for step in steps {
            let v = f64::from(decade) + step.log10();
            if v >= lo - 1e-9 && v <= hi + 1e-9 {
                ticks.push(v);
            }
        }
    }
    ticks
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// Draws a log axis's grid lines and labels by hand (the mesh would put its
/// ticks at even steps of the logarithm, which read badly).
fn draw_log_axis(
    chart: &mut Chart<'_, '_>,
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    x: bool,
    (lo, hi): (f64, f64),
    (other_lo, other_hi): (f64, f64),
) -> Result<()> {
    for tick in log_ticks(lo, hi) {
        let line = if x {
            vec![(tick, other_lo), (tick, other_hi)]
        } else {
            vec![(other_lo, tick), (other_hi, tick)]
        };
        chart.draw_series(std::iter::once(PathElement::new(
            line,
            RGBColor(225, 225, 225).stroke_width(1),
        )))?;
        let (px, py) = chart.backend_coord(&if x {
            (tick, other_lo)
        } else {
            (other_lo, tick)
        });
        // Backend coordinates are the canvas's; the area draws relative to its corner.
        let (bx, by) = root.get_base_pixel();
        let (px, py) = (px - bx, py - by);
        let (offset, anchor) = if x {
            ((px, py + 6), Pos::new(HPos::Center, VPos::Top))
        } else {
            ((px - 6, py), Pos::new(HPos::Right, VPos::Center))
        };
        root.draw(&Text::new(
            tick_label(tick, true),
            offset,
            ("sans-serif", 12).into_font().color(&BLACK).pos(anchor),
        ))?;
    }
    Ok(())
}

/// A median as the chart prints it: three significant figures or so.
fn value_label(v: f64) -> String {
    let decimals = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else if v >= 1.0 {
        2
    } else {
        3
    };
    num(v, decimals)
}

/// Horizontal range bars, one row per thing measured, top to bottom: a bar
/// from min to max, a dot at the median with its value beside, and the mark.
pub fn ranges(path: &Path, title: &str, x_desc: &str, rows: &[RangeRow], log: bool) -> Result<()> {
    // The naive font metrics plotters uses without a font backend are rough:
    // size the label column from the longest label, about 7 px a character.
    let label_width = rows
        .iter()
        .map(|r| r.label.chars().count() as u32 * 7 + 24)
        .max()
        .unwrap_or(100)
        .max(160);
    let height = 90 + 34 * rows.len() as u32;
    let root = SVGBackend::new(path, (label_width + 640, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let lo = rows
        .iter()
        .map(|r| r.summary.min.min(r.mark.unwrap_or(f64::MAX)))
        .fold(f64::MAX, f64::min);
    let hi = rows
        .iter()
        .map(|r| r.summary.max.max(r.mark.unwrap_or(f64::MIN)))
        .fold(f64::MIN, f64::max);
    let (x0, x1) = if log {
        let lo = to_axis(lo.max(1e-6), true).floor();
        let hi = to_axis(hi.max(1e-6), true).ceil();
        (lo, if hi <= lo { lo + 1.0 } else { hi })
    } else {
        (0.0, if hi > 0.0 { hi * 1.1 } else { 1.0 })
    };
    let n = rows.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .margin_right(80)
        .x_label_area_size(40)
        .y_label_area_size(label_width)
        .build_cartesian_2d(x0..x1, -0.5..(n - 0.5))?;
    let mut mesh = chart.configure_mesh();
    mesh.disable_y_mesh().y_labels(0).x_desc(x_desc);
    if log {
        mesh.disable_x_mesh().x_labels(0);
    } else {
        mesh.x_labels(8)
            .x_label_formatter(&|v| tick_label(*v, false));
    }
    mesh.draw()?;
    if log {
        draw_log_axis(&mut chart, &root, true, (x0, x1), (-0.5, n - 0.5))?;
    }
    for (i, row) in rows.iter().enumerate() {
        // Row 0 at the top.
        let y = n - 1.0 - i as f64;
        let s = row.summary;
        let (a, b, m) = (
            to_axis(s.min, log),
            to_axis(s.max, log),
            to_axis(s.median, log),
        );
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(a, y), (b, y)],
            row.color.mix(0.45).stroke_width(8),
        )))?;
        chart.draw_series([
            Circle::new((m, y), 5, row.color.filled()),
            Circle::new((m, y), 5, BLACK.stroke_width(1)),
        ])?;
        let mut right = b;
        if let Some(mark) = row.mark {
            let at = to_axis(mark, log);
            right = right.max(at);
            chart.draw_series(std::iter::once(Cross::new(
                (at, y),
                5,
                BLACK.stroke_width(2),
            )))?;
        }
        let (px, py) = chart.backend_coord(&(x0, y));
        root.draw(&Text::new(
            row.label.clone(),
            (px - 10, py),
            ("sans-serif", 14)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
        let (vx, vy) = chart.backend_coord(&(right, y));
        root.draw(&Text::new(
            value_label(s.median),
            (vx + 10, vy),
            ("sans-serif", 12)
                .into_font()
                .color(&RGBColor(60, 60, 60))
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    root.present()
        .with_context(|| format!("while writing {}", path.display()))?;
    Ok(())
}

/// One line of a [`log_log`] panel.
pub struct Line {
    pub name: String,
    /// (executors, value) points; non-positive values are left out.
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
}

/// One panel of a [`log_log`] chart.
pub struct Panel {
    pub title: String,
    pub y_desc: String,
    pub lines: Vec<Line>,
}

/// Panels side by side (two per row), each log-log, x = executors.
pub fn log_log(path: &Path, title: &str, panels: &[Panel]) -> Result<()> {
    let rows = panels.len().div_ceil(2) as u32;
    let root = SVGBackend::new(path, (1000, 40 + 360 * rows)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 20))?;
    let areas = root.split_evenly((rows as usize, 2));
    for (panel, area) in panels.iter().zip(areas.iter()) {
        draw_panel(area, panel)?;
    }
    root.present()
        .with_context(|| format!("while writing {}", path.display()))?;
    Ok(())
}

fn draw_panel(area: &DrawingArea<SVGBackend<'_>, Shift>, panel: &Panel) -> Result<()> {
    let points: Vec<(f64, f64)> = panel
        .lines
        .iter()
        .flat_map(|l| l.points.iter().copied())
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .collect();
    if points.is_empty() {
        return Ok(());
    }
    let axis = |f: fn(&(f64, f64)) -> f64| {
        let lo = points
            .iter()
            .map(f)
            .fold(f64::MAX, f64::min)
            .log10()
            .floor();
        let hi = points.iter().map(f).fold(f64::MIN, f64::max).log10().ceil();
        (lo, if hi <= lo { lo + 1.0 } else { hi })
    };
    let (x0, x1) = axis(|p| p.0);
    let (y0, y1) = axis(|p| p.1);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(10)
        .margin_right(30)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    chart
        .configure_mesh()
        .disable_mesh()
        .x_labels(0)
        .y_labels(0)
        .x_desc("executors")
        .y_desc(panel.y_desc.as_str())
        .draw()?;
    draw_log_axis(&mut chart, area, true, (x0, x1), (y0, y1))?;
    draw_log_axis(&mut chart, area, false, (y0, y1), (x0, x1))?;
    // Linear growth from the first line's first usable point, for comparison.
    if let Some(&(fx, fy)) = panel
        .lines
        .first()
        .and_then(|l| l.points.iter().find(|(x, y)| *x > 0.0 && *y > 0.0))
        && fx > 0.0
        && fy > 0.0
    {
        let (ax, ay) = (fx.log10(), fy.log10());
        let bx = x1.min(ax + (y1 - ay));
        chart
            .draw_series(DashedLineSeries::new(
                vec![(ax, ay), (bx, ay + (bx - ax))],
                6,
                4,
                GREY.stroke_width(1),
            ))?
            .label("linear growth")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], GREY));
    }
    for line in &panel.lines {
        let pts: Vec<(f64, f64)> = line
            .points
            .iter()
            .filter(|(x, y)| *x > 0.0 && *y > 0.0)
            .map(|(x, y)| (x.log10(), y.log10()))
            .collect();
        let color = line.color;
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(line.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(GREY)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_read_as_values() {
        assert_eq!(tick_label(3.0, true), "1,000");
        assert_eq!(tick_label(-2.0, true), "0.01");
        assert_eq!(tick_label(2.0, false), "2");
        let ticks: Vec<String> = log_ticks(-1.0, 0.0)
            .iter()
            .map(|t| tick_label(*t, true))
            .collect();
        assert_eq!(ticks, ["0.1", "0.2", "0.5", "1"]);
    }

    #[test]
    fn charts_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let s = Summary::of(&[1.0, 2.0, 4.0]).unwrap();
        let rows = vec![RangeRow {
            label: "a".into(),
            summary: s,
            mark: Some(5.0),
            color: BLUE,
        }];
        ranges(&dir.path().join("r.svg"), "t", "ms", &rows, true).unwrap();
        let panel = Panel {
            title: "p".into(),
            y_desc: "ms".into(),
            lines: vec![Line {
                name: "SQLite".into(),
                points: vec![(10.0, 1.0), (1000.0, 30.0)],
                color: BLUE,
            }],
        };
        log_log(&dir.path().join("l.svg"), "t", &[panel]).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("l.svg")).unwrap();
        assert!(svg.contains("SQLite"));
    }
}
