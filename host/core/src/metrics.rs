//! Counters and histograms in the Prometheus text format, without a metrics crate: the few kinds
//! the scheduler needs, lock-free on the scheduling path.
//!
//! Plugin call times are kept per plugin *name* in a [`PluginStatsRegistry`], so they survive a hot
//! swap of the plugin's component (a Prometheus counter must not go backwards when a new version
//! is loaded).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::runtime::FailureKind;

/// A histogram with fixed upper bounds (seconds), counts kept per bucket.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, plus the `+Inf` bucket.
    counts: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

/// kube-scheduler's `plugin_execution_duration_seconds` buckets: 10 µs * 1.5^i, 20 buckets.
pub const PLUGIN_BUCKETS: &[f64] = &[
    0.00001,
    0.000015,
    0.0000225,
    0.00003375,
    0.000050625,
    0.0000759375,
    0.00011390625,
    0.000170859375,
    0.0002562890625,
    0.00038443359375,
    0.000576650390625,
    0.0008649755859375,
    0.00129746337890625,
    0.001946195068359375,
    0.0029192926025390625,
    0.004378938903808594,
    0.006568408355712891,
    0.009852612533569336,
    0.014778918800354004,
    0.022168378200531006,
];

/// kube-scheduler's `scheduling_attempt_duration_seconds` buckets: 1 ms * 2^i, 15 buckets.
pub const ATTEMPT_BUCKETS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

impl Histogram {
    /// An empty histogram with these bucket bounds (seconds).
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let bucket = self.bounds.partition_point(|&b| b < seconds);
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The sum of every observation.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.sum_nanos.load(Ordering::Relaxed))
    }

    /// How many observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The upper bound of the bucket holding quantile `q` (an over-estimate, as Prometheus'
    /// `histogram_quantile` would interpolate within it); `None` without observations.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = (q * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c.load(Ordering::Relaxed);
            if seen >= rank {
                return Some(self.bounds.get(i).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }

    /// Appends the `_bucket`, `_sum` and `_count` series; `labels` is `key="value",...` or empty.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, bound) in self.bounds.iter().enumerate() {
            cumulative += self.counts[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        cumulative += self.counts[self.bounds.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cumulative}"
        );
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {cumulative}");
    }
}

/// Extension points a plugin call belongs to, named as kube-scheduler names them (plus `Sync`,
/// our node-mirror updates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtensionPoint {
    /// Kept out of the queue, or let in.
    PreEnqueue,
    /// `set-pod`.
    PreFilter,
    /// `filter`.
    Filter,
    /// `score` and `normalize`.
    Score,
    /// Mirror updates.
    Sync,
    /// `reserve`.
    Reserve,
    /// `permit`.
    Permit,
    /// `unreserve`.
    Unreserve,
    /// `post-filter`.
    PostFilter,
    /// `queue-sort`.
    QueueSort,
}

impl ExtensionPoint {
    /// Every extension point, in cycle order.
    pub const ALL: [ExtensionPoint; 10] = [
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::Score,
        ExtensionPoint::Sync,
        ExtensionPoint::Reserve,
        ExtensionPoint::PostFilter,
        ExtensionPoint::Permit,
        ExtensionPoint::Unreserve,
    ];

    /// The name kube-scheduler's metrics give it.
    pub fn name(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "PreEnqueue",
            ExtensionPoint::PreFilter => "PreFilter",
            ExtensionPoint::Filter => "Filter",
            ExtensionPoint::Score => "Score",
            ExtensionPoint::Sync => "Sync",
            ExtensionPoint::Reserve => "Reserve",
            ExtensionPoint::PostFilter => "PostFilter",
            ExtensionPoint::QueueSort => "QueueSort",
            ExtensionPoint::Permit => "Permit",
            ExtensionPoint::Unreserve => "Unreserve",
        }
    }
}

/// Call times of one plugin, per extension point and outcome (`Success`, `Error`), its failures
/// by kind and its quarantine.
#[derive(Debug)]
pub struct PluginCallStats {
    /// `[point][0]` successes, `[point][1]` errors.
    calls: Vec<[Histogram; 2]>,
    /// Failures the scheduler recorded, by [`FailureKind`] (an invalid answer is a successful call
    /// the host refused, so call outcomes alone miss it).
    failures: [AtomicU64; FailureKind::ALL.len()],
    /// When the latest quarantine ends, in milliseconds since the Unix epoch (0: never was).
    quarantined_until_ms: AtomicU64,
}

