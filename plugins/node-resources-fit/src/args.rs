//! NodeResourcesFit's configuration, in the shape of kube-scheduler's `NodeResourcesFitArgs`:
//!
//! ```toml
//! [plugins.NodeResourcesFit.config]
//! ignoredResources = ["example.com/foo"]
//! ignoredResourceGroups = ["example.org"]
//! scoringStrategy = { type = "MostAllocated", resources = [{ name = "cpu", weight = 1 }] }
//! ```

use serde::Deserialize;

/// The parsed configuration.
#[derive(Debug)]
pub struct Args {
    ignored_resources: Vec<String>,
    ignored_groups: Vec<String>,
    pub(crate) scoring: Scoring,
}

#[derive(Debug)]
pub(crate) struct Scoring {
    pub(crate) strategy: Strategy,
    pub(crate) resources: Vec<Resource>,
}

#[derive(Debug)]
pub(crate) struct Resource {
    pub(crate) name: String,
    pub(crate) weight: i64,
}

#[derive(Debug)]
pub(crate) enum Strategy {
    LeastAllocated,
    MostAllocated,
    RequestedToCapacityRatio(Shape),
}

/// A piecewise-linear function from utilization (0..=100) to score (0..=100).
#[derive(Debug)]
pub(crate) struct Shape(Vec<(i64, i64)>);

impl Shape {
    /// kube-scheduler's `BuildBrokenLinearFunction`.
    pub(crate) fn at(&self, utilization: i64) -> i64 {
        let points = &self.0;
        for (i, &(u, s)) in points.iter().enumerate() {
            if utilization <= u {
                if i == 0 {
                    return s;
                }
                let (u0, s0) = points[i - 1];
                return s0 + (s - s0) * (utilization - u0) / (u - u0);
            }
        }
        points.last().map_or(0, |p| p.1)
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawArgs {
    #[serde(default)]
    ignored_resources: Vec<String>,
    #[serde(default)]
    ignored_resource_groups: Vec<String>,
    #[serde(default)]
    scoring_strategy: Option<RawStrategy>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawStrategy {
    #[serde(rename = "type", default = "least_allocated")]
    kind: String,
    #[serde(default)]
    resources: Option<Vec<RawResource>>,
    #[serde(default)]
    requested_to_capacity_ratio: Option<RawRatio>,
}

fn least_allocated() -> String {
    "LeastAllocated".to_string()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResource {
    name: String,
    #[serde(default = "one")]
    weight: i64,
}

fn one() -> i64 {
    1
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRatio {
    shape: Vec<RawPoint>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPoint {
    utilization: i64,
    score: i64,
}

impl Args {
    /// Parses and validates the JSON configuration.
    ///
    /// # Errors
    /// What is wrong, naming the field.
    pub fn parse(config: &str) -> Result<Args, String> {
        let raw: RawArgs = serde_json::from_str(config).map_err(|e| e.to_string())?;
        let strategy = raw.scoring_strategy.unwrap_or(RawStrategy {
            kind: least_allocated(),
            resources: None,
            requested_to_capacity_ratio: None,
        });
        let resources = strategy.resources.unwrap_or_else(|| {
            vec![
                RawResource {
                    name: "cpu".into(),
                    weight: 1,
                },
                RawResource {
                    name: "memory".into(),
                    weight: 1,
                },
            ]
        });
        if resources.is_empty() {
            return Err("scoringStrategy.resources must name at least one resource".into());
        }
        for r in &resources {
            if !(1..=100).contains(&r.weight) {
                return Err(format!(
                    "scoringStrategy.resources: weight of {:?} is {}, must be in 1..=100",
                    r.name, r.weight
                ));
            }
        }
        let strategy = match strategy.kind.as_str() {
            "LeastAllocated" => Strategy::LeastAllocated,
            "MostAllocated" => Strategy::MostAllocated,
            "RequestedToCapacityRatio" => {
                let ratio = strategy.requested_to_capacity_ratio.ok_or(
                    "scoringStrategy.requestedToCapacityRatio.shape is required for RequestedToCapacityRatio",
                )?;
                Strategy::RequestedToCapacityRatio(parse_shape(ratio.shape)?)
            }
            other => {
                return Err(format!(
                    "scoringStrategy.type {other:?} is not one of LeastAllocated, MostAllocated, RequestedToCapacityRatio"
                ))
            }
        };
        Ok(Args {
            ignored_resources: raw.ignored_resources,
            ignored_groups: raw.ignored_resource_groups,
            scoring: Scoring {
                strategy,
                resources: resources
                    .into_iter()
                    .map(|r| Resource {
                        name: r.name,
                        weight: r.weight,
                    })
                    .collect(),
            },
        })
    }

    /// True when an extended resource is excluded from the fit check by name or by group.
    pub(crate) fn ignores(&self, name: &str) -> bool {
        let extended = name.contains('/') && !name.contains("kubernetes.io/");
        if !extended {
            return false;
        }
        let group = name.split('/').next().unwrap_or_default();
        self.ignored_resources.iter().any(|r| r == name)
            || self.ignored_groups.iter().any(|g| g == group)
    }
}

fn parse_shape(points: Vec<RawPoint>) -> Result<Shape, String> {
    if points.is_empty() {
        return Err("requestedToCapacityRatio.shape must have at least one point".into());
    }
    let mut previous: Option<i64> = None;
    for p in &points {
        if !(0..=100).contains(&p.utilization) {
            return Err(format!(
                "shape: utilization {} is not in 0..=100",
                p.utilization
            ));
        }
        if !(0..=10).contains(&p.score) {
            return Err(format!("shape: score {} is not in 0..=10", p.score));
        }
        if previous.is_some_and(|u| p.utilization <= u) {
            return Err("shape: utilization values must be strictly increasing".into());
        }
        previous = Some(p.utilization);
    }
    // Shape scores are 0..=10; the node score range is 0..=100.
    Ok(Shape(
        points
            .into_iter()
            .map(|p| (p.utilization, p.score * 10))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_interpolates_between_points() {
        let shape = parse_shape(vec![
            RawPoint {
                utilization: 0,
                score: 0,
            },
            RawPoint {
                utilization: 100,
                score: 10,
            },
        ])
        .unwrap();
        assert_eq!(shape.at(0), 0);
        assert_eq!(shape.at(55), 55);
        assert_eq!(shape.at(100), 100);
        let falling = parse_shape(vec![
            RawPoint {
                utilization: 20,
                score: 10,
            },
            RawPoint {
                utilization: 80,
                score: 0,
            },
        ])
        .unwrap();
        assert_eq!(falling.at(10), 100, "before the first point");
        assert_eq!(falling.at(50), 50);
        assert_eq!(falling.at(90), 0, "after the last point");
    }

    #[test]
    fn bad_configs_are_refused_with_the_field_named() {
        let cases = [
            (
                r#"{"scoringStrategy":{"type":"Random"}}"#,
                "scoringStrategy.type",
            ),
            (
                r#"{"scoringStrategy":{"resources":[{"name":"cpu","weight":0}]}}"#,
                "weight",
            ),
            (
                r#"{"scoringStrategy":{"type":"RequestedToCapacityRatio"}}"#,
                "shape is required",
            ),
            (r#"{"unknown":1}"#, "unknown field"),
        ];
        for (config, expected) in cases {
            let error = Args::parse(config).unwrap_err();
            assert!(error.contains(expected), "{config}: {error}");
        }
    }
}
