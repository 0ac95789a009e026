//! `wasched bench --scheduler-perf FILE`: kube-scheduler's own benchmark files, run in process.
//!
//! A `performance-config.yaml` of kube's `test/integration/scheduler_perf` lists test cases: a
//! workload template (a sequence of ops such as `createNodes` and `createPods`) and workloads that
//! fill in its `$params`, some with the pods-per-second threshold kube's CI holds kube-scheduler
//! to. Each selected workload runs here twice (the default plugins as WebAssembly, then natively),
//! through the same service, queue and binding path as `wasched serve`, with an in-memory cluster
//! that confirms every write through the event pipeline. As in kube, only the pods of ops with
//! `collectMetrics: true` are timed: from their creation to the binding of the last of them.
//!
//! Ops that only make sense against a real API server are read and mapped onto the in-process
//! run: `churn` and rate-limited `deletePods` do their work between scheduling cycles as wall
//! time passes, `barrier` schedules until no pod is ready, `sleep` keeps scheduling (and
//! churning) for its duration. Feature gates are reported but change nothing: wasched has one
//! implementation of each behaviour.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::storage::v1 as storage;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::binding::{Backend, MemoryBackend};
use crate::clock::Clock;
use crate::config::{Config, DefaultPluginRuntime};
use crate::events::{EventPipeline, Object};
use crate::framework::{Decider, Victim};
use crate::service::{CycleResult, Sequencer, Service};

/// The metric a workload's threshold applies to unless it names another.
const THROUGHPUT: &str = "SchedulingThroughput";

/// The opcodes this runner understands.
const OPCODES: [&str; 9] = [
    "createNodes",
    "createNamespaces",
    "createPods",
    "createPodSets",
    "createAny",
    "churn",
    "barrier",
    "deletePods",
    "sleep",
];

/// One test case of a file, its ops checked and its templates read.
#[derive(Debug)]
pub struct TestCase {
    /// The test case's name.
    pub name: String,
    /// Its labels, which every workload has too.
    pub labels: Vec<String>,
    /// Feature gates it sets (reported, not applied).
    pub feature_gates: BTreeMap<String, bool>,
    /// Its `schedulerConfigPath`, resolved against the file's directory.
    pub scheduler_config: Option<PathBuf>,
    ops: Vec<Op>,
    /// Its workloads.
    pub workloads: Vec<Workload>,
}

/// One workload of a test case: the values of the template's parameters.
#[derive(Debug)]
pub struct Workload {
    /// The workload's name.
    pub name: String,
    /// Its own labels.
    pub labels: Vec<String>,
    /// Feature gates it sets (reported, not applied).
    pub feature_gates: BTreeMap<String, bool>,
    /// `$name` values.
    pub params: BTreeMap<String, usize>,
    /// Pods per second kube's CI requires, when its threshold is on scheduling throughput.
    pub threshold: Option<f64>,
    /// The metric the threshold is on.
    pub threshold_metric: String,
}

/// A count given as a number or as `$param`.
#[derive(Debug, Clone)]
enum Count {
    Fixed(usize),
    Param(String),
}

impl Count {
    fn from_fields(count: usize, param: Option<String>) -> anyhow::Result<Count> {
        match param {
            Some(p) => match p.strip_prefix('$') {
                Some(name) if !name.is_empty() => Ok(Count::Param(name.to_string())),
                _ => bail!("countParam {p:?} must name a parameter as `$name`"),
            },
            None => Ok(Count::Fixed(count)),
        }
    }

    fn resolve(&self, workload: &Workload, used: &mut HashSet<String>) -> anyhow::Result<usize> {
        match self {
            Count::Fixed(n) => Ok(*n),
            Count::Param(name) => {
                used.insert(name.clone());
                workload
                    .params
                    .get(name)
                    .copied()
                    .ok_or_else(|| anyhow!("parameter {name} is undefined"))
            }
        }
    }
}

/// How created nodes differ from their template.
#[derive(Debug, Clone, Default)]
enum NodeStrategy {
    #[default]
    Trivial,
    /// `labelNodePrepareStrategy`: the label's values round robin over the nodes.
    Label { key: String, values: Vec<String> },
    /// `uniqueNodeLabelStrategy`: a label with a value of its own on each node.
    UniqueLabel { key: String },
    /// `nodeAllocatableStrategy`: allocatable quantities, and CSI drivers' volume limits.
    Allocatable {
        allocatable: BTreeMap<String, String>,
        csi: BTreeMap<String, Option<i32>>,
    },
}

#[derive(Debug, Clone)]
struct CreatePods {
    count: Count,
    collect_metrics: bool,
    namespace: Option<String>,
    template: Arc<Template>,
    skip_wait: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChurnMode {
    Create,
    Recreate,
}

#[derive(Debug, Clone)]
enum Op {
    CreateNodes {
        count: Count,
        template: Arc<Template>,
        strategy: NodeStrategy,
    },
    CreateNamespaces {
        prefix: String,
        count: Count,
        template: Option<Arc<Template>>,
    },
    CreatePods(CreatePods),
    CreatePodSets {
        count: Count,
        namespace_prefix: String,
        pods: CreatePods,
    },
    CreateAny {
        count: Count,
        namespace: Option<String>,
        template: Arc<Template>,
    },
    Churn {
        mode: ChurnMode,
        number: usize,
        interval: Duration,
        namespace: Option<String>,
        templates: Vec<Arc<Template>>,
    },
    Barrier,
    DeletePods {
        namespace: String,
        selector: BTreeMap<String, String>,
        per_second: usize,
        skip_wait: bool,
    },
    Sleep(Duration),
}

/// An object template file: read once, rendered per object when it uses `{{.Index}}`-style
/// fields.
#[derive(Debug)]
struct Template {
    path: PathBuf,
    text: String,
    /// The object, when the text has no template fields.
    object: Option<Object>,
}

impl Template {
    fn load(path: &Path) -> anyhow::Result<Template> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read template {}", path.display()))?;
        let mut template = Template {
            path: path.to_path_buf(),
            text,
            object: None,
        };
        if !template.text.contains("{{") {
            template.object = Some(template.parse(&template.text)?);
        } else {
            // Rendered once now, so that a template that cannot render is refused before any
            // workload runs.
            template.render(0, 1)?;
        }
        Ok(template)
    }

