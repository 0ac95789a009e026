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
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1 as core;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::DefaultPluginRuntime;
use crate::events::Object;

mod world;

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
            let run = world::run_plan(&plan, config_file, runtime, options)
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