impl Default for PluginCallStats {
    fn default() -> Self {
        PluginCallStats {
            calls: ExtensionPoint::ALL
                .iter()
                .map(|_| {
                    [
                        Histogram::new(PLUGIN_BUCKETS),
                        Histogram::new(PLUGIN_BUCKETS),
                    ]
                })
                .collect(),
            failures: Default::default(),
            quarantined_until_ms: AtomicU64::new(0),
        }
    }
}

/// Milliseconds since the epoch at `time`.
pub(crate) fn unix_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl PluginCallStats {
    /// Counts a failure the scheduler recorded.
    pub fn failed(&self, kind: FailureKind) {
        self.failures[kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Failures by kind, every kind listed.
    pub fn failures_by_kind(&self) -> Vec<(FailureKind, u64)> {
        FailureKind::ALL
            .iter()
            .map(|&kind| (kind, self.failures[kind as usize].load(Ordering::Relaxed)))
            .collect()
    }

    /// Records a quarantine starting now.
    pub fn quarantined_for(&self, length: Duration) {
        let until = unix_ms(SystemTime::now() + length);
        self.quarantined_until_ms.store(until, Ordering::Relaxed);
    }

    /// How long the plugin stays quarantined, if it is.
    pub fn quarantine_left(&self) -> Option<Duration> {
        let until = self.quarantined_until_ms.load(Ordering::Relaxed);
        let now = unix_ms(SystemTime::now());
        (until > now).then(|| Duration::from_millis(until - now))
    }

    /// Counts one call at `point`, and whether it succeeded.
    pub fn observe(&self, point: ExtensionPoint, elapsed: Duration, ok: bool) {
        self.calls[point as usize][usize::from(!ok)].observe(elapsed);
    }

    /// Calls made (every extension point).
    pub fn calls(&self) -> u64 {
        self.calls.iter().flatten().map(Histogram::count).sum()
    }

    /// Failures the scheduler recorded, every kind.
    pub fn errors(&self) -> u64 {
        self.failures_by_kind().iter().map(|&(_, n)| n).sum()
    }

    /// Time spent in one extension point's calls, failed ones included.
    pub fn total(&self, point: ExtensionPoint) -> Duration {
        self.calls[point as usize]
            .iter()
            .map(Histogram::total)
            .sum()
    }

    /// The p99 of one extension point's successful calls, as a bucket upper bound.
    pub fn p99(&self, point: ExtensionPoint) -> Option<f64> {
        self.calls[point as usize][0].quantile_upper_bound(0.99)
    }

    fn render_failures(&self, out: &mut String, plugin: &str) {
        for (kind, count) in self.failures_by_kind() {
            let _ = writeln!(
                out,
                "wasched_plugin_failures_total{{plugin=\"{}\",kind=\"{}\"}} {count}",
                escape(plugin),
                kind.name()
            );
        }
    }

    fn render_quarantine(&self, out: &mut String, plugin: &str) {
        let left = self.quarantine_left().map_or(0.0, |d| d.as_secs_f64());
        let _ = writeln!(
            out,
            "wasched_plugin_quarantine_seconds_left{{plugin=\"{}\"}} {left}",
            escape(plugin)
        );
    }

    fn render(&self, out: &mut String, plugin: &str) {
        for point in ExtensionPoint::ALL {
            for (status, histogram) in ["Success", "Error"].iter().zip(&self.calls[point as usize])
            {
                if histogram.count() == 0 {
                    continue;
                }
                histogram.render(
                    out,
                    "scheduler_plugin_execution_duration_seconds",
                    &format!(
                        "plugin=\"{}\",extension_point=\"{}\",status=\"{status}\"",
                        escape(plugin),
                        point.name()
                    ),
                );
            }
        }
    }
}

/// Call statistics by plugin name, shared by every configuration the process loads.
#[derive(Debug, Default)]
pub struct PluginStatsRegistry {
    plugins: Mutex<BTreeMap<String, Arc<PluginCallStats>>>,
}

impl PluginStatsRegistry {
    /// The statistics of `plugin`, created on first use.
    pub fn get(&self, plugin: &str) -> Arc<PluginCallStats> {
        let mut plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        plugins.entry(plugin.to_string()).or_default().clone()
    }

    /// Every plugin's statistics, by name.
    pub fn all(&self) -> Vec<(String, Arc<PluginCallStats>)> {
        let plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        plugins
            .iter()
            .map(|(name, stats)| (name.clone(), stats.clone()))
            .collect()
    }

    /// Appends every plugin's execution-time histograms.
    pub fn render(&self, out: &mut String) {
        let plugins = self.plugins.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(
            out,
            "# HELP scheduler_plugin_execution_duration_seconds Duration for running a plugin at a specific extension point (one call covers a batch of nodes)."
        );
        let _ = writeln!(
            out,
            "# TYPE scheduler_plugin_execution_duration_seconds histogram"
        );
        for (name, stats) in plugins.iter() {
            stats.render(out, name);
        }
        let _ = writeln!(
            out,
            "# HELP wasched_plugin_failures_total Plugin failures the scheduler recorded, by kind (trap, deadline, memory, invalid_result, init).\n\
             # TYPE wasched_plugin_failures_total counter"
        );
        for (name, stats) in plugins.iter() {
            stats.render_failures(out, name);
        }
        // Each family's samples stay together, as the text format requires.
        let _ = writeln!(
            out,
            "# HELP wasched_plugin_quarantine_seconds_left Seconds until the plugin's quarantine ends (0 when it is not quarantined).\n\
             # TYPE wasched_plugin_quarantine_seconds_left gauge"
        );
        for (name, stats) in plugins.iter() {
            stats.render_quarantine(out, name);
        }
    }
}

/// Escapes a label value.
pub fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_quantiles_pick_the_bucket() {
        let h = Histogram::new(ATTEMPT_BUCKETS);
        for ms in [0.5, 0.5, 3.0, 100.0] {
            h.observe(Duration::from_secs_f64(ms / 1000.0));
        }
        h.observe(Duration::from_secs(60));
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.004\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"16.384\"} 4\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 5\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 5\n"), "{out}");
        assert_eq!(h.quantile_upper_bound(0.4), Some(0.001));
        assert_eq!(h.quantile_upper_bound(0.6), Some(0.004));
        assert_eq!(h.quantile_upper_bound(1.0), Some(f64::INFINITY));
    }

    #[test]
    fn plugin_stats_separate_points_and_errors() {
        let registry = PluginStatsRegistry::default();
        let stats = registry.get("P\"x");
        stats.observe(ExtensionPoint::Filter, Duration::from_micros(20), true);
        stats.observe(ExtensionPoint::Filter, Duration::from_micros(20), false);
        stats.observe(ExtensionPoint::Score, Duration::from_micros(5), true);
        assert_eq!(registry.get("P\"x").calls(), 3, "same name, same stats");
        assert_eq!(
            stats.errors(),
            0,
            "errors are the failures the scheduler recorded"
        );
        stats.failed(FailureKind::InvalidResult);
        stats.failed(FailureKind::Deadline);
        stats.failed(FailureKind::Deadline);
        assert_eq!(stats.errors(), 3);
        assert_eq!(stats.quarantine_left(), None);
        stats.quarantined_for(Duration::from_secs(60));
        assert!(stats.quarantine_left().unwrap() > Duration::from_secs(50));
        let mut out = String::new();
        registry.render(&mut out);
        assert!(out.contains(
            "scheduler_plugin_execution_duration_seconds_count{plugin=\"P\\\"x\",extension_point=\"Filter\",status=\"Error\"} 1"
        ), "{out}");
        assert!(!out.contains("extension_point=\"PreFilter\""));
        assert!(
            out.contains("wasched_plugin_failures_total{plugin=\"P\\\"x\",kind=\"deadline\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("wasched_plugin_failures_total{plugin=\"P\\\"x\",kind=\"trap\"} 0\n"),
            "{out}"
        );
        let left: f64 = out
            .lines()
            .find_map(|l| {
                l.strip_prefix("wasched_plugin_quarantine_seconds_left{plugin=\"P\\\"x\"} ")
            })
            .and_then(|v| v.parse().ok())
            .expect("the quarantine gauge");
        assert!((50.0..=60.0).contains(&left), "{out}");
        let other = registry.get("Q");
        other.failed(FailureKind::Trap);
        let mut out = String::new();
        registry.render(&mut out);
        let families: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap_or(""))
            .map(|name| {
                name.trim_end_matches("_bucket")
                    .trim_end_matches("_sum")
                    .trim_end_matches("_count")
            })
            .collect();
        let mut seen: Vec<&str> = Vec::new();
        for family in families {
            if seen.last() != Some(&family) {
                assert!(!seen.contains(&family), "{family} is split in two: {out}");
                seen.push(family);
            }
        }
        assert!(out.contains("# TYPE wasched_plugin_quarantine_seconds_left gauge"));
    }
}