    /// The object for the `index`th of `count` objects.
    fn render(&self, index: usize, count: usize) -> anyhow::Result<Object> {
        if let Some(object) = &self.object {
            return Ok(object.clone());
        }
        let mut text = String::with_capacity(self.text.len());
        let mut rest = self.text.as_str();
        while let Some(open) = rest.find("{{") {
            text.push_str(&rest[..open]);
            let after = &rest[open + 2..];
            let close = after
                .find("}}")
                .ok_or_else(|| anyhow!("{}: a `{{{{` without `}}}}`", self.path.display()))?;
            let field = after[..close]
                .trim()
                .trim_start_matches('-')
                .trim_end_matches('-');
            match field.trim() {
                ".Index" => text.push_str(&index.to_string()),
                ".Count" => text.push_str(&count.to_string()),
                other => bail!(
                    "{}: template field `{{{{{other}}}}}` is not one wasched renders (it renders {{{{.Index}}}} and {{{{.Count}}}})",
                    self.path.display()
                ),
            }
            rest = &after[close + 2..];
        }
        text.push_str(rest);
        self.parse(&text)
    }

    /// The one object of `text`. Templates name objects by `generateName`, which a dump never
    /// does: a placeholder name lets the dump reader check the rest.
    fn parse(&self, text: &str) -> anyhow::Result<Object> {
        let documents = crate::input::yaml_documents(text)
            .map_err(|e| anyhow!("{}: {e}", self.path.display()))?;
        let mut documents: Vec<Value> = documents.into_iter().filter(|d| !d.is_null()).collect();
        if documents.len() != 1 {
            bail!(
                "{}: a template holds one object, this one holds {}",
                self.path.display(),
                documents.len()
            );
        }
        let mut value = documents.remove(0);
        let metadata = value
            .as_object_mut()
            .ok_or_else(|| anyhow!("{}: not an object", self.path.display()))?
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(meta) = metadata.as_object_mut() {
            if !meta.contains_key("name") {
                let prefix = meta
                    .get("generateName")
                    .and_then(Value::as_str)
                    .unwrap_or("object-")
                    .to_string();
                meta.insert("name".into(), Value::String(format!("{prefix}0")));
            }
        }
        let json = serde_json::to_string(&value)?;
        let cluster = crate::input::parse_text(&json, true, &self.path)?;
        if let Some(kind) = cluster.skipped.keys().next() {
            bail!(
                "{}: a {kind}, which wasched does not keep",
                self.path.display()
            );
        }
        cluster
            .into_objects()
            .pop()
            .ok_or_else(|| anyhow!("{}: holds no object", self.path.display()))
    }

    fn generate_name(object: &Object) -> String {
        let meta = object.metadata();
        meta.generate_name
            .clone()
            .or_else(|| meta.name.clone().map(|n| format!("{n}-")))
            .unwrap_or_else(|| "object-".to_string())
    }
}

/// Reads a `performance-config.yaml` and every template it names.
///
/// # Errors
/// The file or a template cannot be read, an op has an unknown opcode or field, or a value is
/// out of range; the error names the test case and op.
pub fn load(path: &Path) -> anyhow::Result<Vec<TestCase>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let documents =
        crate::input::yaml_documents(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let mut templates = Templates::default();
    let mut cases = Vec::new();
    for document in documents.into_iter().filter(|d| !d.is_null()) {
        let Value::Array(items) = document else {
            bail!("{}: expected a list of test cases", path.display());
        };
        for (index, item) in items.into_iter().enumerate() {
            let name = item
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("test case {index}"), str::to_string);
            let case = parse_case(item, base, &mut templates)
                .with_context(|| format!("{}: {name}", path.display()))?;
            cases.push(case);
        }
    }
    Ok(cases)
}

#[derive(Default)]
struct Templates(HashMap<PathBuf, Arc<Template>>);

