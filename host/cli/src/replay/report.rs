//! The HTML report of `wasched replay --out`: headline figures and plots drawn with plotters into
//! inline SVG, so the one file opens in a browser without a server or network.

use std::fmt::Write as _;

use plotters::prelude::*;

use super::{Run, Sample};

/// What the report says about where its runs came from.
pub struct Context {
    /// The node list's path.
    pub nodes: String,
    /// The pod list's path.
    pub pods: String,
    /// The seed.
    pub seed: u64,
    /// Pods kept their place past their deletion time.
    pub ignore_deletions: bool,
    /// Only the first this many pods were replayed.
    pub limit: Option<usize>,
}

const WIDTH: u32 = 960;
const HEIGHT: u32 = 380;

/// Colours of the series, in order (run-major when runs are compared).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

type Plot = anyhow::Result<String>;

/// A row of the headline table: its name and how a run's cell reads.
type Row = (&'static str, fn(&Run) -> String);

/// A series of a time plot: its name and its value at a sample.
type Metric = (&'static str, fn(&Sample) -> f64);

/// The whole report.
///
/// # Errors
/// A plot cannot be drawn.
pub fn html(context: &Context, runs: &[Run]) -> anyhow::Result<String> {
    let mut out = String::new();
    let first = &runs[0].summary;
    let title = format!(
        "wasched replay: {} nodes ({} GPUs), {} pods",
        first.nodes, first.gpus, first.pods
    );
    let _ = write!(
        out,
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\n\
         <style>body{{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:4px 10px;text-align:right}}\
         th:first-child,td:first-child{{text-align:left}}code{{background:#f4f4f4;padding:1px 4px}}\
         .note{{color:#555;font-size:90%}}</style></head><body>\n<h1>{title}</h1>\n",
        title = escape(&title)
    );
    context_note(&mut out, context);
    headline_table(&mut out, runs);
    let sections: [(&str, &str, Plot); 4] = [
        (
            "Allocation over time",
            "Requested share of the cluster's allocatable CPU, memory and GPU.",
            allocation_plot(runs),
        ),
        (
            "Pending pods over time",
            "Pods created and not yet placed, at each sample.",
            pending_plot(runs),
        ),
        (
            "GPU fragmentation over time",
            "Fragmentation as in \"Beware of Fragmentation\" (ATC '23): the GPUs that the trace's GPU \
             workload, weighted by how often each request shape occurs, cannot use; beside the free GPUs.",
            fragmentation_plot(runs),
        ),
        (
            "Scheduling latency",
            "Wall time of each scheduling cycle (filter, score, select, assume), log-scaled buckets.",
            latency_plot(runs),
        ),
    ];
    for (heading, caption, svg) in sections {
        let _ = writeln!(
            out,
            "<h2>{heading}</h2>\n<p class=\"note\">{}</p>\n{}",
            escape(caption),
            svg?
        );
    }
    reasons_table(&mut out, runs);
    skipped_rows_table(&mut out, &first.skipped_rows);
    out.push_str("</body></html>\n");
    Ok(out)
}

/// The trace's rows the replay skipped, with why; nothing when none was.
fn skipped_rows_table(out: &mut String, skipped: &[super::SkippedRow]) {
    if skipped.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<h2>Skipped rows</h2>\n<table><tr><th>row</th><th>reason</th></tr>"
    );
    for row in skipped {
        let _ = writeln!(
            out,
            "<tr><td>{}:{}</td><td>{}</td></tr>",
            escape(&row.file),
            row.line,
            escape(&row.reason)
        );
    }
    out.push_str("</table>\n");
}

/// What was replayed, and how to read the plots.
fn context_note(out: &mut String, context: &Context) {
    let _ = writeln!(
        out,
        "<p class=\"note\">Nodes <code>{}</code>, pods <code>{}</code>, seed {}{}{}. Time on the \
         x axes is the trace's logical time in hours from its first event; latency is wall time.</p>",
        escape(&context.nodes),
        escape(&context.pods),
        context.seed,
        if context.ignore_deletions {
            ", deletions ignored (pods keep their place once placed)"
        } else {
            ""
        },
        context
            .limit
            .map(|l| format!(", first {l} pods"))
            .unwrap_or_default(),
    );
}

fn headline_table(out: &mut String, runs: &[Run]) {
    let _ = write!(out, "<table><tr><th></th>");
    for run in runs {
        let _ = write!(out, "<th>{}</th>", escape(&run.label));
    }
    out.push_str("</tr>\n");
    let rows: [Row; 14] = [
        ("pods placed", |r| r.summary.placed.to_string()),
        ("never placed", |r| r.summary.never_placed.to_string()),
        ("scheduling cycles", |r| r.summary.cycles.to_string()),
        ("unschedulable attempts", |r| {
            r.summary.unschedulable_attempts.to_string()
        }),
        ("plugin errors", |r| r.summary.plugin_errors.to_string()),
        ("latency p50 / p99 / max (µs)", |r| {
            let l = &r.summary.latency_us;
            format!("{:.0} / {:.0} / {:.0}", l.p50, l.p99, l.max)
        }),
        ("decisions per second", |r| {
            format!("{:.0}", r.summary.decisions_per_second)
        }),
        ("wall time (s)", |r| {
            format!("{:.1}", r.summary.wall_seconds)
        }),
        ("peak GPU allocation", |r| {
            percent(peak(&r.summary.series, |s| s.gpu))
        }),
        ("peak CPU allocation", |r| {
            percent(peak(&r.summary.series, |s| s.cpu))
        }),
        ("GPU fragmentation at the end (GPUs)", |r| {
            r.summary
                .series
                .last()
                .map(|s| format!("{:.1} of {:.1} free", s.gpu_fragmentation, s.gpu_free))
                .unwrap_or_default()
        }),
        ("peak GPU fragmentation (GPUs)", |r| {
            format!("{:.1}", peak(&r.summary.series, |s| s.gpu_fragmentation))
        }),
        ("most committed node", |r| {
            percent(r.summary.max_node_commitment)
        }),
        ("bookkeeping mismatches", |r| {
            r.summary.bookkeeping_mismatches.to_string()
        }),
    ];
    for (name, value) in rows {
        let _ = write!(out, "<tr><td>{name}</td>");
        for run in runs {
            let _ = write!(out, "<td>{}</td>", escape(&value(run)));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn reasons_table(out: &mut String, runs: &[Run]) {
    let mut reasons: Vec<&String> = runs
        .iter()
        .flat_map(|r| r.summary.never_placed_reasons.keys())
        .collect();
    reasons.sort();
    reasons.dedup();
    if reasons.is_empty() {
        return;
    }
    let _ = write!(
        out,
        "<h2>Why pods were never placed</h2>\n<p class=\"note\">Reasons in each such pod's last \
         FitError message (a pod may have several).</p>\n<table><tr><th>reason</th>"
    );
    for run in runs {
        let _ = write!(out, "<th>{}</th>", escape(&run.label));
    }
    out.push_str("</tr>\n");
    for reason in reasons {
        let _ = write!(out, "<tr><td>{}</td>", escape(reason));
        for run in runs {
            let count = run
                .summary
                .never_placed_reasons
                .get(reason)
                .copied()
                .unwrap_or(0);
            let _ = write!(out, "<td>{count}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

fn peak(series: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    series.iter().map(value).fold(0.0, f64::max)
}

fn percent(ratio: f64) -> String {
    format!("{:.1}%", ratio * 100.0)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Hours from the trace's first event.
fn hours(runs: &[Run], sample: &Sample) -> f64 {
    let start = runs
        .iter()
        .filter_map(|r| r.summary.series.first())
        .map(|s| s.time)
        .min()
        .unwrap_or(0);
    (sample.time.saturating_sub(start)) as f64 / 3600.0
}

/// One line per (run, metric) over logical time.
fn time_plot(runs: &[Run], y_label: &str, y_max: f64, metrics: &[Metric]) -> Plot {
    let x_max = runs
        .iter()
        .flat_map(|r| r.summary.series.iter().map(|s| hours(runs, s)))
        .fold(0.0, f64::max)
        .max(1e-3);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max.max(1e-9))?;
        chart
            .configure_mesh()
            .x_desc("hours")
            .y_desc(y_label)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        let mut colour = 0;
        for run in runs {
            for (name, value) in metrics {
                let style = COLOURS[colour % COLOURS.len()].stroke_width(2);
                colour += 1;
                let label = if runs.len() > 1 {
                    format!("{}: {name}", run.label)
                } else {
                    (*name).to_string()
                };
                chart
                    .draw_series(LineSeries::new(
                        run.summary
                            .series
                            .iter()
                            .map(|s| (hours(runs, s), value(s))),
                        style,
                    ))?
                    .label(label)
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            }
        }
        draw_legend(&mut chart, SeriesLabelPosition::MiddleLeft)?;
        root.present()?;
    }
    Ok(svg)
}

/// The legend of every series drawn with a label, on a translucent box.
fn draw_legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> anyhow::Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

fn allocation_plot(runs: &[Run]) -> Plot {
    time_plot(
        runs,
        "allocated (%)",
        100.0,
        &[
            ("GPU", |s| s.gpu * 100.0),
            ("CPU", |s| s.cpu * 100.0),
            ("memory", |s| s.memory * 100.0),
        ],
    )
}

fn pending_plot(runs: &[Run]) -> Plot {
    let most = runs
        .iter()
        .flat_map(|r| r.summary.series.iter().map(|s| s.pending))
        .max()
        .unwrap_or(0);
    time_plot(
        runs,
        "pending pods",
        (most as f64 * 1.1).max(1.0),
        &[("pending", |s| s.pending as f64)],
    )
}

fn fragmentation_plot(runs: &[Run]) -> Plot {
    let most = runs
        .iter()
        .flat_map(|r| r.summary.series.iter().map(|s| s.gpu_free))
        .fold(0.0, f64::max);
    time_plot(
        runs,
        "GPUs",
        (most * 1.1).max(1.0),
        &[
            ("fragmented GPUs", |s| s.gpu_fragmentation),
            ("free GPUs", |s| s.gpu_free),
        ],
    )
}

/// Bars per latency bucket on a log axis, the runs side by side within each bucket.
fn latency_plot(runs: &[Run]) -> Plot {
    let buckets: Vec<(f64, f64)> = {
        let bounds: Vec<f64> = runs[0]
            .summary
            .latency_histogram
            .iter()
            .map(|b| b.le_us)
            .collect();
        bounds
            .iter()
            .enumerate()
            .map(|(i, &le)| (if i == 0 { le / 2.0 } else { bounds[i - 1] }, le))
            .collect()
    };
    let used: Vec<usize> = (0..buckets.len())
        .filter(|&i| {
            runs.iter().any(|r| {
                r.summary
                    .latency_histogram
                    .get(i)
                    .is_some_and(|b| b.count > 0)
            })
        })
        .collect();
    let (low, high) = match (used.first(), used.last()) {
        (Some(&a), Some(&b)) => (buckets[a].0, buckets[b].1),
        _ => (1.0, 1e3),
    };
    let most = runs
        .iter()
        .flat_map(|r| r.summary.latency_histogram.iter().map(|b| b.count))
        .max()
        .unwrap_or(0);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d((low..high).log_scale(), 0.0..(most as f64 * 1.1).max(1.0))?;
        chart
            .configure_mesh()
            .x_desc("cycle wall time (µs)")
            .y_desc("cycles")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.0}"))
            .light_line_style(WHITE.mix(0.0))
            .draw()?;
        for (r, run) in runs.iter().enumerate() {
            let colour = COLOURS[(r * 3) % COLOURS.len()];
            let share = 1.0 / runs.len() as f64;
            let bars = run
                .summary
                .latency_histogram
                .iter()
                .zip(&buckets)
                .filter(|(b, _)| b.count > 0)
                .map(move |(b, &(lo, hi))| {
                    // Split the bucket evenly in log space between the runs.
                    let span = (hi / lo).ln();
                    let left = lo * (span * (r as f64 * share + 0.04)).exp();
                    let right = lo * (span * ((r + 1) as f64 * share - 0.04)).exp();
                    Rectangle::new([(left, 0.0), (right, b.count as f64)], colour.filled())
                });
            chart
                .draw_series(bars)?
                .label(run.label.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], colour.filled())
                });
        }
        draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present()?;
    }
    Ok(svg)
}