impl Templates {
    fn get(&mut self, base: &Path, relative: &str) -> anyhow::Result<Arc<Template>> {
        let path = base.join(relative);
        if let Some(t) = self.0.get(&path) {
            return Ok(t.clone());
        }
        let template = Arc::new(Template::load(&path)?);
        self.0.insert(path, template.clone());
        Ok(template)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCase {
    name: String,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    metrics_collector_config: Option<Value>,
    workload_template: Vec<Value>,
    #[serde(default)]
    workloads: Vec<RawWorkload>,
    #[serde(default)]
    scheduler_config_path: Option<String>,
    #[serde(default)]
    default_pod_template_path: Option<String>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    default_threshold_metric_selector: Option<RawSelector>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawWorkload {
    name: String,
    #[serde(default)]
    params: BTreeMap<String, usize>,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    feature_gates: BTreeMap<String, bool>,
    #[serde(default)]
    threshold: f64,
    #[serde(default)]
    threshold_metric_selector: Option<RawSelector>,
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSelector {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    expect_lower: bool,
}

fn parse_case(value: Value, base: &Path, templates: &mut Templates) -> anyhow::Result<TestCase> {
    let raw: RawCase = typed(value)?;
    let _ = raw.metrics_collector_config;
    let default_pods = raw
        .default_pod_template_path
        .as_deref()
        .map(|p| templates.get(base, p))
        .transpose()?;
    let mut ops = Vec::new();
    for (index, op) in raw.workload_template.into_iter().enumerate() {
        let opcode = op
            .get("opcode")
            .and_then(Value::as_str)
            .unwrap_or("<none>")
            .to_string();
        let op = parse_op(op, base, default_pods.as_ref(), templates)
            .with_context(|| format!("workloadTemplate[{index}] ({opcode})"))?;
        ops.push(op);
    }
    let mut names = HashSet::new();
    let mut workloads = Vec::new();
    for w in raw.workloads {
        if !names.insert(w.name.clone()) {
            bail!("workload name {} is not unique", w.name);
        }
        if w.threshold < 0.0 || !w.threshold.is_finite() {
            bail!("{}: threshold {} must be 0 or more", w.name, w.threshold);
        }
        let selector = w
            .threshold_metric_selector
            .or_else(|| raw.default_threshold_metric_selector.clone());
        let metric = selector.map_or_else(|| THROUGHPUT.to_string(), |s| s.name);
        workloads.push(Workload {
            threshold: (w.threshold > 0.0 && metric == THROUGHPUT).then_some(w.threshold),
            threshold_metric: metric,
            name: w.name,
            labels: w.labels,
            feature_gates: w.feature_gates,
            params: w.params,
        });
    }
    Ok(TestCase {
        name: raw.name,
        labels: raw.labels,
        feature_gates: raw.feature_gates,
        scheduler_config: raw.scheduler_config_path.map(|p| base.join(p)),
        ops,
        workloads,
    })
}

/// `value` as `T`, with serde's message (which names an unknown field and the known ones).
fn typed<T: DeserializeOwned>(value: Value) -> anyhow::Result<T> {
    serde_json::from_value(value).map_err(|e| anyhow!("{e}"))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCreateNodes {
    #[allow(dead_code)]
    opcode: String,
    #[serde(default)]
    count: usize,
    count_param: Option<String>,
    node_template_path: Option<String>,
    node_allocatable_strategy: Option<RawAllocatable>,
    label_node_prepare_strategy: Option<RawLabelStrategy>,
    unique_node_label_strategy: Option<RawUniqueLabel>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawAllocatable {
    #[serde(default)]
    node_allocatable: BTreeMap<String, String>,
    #[serde(default)]
    csi_node_allocatable: BTreeMap<String, RawVolumeResources>,
    #[serde(default)]
    migrated_plugins: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolumeResources {
    count: Option<i32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawLabelStrategy {
    label_key: String,
    label_values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawUniqueLabel {
    label_key: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCreateNamespaces {
    #[allow(dead_code)]
    opcode: String,
    prefix: String,
    #[serde(default)]
    count: usize,
    count_param: Option<String>,
    namespace_template_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCreatePods {
    #[allow(dead_code)]
    opcode: String,
    #[serde(default)]
    count: usize,
    count_param: Option<String>,
    #[serde(default)]
    collect_metrics: bool,
    namespace: Option<String>,
    pod_template_path: Option<String>,
    #[serde(default)]
    skip_wait_to_completion: bool,
    persistent_volume_template_path: Option<String>,
    persistent_volume_claim_template_path: Option<String>,
    #[serde(default)]
    delete_pods_per_second: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCreatePodSets {
    #[allow(dead_code)]
    opcode: String,
    #[serde(default)]
    count: usize,
    count_param: Option<String>,
    namespace_prefix: String,
    create_pods_op: Value,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCreateAny {
    #[allow(dead_code)]
    opcode: String,
    #[serde(default)]
    count: Option<usize>,
    count_param: Option<String>,
    namespace: Option<String>,
    template_path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawChurn {
    #[allow(dead_code)]
    opcode: String,
    mode: String,
    #[serde(default)]
    number: usize,
    #[serde(default)]
    interval_milliseconds: Option<u64>,
    namespace: Option<String>,
    template_paths: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawBarrier {
    #[allow(dead_code)]
    opcode: String,
    #[serde(default)]
    #[allow(dead_code)]
    namespaces: Vec<String>,
    #[serde(default)]
    stage_requirement: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    label_selector: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawDeletePods {
    #[allow(dead_code)]
    opcode: String,
    namespace: String,
    #[serde(default)]
    label_selector: BTreeMap<String, String>,
    #[serde(default)]
    delete_pods_per_second: usize,
    #[serde(default)]
    skip_wait_to_completion: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawSleep {
    #[allow(dead_code)]
    opcode: String,
    duration: String,
}

fn parse_op(
    value: Value,
    base: &Path,
    default_pods: Option<&Arc<Template>>,
    templates: &mut Templates,
) -> anyhow::Result<Op> {
    let opcode = value
        .get("opcode")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("an op needs an `opcode`"))?
        .to_string();
    Ok(match opcode.as_str() {
        "createNodes" => {
            let raw: RawCreateNodes = typed(value)?;
            let strategies = usize::from(raw.node_allocatable_strategy.is_some())
                + usize::from(raw.label_node_prepare_strategy.is_some())
                + usize::from(raw.unique_node_label_strategy.is_some());
            if strategies > 1 {
                bail!("at most one node strategy may be set");
            }
            let strategy = if let Some(s) = raw.label_node_prepare_strategy {
                if s.label_values.is_empty() {
                    bail!("labelNodePrepareStrategy needs at least one labelValues entry");
                }
                NodeStrategy::Label {
                    key: s.label_key,
                    values: s.label_values,
                }
            } else if let Some(s) = raw.unique_node_label_strategy {
                NodeStrategy::UniqueLabel { key: s.label_key }
            } else if let Some(s) = raw.node_allocatable_strategy {
                if !s.migrated_plugins.is_empty() {
                    bail!("nodeAllocatableStrategy.migratedPlugins (in-tree volume plugins migrated to CSI) is not supported: wasched knows CSI drivers only");
                }
                NodeStrategy::Allocatable {
                    allocatable: s.node_allocatable,
                    csi: s
                        .csi_node_allocatable
                        .into_iter()
                        .map(|(driver, r)| (driver, r.count))
                        .collect(),
                }
            } else {
                NodeStrategy::Trivial
            };
            let template = match raw.node_template_path {
                Some(p) => templates.get(base, &p)?,
                None => Arc::new(default_node_template()),
            };
            Op::CreateNodes {
                count: Count::from_fields(raw.count, raw.count_param)?,
                template,
                strategy,
            }
        }
        "createNamespaces" => {
            let raw: RawCreateNamespaces = typed(value)?;
            Op::CreateNamespaces {
                prefix: raw.prefix,
                count: Count::from_fields(raw.count, raw.count_param)?,
                template: raw
                    .namespace_template_path
                    .map(|p| templates.get(base, &p))
                    .transpose()?,
            }
        }
        "createPods" => Op::CreatePods(create_pods(value, base, default_pods, templates)?),
        "createPodSets" => {
            let raw: RawCreatePodSets = typed(value)?;
            let pods = create_pods(raw.create_pods_op, base, default_pods, templates)
                .context("createPodsOp")?;
            Op::CreatePodSets {
                count: Count::from_fields(raw.count, raw.count_param)?,
                namespace_prefix: raw.namespace_prefix,
                pods,
            }
        }
        "createAny" => {
            let raw: RawCreateAny = typed(value)?;
            Op::CreateAny {
                count: Count::from_fields(raw.count.unwrap_or(1), raw.count_param)?,
                namespace: raw.namespace,
                template: templates.get(base, &raw.template_path)?,
            }
        }
        "churn" => {
            let raw: RawChurn = typed(value)?;
            let mode = match raw.mode.as_str() {
                "create" => ChurnMode::Create,
                "recreate" => ChurnMode::Recreate,
                other => bail!("invalid mode: {other}. must be one of [recreate create]"),
            };
            if mode == ChurnMode::Recreate && raw.number == 0 {
                bail!("number cannot be 0 when mode is recreate");
            }
            if raw.template_paths.is_empty() {
                bail!("at least one template spec file needs to be specified");
            }
            let templates = raw
                .template_paths
                .iter()
                .map(|p| templates.get(base, p))
                .collect::<anyhow::Result<Vec<_>>>()?;
            for t in &templates {
                if let Some(object) = &t.object {
                    if !matches!(
                        object,
                        Object::Node(_) | Object::Pod(_) | Object::Service(_)
                    ) {
                        bail!(
                            "{}: churn creates Nodes, Pods and Services, not a {}",
                            t.path.display(),
                            object.kind().name()
                        );
                    }
                }
            }
            Op::Churn {
                mode,
                number: raw.number,
                interval: Duration::from_millis(raw.interval_milliseconds.unwrap_or(500).max(1)),
                namespace: raw.namespace,
                templates,
            }
        }
        "barrier" => {
            let raw: RawBarrier = typed(value)?;
            match raw.stage_requirement.as_deref() {
                None | Some("Scheduled" | "Attempted") => {}
                Some(other) => {
                    bail!("stageRequirement {other:?} must be Scheduled or Attempted")
                }
            }
            Op::Barrier
        }
        "deletePods" => {
            let raw: RawDeletePods = typed(value)?;
            Op::DeletePods {
                namespace: raw.namespace,
                selector: raw.label_selector,
                per_second: raw.delete_pods_per_second,
                skip_wait: raw.skip_wait_to_completion,
            }
        }
        "sleep" => {
            let raw: RawSleep = typed(value)?;
            Op::Sleep(go_duration(&raw.duration)?)
        }
        other => bail!(
            "opcode {other:?} is not one wasched bench runs (it runs {})",
            OPCODES.join(", ")
        ),
    })
}

fn create_pods(
    value: Value,
    base: &Path,
    default_pods: Option<&Arc<Template>>,
    templates: &mut Templates,
) -> anyhow::Result<CreatePods> {
    let raw: RawCreatePods = typed(value)?;
    if raw.collect_metrics && raw.skip_wait_to_completion {
        bail!("collectMetrics and skipWaitToCompletion cannot be true at the same time");
    }
    if raw.persistent_volume_template_path.is_some()
        || raw.persistent_volume_claim_template_path.is_some()
    {
        bail!("persistentVolumeTemplatePath and persistentVolumeClaimTemplatePath are not supported yet: give the volumes as createAny ops");
    }
    if raw.delete_pods_per_second > 0 {
        bail!("deletePodsPerSecond on createPods is not supported yet: use a deletePods op");
    }
    let template = match raw.pod_template_path {
        Some(p) => templates.get(base, &p)?,
        None => default_pods.cloned().ok_or_else(|| {
            anyhow!("no podTemplatePath, and the test case has no defaultPodTemplatePath")
        })?,
    };
    if let Some(object) = &template.object {
        if !matches!(object, Object::Pod(_)) {
            bail!(
                "{}: a pod template holds a {}",
                template.path.display(),
                object.kind().name()
            );
        }
    }
    Ok(CreatePods {
        count: Count::from_fields(raw.count, raw.count_param)?,
        collect_metrics: raw.collect_metrics,
        namespace: raw.namespace,
        template,
        skip_wait: raw.skip_wait_to_completion,
    })
}

/// kube's node when an op names no template (`scheduler_perf`'s `makeBaseNode`).
fn default_node_template() -> Template {
    let node: core::Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sample-node-0", "generateName": "sample-node-"},
        "status": {
            "capacity": {"pods": "110", "cpu": "4", "memory": "32Gi"},
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]
        }
    }))
    .expect("a valid node");
    Template {
        path: PathBuf::from("<default node>"),
        text: String::new(),
        object: Some(Object::Node(Box::new(node))),
    }
}

/// A Go duration (`1s`, `500ms`, `1m30s`).
fn go_duration(text: &str) -> anyhow::Result<Duration> {
    let mut total = 0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        bail!("duration {text:?} is empty");
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| anyhow!("invalid duration {text:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => bail!("invalid duration {text:?}: units are ns, us, ms, s, m, h"),
        };
        total += number * scale;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_secs_f64(total))
}

/// Whether a workload with `labels` passes `filter` (comma-separated; `-label` must be absent,
/// `label` or `+label` present), as scheduler_perf's label filters.
pub fn enabled(filter: &str, labels: &[&str]) -> bool {
    filter
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty())
        .all(|f| match f.strip_prefix('-') {
            Some(absent) => !labels.contains(&absent),
            None => labels.contains(&f.strip_prefix('+').unwrap_or(f)),
        })
}

/// One runtime's figures for a workload.
#[derive(Debug, Clone, Serialize)]
pub struct PerfRun {
    /// `wasm` or `native`.
    pub runtime: &'static str,
    /// Measured pods per second: the measured pods placed over the time from their creation to
    /// the last one's binding.
    pub pods_per_second: f64,
    /// Measured pods placed.
    pub placed: usize,
    /// Measured pods left unplaced when no pod was ready any more.
    pub unplaced: usize,
    /// Cycles (of any op's pods) that preempted: evicted pods to make room.
    pub preemptions: usize,
    /// The measured time, in seconds.
    pub measured_seconds: f64,
    /// The whole workload's wall time, setup included, in seconds.
    pub total_seconds: f64,
}

/// A workload's report.
#[derive(Debug, Clone, Serialize)]
pub struct PerfReport {
    /// The file it came from.
    pub file: String,
    /// `TestCase/Workload`.
    pub workload: String,
    /// Nodes created.
    pub nodes: usize,
    /// Pods of the ops with `collectMetrics`.
    pub measured_pods: usize,
    /// Pods per second kube's CI requires of kube-scheduler, if the workload has a threshold.
    pub threshold: Option<f64>,
    /// The metric of the threshold (`SchedulingThroughput` unless the file names another, in
    /// which case `threshold` is empty: only throughput is measured here).
    pub threshold_metric: String,
    /// Feature gates the file sets for the workload, which change nothing here.
    pub feature_gates_not_applied: BTreeMap<String, bool>,
    /// The run with the default plugins as WebAssembly (the median of `--rounds`).
    pub wasm: PerfRun,
    /// The run with the default plugins linked natively.
    pub native: PerfRun,
    /// WASM pods/s over native pods/s.
    pub wasm_native_ratio: Option<f64>,
    /// WASM pods/s over the threshold.
    pub wasm_over_threshold: Option<f64>,
    /// Per round, WASM and native pods per second.
    pub rounds: Vec<(f64, f64)>,
}

/// The `wasched bench --scheduler-perf` options.
pub struct Options<'a> {
    /// The `performance-config.yaml` files.
    pub files: &'a [PathBuf],
    /// Label filter.
    pub label_filter: &'a str,
    /// Only workloads whose `TestCase/Workload` contains this.
    pub workload: Option<&'a str>,
    /// A configuration to schedule with instead of each test case's.
    pub config: Option<&'a Path>,
    /// Tie-breaking seed.
    pub seed: u64,
    /// Filter/score threads.
    pub threads: usize,
    /// Runs of each runtime.
    pub rounds: usize,
    /// JSON lines instead of a table.
    pub json: bool,
}

/// Runs every selected workload of every file and prints a line for each.
///
/// # Errors
/// A file cannot be read or holds what this runner refuses, a configuration does not load, or a
/// workload's parameters do not fit its template.
pub fn run(options: &Options) -> anyhow::Result<()> {
    let mut selected = Vec::new();
    for file in options.files {
        for case in load(file)? {
            let case = Arc::new(case);
            for index in 0..case.workloads.len() {
                let w = &case.workloads[index];
                let name = format!("{}/{}", case.name, w.name);
                let labels: Vec<&str> = case
                    .labels
                    .iter()
                    .chain(&w.labels)
                    .map(String::as_str)
                    .collect();
                if !enabled(options.label_filter, &labels)
                    || options.workload.is_some_and(|p| !name.contains(p))
                {
                    continue;
                }
                // Parameters are checked before anything runs, so that a typo in the last
                // workload does not surface after an hour of the others.
                plan(&case, w).with_context(|| format!("{}: {name}", file.display()))?;
                selected.push((file.clone(), case.clone(), index));
            }
        }
    }
    if selected.is_empty() {
        bail!(
            "no workload matches --label-filter {:?}{}",
            options.label_filter,
            options
                .workload
                .map_or(String::new(), |w| format!(" and --workload {w:?}"))
        );
    }
    if !options.json {
        println!(
            "{:<58} {:>6} {:>7} {:>9} {:>10} {:>10} {:>7} {:>9}",
            "WORKLOAD", "NODES", "PODS", "THRESHOLD", "WASM/s", "NATIVE/s", "W/N", "W/THRESH"
        );
    }
    for (file, case, index) in selected {
        let report = run_workload(&file, &case, index, options)?;
        if options.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_row(&report);
        }
    }
    Ok(())
}

fn print_row(r: &PerfReport) {
    let fixed = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |v| format!("{v:.d$}"));
    let unplaced = match (r.wasm.unplaced, r.native.unplaced) {
        (0, 0) => String::new(),
        (w, n) => format!("  ({w} / {n} measured pods unplaced)"),
    };
    let below = match r.wasm_over_threshold {
        Some(x) if x < 1.0 => "  BELOW THRESHOLD",
        _ => "",
    };
    println!(
        "{:<58} {:>6} {:>7} {:>9} {:>10.0} {:>10.0} {:>7} {:>9}{unplaced}{below}",
        r.workload,
        r.nodes,
        r.measured_pods,
        fixed(r.threshold, 0),
        r.wasm.pods_per_second,
        r.native.pods_per_second,
        fixed(r.wasm_native_ratio, 2),
        fixed(r.wasm_over_threshold, 1),
    );
}

/// A workload's ops with its parameters filled in, and what they create.
struct Plan {
    ops: Vec<Op>,
    /// Per op, its count (of sets, for createPodSets).
    counts: Vec<usize>,
    /// Per createPodSets op, the pods of each set.
    per_set: Vec<usize>,
    nodes: usize,
    measured: usize,
}

fn plan(case: &TestCase, workload: &Workload) -> anyhow::Result<Plan> {
    let mut used = HashSet::new();
    let mut counts = Vec::new();
    let mut per_sets = Vec::new();
    let (mut nodes, mut measured) = (0, 0);
    for op in &case.ops {
        let count = match op {
            Op::CreateNodes { count, .. } => {
                let n = count.resolve(workload, &mut used)?;
                nodes += n;
                n
            }
            Op::CreateNamespaces { count, .. } | Op::CreateAny { count, .. } => {
                count.resolve(workload, &mut used)?
            }
            Op::CreatePods(pods) => {
                let n = pods.count.resolve(workload, &mut used)?;
                if pods.collect_metrics {
                    measured += n;
                }
                n
            }
            Op::CreatePodSets { count, pods, .. } => {
                let sets = count.resolve(workload, &mut used)?;
                let per_set = pods.count.resolve(workload, &mut used)?;
                if pods.collect_metrics {
                    measured += sets * per_set;
                }
                per_sets.push(per_set);
                sets
            }
            Op::Churn { .. } | Op::Barrier | Op::DeletePods { .. } | Op::Sleep(_) => 0,
        };
        if !matches!(op, Op::CreatePodSets { .. }) {
            per_sets.push(0);
        }
        counts.push(count);
    }
    let unused: Vec<&String> = workload
        .params
        .keys()
        .filter(|k| !used.contains(*k))
        .collect();
    if !unused.is_empty() {
        bail!(
            "the parameters {unused:?} are defined on workload {}, but unused",
            workload.name
        );
    }
    Ok(Plan {
        ops: case.ops.clone(),
        counts,
        per_set: per_sets,
        nodes,
        measured,
    })
}

fn run_workload(
    file: &Path,
    case: &TestCase,
    index: usize,
    options: &Options,
) -> anyhow::Result<PerfReport> {
    let workload = &case.workloads[index];
    let name = format!("{}/{}", case.name, workload.name);
    let plan = plan(case, workload)?;
    let config_file = options.config.or(case.scheduler_config.as_deref());
    let mut wasm_runs = Vec::new();
    let mut native_runs = Vec::new();
    for _ in 0..options.rounds {
        for runtime in [DefaultPluginRuntime::Wasm, DefaultPluginRuntime::Native] {
            let run = run_plan(&plan, config_file, runtime, options)
                .with_context(|| format!("{}: {name}", file.display()))?;
            match runtime {
                DefaultPluginRuntime::Wasm => wasm_runs.push(run),
                DefaultPluginRuntime::Native => native_runs.push(run),
            }
        }
    }
    let rounds = wasm_runs
        .iter()
        .zip(&native_runs)
        .map(|(w, n)| (w.pods_per_second, n.pods_per_second))
        .collect();
    let wasm = median(wasm_runs);
    let native = median(native_runs);
    let mut feature_gates = case.feature_gates.clone();
    feature_gates.extend(workload.feature_gates.clone());
    Ok(PerfReport {
        file: file.display().to_string(),
        workload: name,
        nodes: plan.nodes,
        measured_pods: plan.measured,
        threshold: workload.threshold,
        threshold_metric: workload.threshold_metric.clone(),
        feature_gates_not_applied: feature_gates,
        wasm_native_ratio: (native.pods_per_second > 0.0)
            .then(|| wasm.pods_per_second / native.pods_per_second),
        wasm_over_threshold: workload.threshold.map(|t| wasm.pods_per_second / t),
        wasm,
        native,
        rounds,
    })
}

fn median(mut runs: Vec<PerfRun>) -> PerfRun {
    runs.sort_by(|a, b| a.pods_per_second.total_cmp(&b.pods_per_second));
    runs.swap_remove(runs.len() / 2)
}

/// The in-memory cluster as a backend the runner can add objects to while the service holds it.
struct SharedBackend(Arc<Mutex<MemoryBackend>>);

impl SharedBackend {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryBackend> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Backend for SharedBackend {
    fn bind_volumes(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.lock().bind_volumes(result, node)
    }
    fn bind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.lock().bind_claims(result)
    }
    fn unbind_claims(&mut self, result: &CycleResult) -> Result<(), String> {
        self.lock().unbind_claims(result)
    }
    fn bind(&mut self, result: &CycleResult, node: &str) -> Result<(), String> {
        self.lock().bind(result, node)
    }
    fn evict(&mut self, result: &CycleResult, victim: &Victim) -> Result<(), String> {
        self.lock().evict(result, victim)
    }
    fn record_condition(&mut self, result: &CycleResult) -> Result<bool, String> {
        self.lock().record_condition(result)
    }
}

/// The cluster a workload runs against: the service, and what the ops have created.
struct World {
    service: Service,
    clock: Arc<crate::clock::SystemClock>,
    pipeline: Arc<EventPipeline>,
    sequence: Arc<Sequencer>,
    backend: Arc<Mutex<MemoryBackend>>,
    /// Names handed out per `generateName` prefix.
    generated: HashMap<String, usize>,
    namespaces: HashSet<String>,
    /// Background work (churn, paced deletions) done between cycles.
    background: Vec<Background>,
    /// Measured pods not yet placed.
    measured: HashSet<String>,
    placed: usize,
    last_placed: Option<Instant>,
    preemptions: usize,
}

impl World {
    fn submit(&mut self, object: Object) {
        if let Object::Pod(pod) = &object {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            self.ensure_namespace(&namespace);
        }
        self.backend
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .hold(&object);
        self.pipeline.submit(self.sequence.upsert(object));
    }

    fn delete(&mut self, object: Object) {
        if let Object::Pod(pod) = &object {
            self.backend
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .forget_pod(&crate::k8s::pod_key(pod));
        }
        self.pipeline.submit(self.sequence.delete(object));
    }

    /// Namespaces exist before their pods, as kube's runner creates them first.
    fn ensure_namespace(&mut self, name: &str) {
        if name.is_empty() || !self.namespaces.insert(name.to_string()) {
            return;
        }
        let namespace = core::Namespace {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        self.pipeline
            .submit(self.sequence.upsert(Object::Namespace(Box::new(namespace))));
    }

    /// A fresh name for an object of `template`.
    fn name_for(&mut self, object: &Object) -> String {
        let prefix = Template::generate_name(object);
        let next = self.generated.entry(prefix.clone()).or_default();
        let name = format!("{prefix}{next}");
        *next += 1;
        name
    }

    /// The `index`th object of `count` from `template`, named (unless the template gives a name
    /// without `generateName`) and put in `namespace`.
    fn instance(
        &mut self,
        template: &Template,
        index: usize,
        count: usize,
        namespace: Option<&str>,
    ) -> anyhow::Result<Object> {
        let mut object = template.render(index, count)?;
        let fixed_name = object.metadata().generate_name.is_none();
        if !fixed_name {
            let name = self.name_for(&object);
            object.metadata_mut().name = Some(name);
        }
        if object.kind().is_namespaced() {
            let meta = object.metadata_mut();
            if let Some(ns) = namespace {
                meta.namespace = Some(ns.to_string());
            } else if meta.namespace.is_none() {
                meta.namespace = Some("default".to_string());
            }
        }
        Ok(object)
    }

    /// Cycles until no pod is ready, with background work between them; with measured pods
    /// outstanding, stops once the last is placed. `until` keeps it going (and waiting for
    /// background work) to that moment.
    fn schedule(&mut self, until: Option<Instant>) {
        loop {
            let now = Instant::now();
            self.poll_background(now);
            match self.service.schedule_one() {
                Some(result) => self.count(&result),
                None => match until {
                    Some(end) if now < end => {
                        let wake = self
                            .background
                            .iter()
                            .filter_map(Background::next_due)
                            .min()
                            .unwrap_or(end)
                            .min(end);
                        std::thread::sleep(
                            wake.saturating_duration_since(now)
                                .min(Duration::from_millis(5)),
                        );
                        self.service.apply_events();
                    }
                    _ => break,
                },
            }
        }
        self.service.apply_events();
    }

    fn count(&mut self, result: &CycleResult) {
        if result.outcome.preemption.is_some() {
            self.preemptions += 1;
        }
        if result.outcome.node.is_none() || !result.waiting_on.is_empty() {
            return;
        }
        if self.measured.remove(&result.pod) {
            self.placed += 1;
            self.last_placed = Some(Instant::now());
        }
    }

    fn poll_background(&mut self, now: Instant) {
        if self.background.is_empty() {
            return;
        }
        let mut background = std::mem::take(&mut self.background);
        for work in &mut background {
            work.poll(now, self);
        }
        background.retain(|w| !w.finished());
        // Work started by a poll (none today) would have been pushed onto `self.background`.
        background.append(&mut self.background);
        self.background = background;
    }
}

/// Work that goes on between cycles as wall time passes.
enum Background {
    Churn {
        mode: ChurnMode,
        number: usize,
        interval: Duration,
        namespace: String,
        templates: Vec<Arc<Template>>,
        next: Instant,
        ticks: usize,
        /// Per template, the objects created and not yet deleted (recreate mode: a ring of
        /// `number` slots).
        created: Vec<Vec<Option<Object>>>,
        made: usize,
    },
    Deletions {
        pods: Vec<Object>,
        interval: Duration,
        next: Instant,
    },
}

impl Background {
    fn next_due(&self) -> Option<Instant> {
        match self {
            Background::Churn { next, .. } | Background::Deletions { next, .. } => Some(*next),
        }
    }

    fn finished(&self) -> bool {
        match self {
            Background::Churn {
                mode, number, made, ..
            } => *mode == ChurnMode::Create && *number > 0 && made >= number,
            Background::Deletions { pods, .. } => pods.is_empty(),
        }
    }

    fn poll(&mut self, now: Instant, world: &mut World) {
        match self {
            Background::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
                next,
                ticks,
                created,
                made,
            } => {
                while *next <= now {
                    *next += *interval;
                    match mode {
                        ChurnMode::Create => {
                            if *number > 0 && *made >= *number {
                                return;
                            }
                            for t in templates.iter() {
                                if let Ok(object) = world.instance(t, *made, 0, Some(namespace)) {
                                    world.submit(object);
                                }
                            }
                            *made += 1;
                        }
                        ChurnMode::Recreate => {
                            let slot = *ticks % *number;
                            for (i, t) in templates.iter().enumerate() {
                                match created[i][slot].take() {
                                    Some(object) => world.delete(object),
                                    None => {
                                        if let Ok(object) =
                                            world.instance(t, *ticks, 0, Some(namespace))
                                        {
                                            created[i][slot] = Some(object.clone());
                                            world.submit(object);
                                        }
                                    }
                                }
                            }
                        }
                    }
                    *ticks += 1;
                }
            }
            Background::Deletions {
                pods,
                interval,
                next,
            } => {
                while *next <= now {
                    let Some(pod) = pods.pop() else {
                        return;
                    };
                    world.delete(pod);
                    *next += *interval;
                }
            }
        }
    }
}

fn run_plan(
    plan: &Plan,
    config_file: Option<&Path>,
    runtime: DefaultPluginRuntime,
    options: &Options,
) -> anyhow::Result<PerfRun> {
    let started = Instant::now();
    let mut config = match config_file {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    config.default_plugins = runtime;
    config.parallelism = options.threads;
    let profiles = config.profiles()?;
    let decider = Decider::new(&profiles, options.seed)?;
    let sequence = Arc::new(Sequencer::default());
    let pipeline = Arc::new(EventPipeline::default());
    let backend = Arc::new(Mutex::new(MemoryBackend::new(
        pipeline.clone(),
        sequence.clone(),
        [],
    )));
    let clock = Arc::new(crate::clock::SystemClock::default());
    let service = Service::with_pipeline(
        decider,
        Some(Box::new(SharedBackend(backend.clone()))),
        clock.clone(),
        pipeline.clone(),
    );
    let mut world = World {
        service,
        clock,
        pipeline,
        sequence,
        backend,
        generated: HashMap::new(),
        namespaces: HashSet::new(),
        background: Vec::new(),
        measured: HashSet::new(),
        placed: 0,
        last_placed: None,
        preemptions: 0,
    };
    world.service.warm_up()?;
    let mut measured_time = Duration::ZERO;
    let mut measured_total = 0;
    let mut nodes_made = 0;
    for (index, (op, &count)) in plan.ops.iter().zip(&plan.counts).enumerate() {
        let default_namespace = format!("namespace-{index}");
        match op {
            Op::CreateNodes {
                template, strategy, ..
            } => {
                for i in 0..count {
                    let (node, csi) =
                        make_node(&mut world, template, strategy, nodes_made, i, count)?;
                    nodes_made += 1;
                    if let Some(csi) = csi {
                        world.submit(csi);
                    }
                    world.submit(node);
                }
                world.service.apply_events();
                // Instances learn the new nodes now, not in the first measured cycle.
                world.service.warm_up()?;
            }
            Op::CreateNamespaces {
                prefix, template, ..
            } => {
                for i in 0..count {
                    let name = format!("{prefix}-{i}");
                    let mut namespace = match template {
                        Some(t) => t.render(i, count)?,
                        None => Object::Namespace(Box::default()),
                    };
                    namespace.metadata_mut().name = Some(name.clone());
                    namespace.metadata_mut().generate_name = None;
                    world.namespaces.insert(name);
                    world.submit(namespace);
                }
                world.service.apply_events();
            }
            Op::CreatePods(pods) => {
                let namespace = pods.namespace.clone().unwrap_or(default_namespace);
                let (time, total) = create_pods_op(&mut world, pods, count, &namespace)?;
                measured_time += time;
                measured_total += total;
            }
            Op::CreatePodSets {
                namespace_prefix,
                pods,
                ..
            } => {
                let per_set = plan.per_set[index];
                for set in 0..count {
                    let namespace = format!("{namespace_prefix}-{set}");
                    let (time, total) = create_pods_op(&mut world, pods, per_set, &namespace)?;
                    measured_time += time;
                    measured_total += total;
                }
            }
            Op::CreateAny {
                namespace,
                template,
                ..
            } => {
                for i in 0..count {
                    let object = world.instance(template, i, count, namespace.as_deref())?;
                    world.submit(object);
                }
                world.service.apply_events();
            }
            Op::Churn {
                mode,
                number,
                interval,
                namespace,
                templates,
            } => {
                let namespace = namespace.clone().unwrap_or(default_namespace);
                world.ensure_namespace(&namespace);
                world.background.push(Background::Churn {
                    mode: *mode,
                    number: *number,
                    interval: *interval,
                    namespace,
                    templates: templates.clone(),
                    next: Instant::now(),
                    ticks: 0,
                    created: vec![vec![None; (*number).max(1)]; templates.len()],
                    made: 0,
                });
            }
            Op::Barrier => world.schedule(None),
            Op::DeletePods {
                namespace,
                selector,
                per_second,
                skip_wait,
            } => {
                let pods: Vec<Object> = {
                    let backend = world
                        .backend
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    backend
                        .pods()
                        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
                        .filter(|p| {
                            let labels = p.metadata.labels.as_ref();
                            selector
                                .iter()
                                .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
                        })
                        .map(|p| Object::Pod(Box::new(p.clone())))
                        .collect()
                };
                let mut pods = pods;
                // Deleted in name order, last first (they are popped), whatever the map's order.
                pods.sort_by(|a, b| b.metadata().name.cmp(&a.metadata().name));
                if *per_second == 0 {
                    for pod in pods {
                        world.delete(pod);
                    }
                    world.service.apply_events();
                } else {
                    world.background.push(Background::Deletions {
                        pods,
                        interval: Duration::from_secs_f64(1.0 / *per_second as f64),
                        next: Instant::now(),
                    });
                    if !skip_wait {
                        while world.background.iter().any(
                            |b| matches!(b, Background::Deletions { pods, .. } if !pods.is_empty()),
                        ) {
                            let due = world
                                .background
                                .iter()
                                .filter_map(Background::next_due)
                                .min();
                            world.schedule(due);
                        }
                    }
                }
            }
            Op::Sleep(duration) => world.schedule(Some(Instant::now() + *duration)),
        }
    }
    let pods_per_second = match measured_time.as_secs_f64() {
        t if t > 0.0 => world.placed as f64 / t,
        _ => 0.0,
    };
    Ok(PerfRun {
        runtime: match runtime {
            DefaultPluginRuntime::Wasm => "wasm",
            DefaultPluginRuntime::Native => "native",
        },
        pods_per_second,
        placed: world.placed,
        unplaced: measured_total - world.placed,
        preemptions: world.preemptions,
        measured_seconds: measured_time.as_secs_f64(),
        total_seconds: started.elapsed().as_secs_f64(),
    })
}

/// One createPods op's pods, created in `namespace` and (unless it skips waiting) scheduled;
/// returns the measured time and the number of measured pods.
fn create_pods_op(
    world: &mut World,
    op: &CreatePods,
    count: usize,
    namespace: &str,
) -> anyhow::Result<(Duration, usize)> {
    world.ensure_namespace(namespace);
    // Built before the clock starts: kube's clients send ready objects too.
    let mut pods = Vec::with_capacity(count);
    for i in 0..count {
        pods.push(world.instance(&op.template, i, count, Some(namespace))?);
    }
    if op.skip_wait {
        for pod in pods {
            world.submit(pod);
        }
        world.service.apply_events();
        return Ok((Duration::ZERO, 0));
    }
    if !op.collect_metrics {
        for pod in pods {
            world.submit(pod);
        }
        world.schedule(None);
        return Ok((Duration::ZERO, 0));
    }
    let placed_before = world.placed;
    world.measured = pods
        .iter()
        .map(|p| {
            format!(
                "{}/{}",
                namespace,
                p.metadata().name.as_deref().unwrap_or_default()
            )
        })
        .collect();
    let start = Instant::now();
    for pod in pods {
        world.submit(pod);
    }
    world.schedule_measured();
    let end = match world.last_placed {
        Some(at) if world.placed > placed_before => at,
        _ => start,
    };
    world.measured.clear();
    Ok((end.saturating_duration_since(start), count))
}

impl World {
    /// Cycles until every measured pod is placed, or no pod is ready and none will be: a pod
    /// waiting out its backoff (a preemptor whose victims are gone) or at Permit is waited for,
    /// as kube's runner waits for its pods, but not past [`MAX_IDLE_WAITS`] waits in a row that
    /// place no measured pod.
    fn schedule_measured(&mut self) {
        let mut idle_waits = 0;
        while !self.measured.is_empty() {
            self.poll_background(Instant::now());
            if let Some(result) = self.service.schedule_one() {
                let before = self.measured.len();
                self.count(&result);
                if self.measured.len() < before {
                    idle_waits = 0;
                }
                continue;
            }
            let next = [
                self.service.queue().next_backoff_ready(),
                self.service.waiting().next_deadline(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else { break };
            idle_waits += 1;
            if idle_waits > MAX_IDLE_WAITS {
                break;
            }
            std::thread::sleep(next.saturating_sub(self.clock.now()));
            self.service.release_expired();
            self.service.apply_events();
        }
        self.service.apply_events();
    }
}

/// Waits for a backoff or a Permit deadline, in a row without a measured pod placed, after which
/// the measured pods left are counted as unplaced.
const MAX_IDLE_WAITS: usize = 3;

/// The `ordinal`th node of the workload (the `index`th of its op), with its CSINode when the
/// strategy sets volume limits.
fn make_node(
    world: &mut World,
    template: &Template,
    strategy: &NodeStrategy,
    ordinal: usize,
    index: usize,
    count: usize,
) -> anyhow::Result<(Object, Option<Object>)> {
    let object = world.instance(template, index, count, None)?;
    let Object::Node(mut node) = object else {
        bail!(
            "{}: a node template holds a {}",
            template.path.display(),
            object.kind().name()
        );
    };
    let name = node.metadata.name.clone().unwrap_or_default();
    let labels = node.metadata.labels.get_or_insert_with(Default::default);
    // kube's node preparer creates nodes with the usual hostname label.
    labels
        .entry("kubernetes.io/hostname".to_string())
        .or_insert_with(|| name.clone());
    let mut csi = None;
    match strategy {
        NodeStrategy::Trivial => {}
        NodeStrategy::Label { key, values } => {
            labels.insert(key.clone(), values[ordinal % values.len()].clone());
        }
        NodeStrategy::UniqueLabel { key } => {
            labels.insert(key.clone(), format!("{name}-{ordinal}"));
        }
        NodeStrategy::Allocatable {
            allocatable,
            csi: drivers,
        } => {
            let status = node.status.get_or_insert_with(Default::default);
            let mut merged = status
                .allocatable
                .clone()
                .or_else(|| status.capacity.clone())
                .unwrap_or_default();
            for (resource, quantity) in allocatable {
                merged.insert(
                    resource.clone(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(quantity.clone()),
                );
            }
            status.allocatable = Some(merged);
            if !drivers.is_empty() {
                csi = Some(Object::CSINode(Box::new(storage::CSINode {
                    metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    spec: storage::CSINodeSpec {
                        drivers: drivers
                            .iter()
                            .map(|(driver, count)| storage::CSINodeDriver {
                                name: driver.clone(),
                                node_id: name.clone(),
                                allocatable: Some(storage::VolumeNodeResources { count: *count }),
                                ..Default::default()
                            })
                            .collect(),
                    },
                })));
            }
        }
    }
    crate::k8s::node_info(&node).map_err(|e| anyhow!("{}: {e}", template.path.display()))?;
    Ok((Object::Node(node), csi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filters_follow_scheduler_perf() {
        let labels = ["performance", "short"];
        assert!(enabled("performance", &labels));
        assert!(enabled("+performance,short", &labels));
        assert!(!enabled("performance,-short", &labels));
        assert!(!enabled("integration-test", &labels));
        assert!(enabled("", &labels));
    }

    #[test]
    fn go_durations_are_read_as_go_writes_them() {
        assert_eq!(go_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(go_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(go_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(go_duration("1.5h").unwrap(), Duration::from_secs(5400));
        assert!(go_duration("5 parsecs").is_err());
        assert!(go_duration("").is_err());
    }
}
