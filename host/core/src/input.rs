//! Reading cluster dumps: multi-document YAML, `kind: List` (and `PodList`, `NodeList`, ...) and
//! JSON files of Nodes, Pods, PersistentVolumes, PersistentVolumeClaims and StorageClasses, as
//! `kubectl get ... -o yaml|json` prints them.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use serde::de::{DeserializeOwned, DeserializeSeed};
use serde_json::Value;

use crate::events::{Kind, Object};
use crate::k8s;

mod document;
mod yaml_outline;
use document::{Document, DocumentSeed};

/// Where an object came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file.
    pub file: PathBuf,
    /// 1-based document number in the file.
    pub document: usize,
    /// The index in a list's `items`, if the object came from a list.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: document {}", self.file.display(), self.document)?;
        if let Some(item) = self.item {
            write!(f, ", items[{item}]")?;
        }
        Ok(())
    }
}

/// Which pods a read keeps as JSON ([`Cluster::json_pods`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum Compact {
    /// None.
    #[default]
    Nothing,
    /// Those running on a node (not finished).
    RunningPods,
    /// Every pod.
    Pods,
}

/// An input file or object that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {message}")]
pub struct InputError {
    /// File, document and object.
    pub location: String,
    /// What is wrong.
    pub message: String,
}

/// The objects read from the input files, in input order.
#[derive(Debug, Default)]
pub struct Cluster {
    /// Nodes.
    pub nodes: Vec<core::Node>,
    /// Pods (but those in `json_pods`).
    pub pods: Vec<core::Pod>,
    /// Pods kept as their key and JSON, in input order: a typed pod takes several times its
    /// JSON's size. [`load_files_compact`] keeps the pods running on a node so (a large dump is
    /// mostly pods only ever applied once), [`parse_text_compact`] every pod.
    pub json_pods: Vec<(String, Arc<str>)>,
    /// Which pods go to `json_pods`.
    pub compact: Compact,
    /// PersistentVolumes.
    pub volumes: Vec<core::PersistentVolume>,
    /// PersistentVolumeClaims.
    pub claims: Vec<core::PersistentVolumeClaim>,
    /// StorageClasses.
    pub classes: Vec<StorageClass>,
    /// Namespaces.
    pub namespaces: Vec<core::Namespace>,
    /// Services, ReplicationControllers, ReplicaSets and StatefulSets: what kube-scheduler's
    /// default topology spreading selects a pod's peers by.
    pub selectors: Vec<Object>,
    /// PodDisruptionBudgets, which preemption spares pods by.
    pub disruption_budgets: Vec<policy::PodDisruptionBudget>,
    /// CSINodes (the attach limits of the nodes' CSI drivers), CSIDrivers and
    /// CSIStorageCapacities (the room their drivers report).
    pub csi: Vec<Object>,
    /// Dynamic Resource Allocation's DeviceClasses, ResourceSlices, ResourceClaims and
    /// ResourceClaimTemplates (`resource.k8s.io/v1`).
    pub devices: Vec<Object>,
    /// Gangs: PodGroups (`scheduling.x-k8s.io/v1alpha1`).
    pub groups: Vec<Object>,
    /// Objects of other kinds that were skipped, counted by kind.
    pub skipped: BTreeMap<String, usize>,
    /// Files that held no object at all (empty, or only comments): most likely the wrong file.
    pub empty_files: Vec<PathBuf>,
}

impl Cluster {
    /// Objects of the kinds wasched keeps.
    pub fn kept_objects(&self) -> usize {
        self.nodes.len()
            + self.pods.len()
            + self.json_pods.len()
            + self.volumes.len()
            + self.claims.len()
            + self.classes.len()
            + self.namespaces.len()
            + self.selectors.len()
            + self.disruption_budgets.len()
            + self.csi.len()
            + self.devices.len()
            + self.groups.len()
    }

    /// Every kept object, in the order a cluster is best loaded: namespaces, storage, selectors,
    /// nodes, then pods in input order (those kept as JSON first).
    pub fn into_objects(self) -> Vec<Object> {
        self.into_object_iter().collect()
    }

    /// [`Cluster::into_objects`], each pod kept as JSON typed only when the iterator reaches it.
    pub fn into_object_iter(self) -> impl Iterator<Item = Object> + Send {
        let mut objects: Vec<Object> = Vec::new();
        objects.extend(
            self.namespaces
                .into_iter()
                .map(|o| Object::Namespace(Box::new(o))),
        );
        objects.extend(
            self.classes
                .into_iter()
                .map(|o| Object::StorageClass(Box::new(o))),
        );
        objects.extend(
            self.volumes
                .into_iter()
                .map(|o| Object::PersistentVolume(Box::new(o))),
        );
        objects.extend(
            self.claims
                .into_iter()
                .map(|o| Object::PersistentVolumeClaim(Box::new(o))),
        );
        objects.extend(self.selectors);
        objects.extend(
            self.disruption_budgets
                .into_iter()
                .map(|o| Object::PodDisruptionBudget(Box::new(o))),
        );
        objects.extend(self.csi);
        objects.extend(self.devices);
        objects.extend(self.groups);
        let json_pods = self
            .json_pods
            .into_iter()
            .map(|(_, json)| Object::Pod(Box::new(json_pod(&json))));
        objects
            .into_iter()
            .chain(self.nodes.into_iter().map(|o| Object::Node(Box::new(o))))
            .chain(json_pods)
            .chain(self.pods.into_iter().map(|o| Object::Pod(Box::new(o))))
    }

    /// Objects of every kind, skipped ones included.
    fn object_count(&self) -> usize {
        self.kept_objects() + self.skipped.values().sum::<usize>()
    }

    /// One line naming the files that held no object, if any did.
    pub fn empty_files_warning(&self) -> Option<String> {
        let files: Vec<String> = self
            .empty_files
            .iter()
            .map(|f| f.display().to_string())
            .collect();
        (!files.is_empty()).then(|| format!("warning: no objects in {}", files.join(", ")))
    }

    /// One line naming what was skipped, if anything was.
    pub fn skipped_warning(&self) -> Option<String> {
        if self.skipped.is_empty() {
            return None;
        }
        let kinds: Vec<String> = self
            .skipped
            .iter()
            .map(|(kind, n)| format!("{n} {kind}"))
            .collect();
        let read: Vec<&str> = crate::events::Kind::ALL
            .map(crate::events::Kind::name)
            .to_vec();
        Some(format!(
            "warning: skipped {} (wasched reads {})",
            kinds.join(", "),
            read.join(", ")
        ))
    }
}

/// A pod of [`Cluster::json_pods`], typed again.
///
/// # Panics
/// Never for JSON this module wrote from a checked pod.
pub fn json_pod(json: &str) -> core::Pod {
    serde_json::from_str(json).expect("a pod this module serialized")
}

/// [`load_files`], with the pods that run on a node kept as JSON in
/// [`Cluster::json_pods`].
///
/// # Errors
/// As [`load_files`].
pub fn load_files_compact(paths: &[PathBuf]) -> Result<Cluster, InputError> {
    let mut cluster = Cluster {
        compact: Compact::RunningPods,
        ..Cluster::default()
    };
    for path in paths {
        load_file(path, &mut cluster)?;
    }
    Ok(cluster)
}

/// Reads every file into one cluster, checking every object before returning.
///
/// # Errors
/// The first unreadable file, unparsable document or invalid object, with where it is.
pub fn load_files(paths: &[PathBuf]) -> Result<Cluster, InputError> {
    let mut cluster = Cluster::default();
    for path in paths {
        load_file(path, &mut cluster)?;
    }
    Ok(cluster)
}

fn load_file(path: &Path, cluster: &mut Cluster) -> Result<(), InputError> {
    let text = std::fs::read_to_string(path).map_err(|e| InputError {
        location: path.display().to_string(),
        message: format!("cannot read: {e}"),
    })?;
    let is_json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let before = cluster.object_count();
    parse_into(&text, is_json, path, cluster)?;
    if cluster.object_count() == before {
        cluster.empty_files.push(path.to_path_buf());
    }
    Ok(())
}

/// Reads objects from text (JSON, or YAML with any number of documents); `source` names the text
/// in errors.
///
/// # Errors
/// As [`load_files`].
pub fn parse_text(text: &str, is_json: bool, source: &Path) -> Result<Cluster, InputError> {
    let mut cluster = Cluster::default();
    parse_into(text, is_json, source, &mut cluster)?;
    Ok(cluster)
}

/// [`parse_text`], with every pod kept as JSON in [`Cluster::json_pods`].
///
/// # Errors
/// As [`load_files`].
pub fn parse_text_compact(text: &str, is_json: bool, source: &Path) -> Result<Cluster, InputError> {
    let mut cluster = Cluster {
        compact: Compact::Pods,
        ..Cluster::default()
    };
    parse_into(text, is_json, source, &mut cluster)?;
    Ok(cluster)
}

fn parse_into(
    text: &str,
    is_json: bool,
    path: &Path,
    cluster: &mut Cluster,
) -> Result<(), InputError> {
    let at_file = |message: String| InputError {
        location: path.display().to_string(),
        message,
    };
    let origin = |index: usize| Origin {
        file: path.to_path_buf(),
        document: index + 1,
        item: None,
    };
    if is_json {
        let mut reader = serde_json::Deserializer::from_str(without_bom(text));
        let document = DocumentSeed { json: true }
            .deserialize(&mut reader)
            .and_then(|document| reader.end().map(|()| document))
            .map_err(|e| at_file(format!("invalid JSON: {e}")))?;
        return add_document(document, origin(0), cluster);
    }
    // One document at a time, each made objects before the next is read: a dump's documents
    // as JSON values all at once took several times the dump's size.
    for_each_yaml_document(text, |index, document| {
        add_document(document, origin(index), cluster).map_err(Stop::Object)
    })
    .map_err(|stop| match stop {
        Stop::Yaml(e) => at_file(e),
        Stop::Object(e) => e,
    })
}

/// Adds a document's objects, a List's items one at a time.
fn add_document(
    document: Document<'_>,
    origin: Origin,
    cluster: &mut Cluster,
) -> Result<(), InputError> {
    let (fields, items) = match document {
        Document::Other(Value::Null) => return Ok(()),
        Document::Other(value) => return add_object(value, None, origin, cluster),
        Document::Object { fields, items } => (fields, items),
    };
    let item_kind = fields
        .get("kind")
        .and_then(Value::as_str)
        .and_then(|kind| kind.strip_suffix("List"));
    let (Some(items), Some(item_kind)) = (items.as_ref(), item_kind) else {
        let value = Document::Object { fields, items }
            .into_value()
            .map_err(|message| InputError {
                location: origin.to_string(),
                message,
            })?;
        return add_object(value, None, origin, cluster);
    };
    let item_kind = (!item_kind.is_empty()).then_some(item_kind);
    for (i, item) in items.iter().enumerate() {
        let origin = Origin {
            item: Some(i),
            ..origin.clone()
        };
        let value = item.value().map_err(|message| match item.yaml_text() {
            Some(text) => InputError {
                location: origin.file.display().to_string(),
                message: located_yaml_error(text).unwrap_or(message),
            },
            None => InputError {
                location: origin.to_string(),
                message,
            },
        })?;
        add_object(value, item_kind, origin, cluster)?;
    }
    Ok(())
}

/// Why [`for_each_yaml_document`] stopped.
enum Stop<E> {
    /// The text is not YAML (`document N: ...`).
    Yaml(String),
    /// The callback refused a document.
    Object(E),
}

/// Calls `each` with every document of a YAML text (index, document), in order, reading the next
/// only when `each` returns: the documents never all exist at once.
fn for_each_yaml_document<'t, E>(
    text: &'t str,
    each: impl FnMut(usize, Document<'t>) -> Result<(), Stop<E>>,
) -> Result<(), Stop<E>> {
    read_yaml_documents(text, true, each)
}

/// [`for_each_yaml_document`], with Lists outlined only when `outlined`: every document read
/// whole is what the outline must agree with.
fn read_yaml_documents<'t, E>(
    text: &'t str,
    outlined: bool,
    mut each: impl FnMut(usize, Document<'t>) -> Result<(), Stop<E>>,
) -> Result<(), Stop<E>> {
    let text = without_bom(text);
    check_nesting(text).map_err(Stop::Yaml)?;
    // The deserializer holds every event of a document until it is read: a List's items are
    // read from their own text instead, one at a time.
    let outline = if outlined {
        yaml_outline::outline(text)
    } else {
        None
    };
    let Some(outline) = outline else {
        return for_each_whole_yaml_document(text, each);
    };
    for (index, document) in outline.into_iter().enumerate() {
        let document = document::read_outlined(text, document).map_err(|e| {
            Stop::Yaml(
                located_yaml_error(text)
                    .unwrap_or_else(|| format!("document {}: invalid YAML: {e}", index + 1)),
            )
        })?;
        each(index, document)?;
    }
    Ok(())
}

/// The first error in reading a YAML text whole, which names its line in the file: a node read
/// alone from its own text counts lines from its own start.
fn located_yaml_error(text: &str) -> Option<String> {
    match for_each_whole_yaml_document(text, |_, _| Ok::<(), Stop<()>>(())) {
        Err(Stop::Yaml(located)) => Some(located),
        _ => None,
    }
}

/// [`for_each_yaml_document`] with each document read whole.
fn for_each_whole_yaml_document<'t, E>(
    text: &'t str,
    mut each: impl FnMut(usize, Document<'t>) -> Result<(), Stop<E>>,
) -> Result<(), Stop<E>> {
    for (index, document) in yaml_serde::Deserializer::from_str(text).enumerate() {
        let document = DocumentSeed { json: false }
            .deserialize(document)
            .map_err(|e| Stop::Yaml(format!("document {}: invalid YAML: {e}", index + 1)))?;
        each(index, document)?;
    }
    Ok(())
}

/// Deepest nesting of flow collections (`[`, `{`) a YAML text may have. The parser refuses deep
/// nesting itself only after time quadratic in the depth (100,000 `[` took 26 s), so the text is
/// checked first, in one pass; Kubernetes objects nest a few levels, JSON in annotations a few more.
pub const MAX_YAML_NESTING: usize = 256;

/// The text without a leading UTF-8 byte order mark, which editors on Windows write.
pub fn without_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Splits YAML text into its documents as JSON values, an empty document as `null` (so that
/// positions stay document numbers).
///
/// # Errors
/// Nesting deeper than [`MAX_YAML_NESTING`], or the first document that is not valid YAML, as
/// `document N: ...`.
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, String> {
    yaml_documents_read(text, true)
}

/// [`yaml_documents`], with Lists outlined only when `outlined` (see [`read_yaml_documents`]).
fn yaml_documents_read(text: &str, outlined: bool) -> Result<Vec<Value>, String> {
    let mut documents = Vec::new();
    read_yaml_documents(text, outlined, |index, document| {
        let value = document.into_value().map_err(|e| {
            Stop::Yaml(
                located_yaml_error(text).unwrap_or_else(|| format!("document {}: {e}", index + 1)),
            )
        })?;
        documents.push(value);
        Ok::<(), Stop<std::convert::Infallible>>(())
    })
    .map_err(|stop| match stop {
        Stop::Yaml(e) => e,
        Stop::Object(never) => match never {},
    })?;
    Ok(documents)
}

/// Refuses text whose brackets nest deeper than [`MAX_YAML_NESTING`]. Brackets inside quoted
/// strings count too: a balanced JSON string adds only its own depth, and a legitimate object
/// does not come near the limit.
fn check_nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    for (offset, byte) in text.bytes().enumerate() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_YAML_NESTING {
                    let line = crate::util::line_of(text, offset);
                    return Err(format!(
                        "line {line}: collections nested deeper than {MAX_YAML_NESTING} levels"
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

fn add_object(
    mut value: Value,
    kind_from_list: Option<&str>,
    origin: Origin,
    cluster: &mut Cluster,
) -> Result<(), InputError> {
    let kind = value
        .get("kind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| kind_from_list.map(str::to_string));
    let name = value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let error = |message: String| InputError {
        location: match &kind {
            // A name that is refused may hold a newline or be 100,000 characters long.
            Some(kind) if !name.is_empty() => {
                let shown: String = name.chars().take(64).collect();
                format!("{origin} ({kind} {})", shown.escape_debug())
            }
            Some(kind) => format!("{origin} ({kind})"),
            None => origin.to_string(),
        },
        message,
    };
    let Some(kind) = kind.clone() else {
        return Err(error("object has no `kind`".to_string()));
    };
    if let Some(item_kind) = kind.strip_suffix("List") {
        let items = match value.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Err(error("`items` is not a list".to_string())),
        };
        let item_kind = (!item_kind.is_empty()).then_some(item_kind);
        for (i, item) in items.into_iter().enumerate() {
            let origin = Origin {
                item: Some(i),
                ..origin.clone()
            };
            add_object(item, item_kind, origin, cluster)?;
        }
        return Ok(());
    }
    if name.is_empty() {
        return Err(error("object has no `metadata.name`".to_string()));
    }
    k8s::validation::object_meta(&value).map_err(|e| error(e.to_string()))?;
    if let Some(size) = oversized(&value) {
        return Err(error(format!(
            "the object is {size} bytes or more as JSON, past the {MAX_OBJECT_BYTES} bytes an API server accepts"
        )));
    }
    // As the event pipeline does for every object: `kubectl get -o yaml --show-managed-fields`
    // and API server lists carry them, and they would be kept with each running pod's JSON.
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    add_typed(&kind, value, cluster).map_err(error)
}

/// Adds one object of `kind` to the cluster (an unknown kind is counted as skipped).
fn add_typed(kind: &str, value: Value, cluster: &mut Cluster) -> Result<(), String> {
    match kind {
        "Node" => {
            let node: core::Node = typed(value)?;
            k8s::node_info(&node).map_err(|e| e.to_string())?;
            cluster.nodes.push(node);
        }
        "Pod" => {
            let pod: core::Pod = typed(value)?;
            let model = k8s::pod(&pod).map_err(|e| e.to_string())?;
            let compact = match cluster.compact {
                Compact::Nothing => false,
                Compact::RunningPods => !model.node_name.is_empty() && !k8s::is_terminated(&pod),
                Compact::Pods => true,
            };
            if compact {
                let json = serde_json::to_string(&pod).map_err(|e| e.to_string())?;
                cluster.json_pods.push((model.key(), Arc::from(json)));
            } else {
                cluster.pods.push(pod);
            }
        }
        "PersistentVolume" => cluster.volumes.push(typed(value)?),
        "PersistentVolumeClaim" => cluster.claims.push(typed(value)?),
        "StorageClass" => cluster.classes.push(typed(value)?),
        "CSINode" => cluster.csi.push(Object::from(typed::<CSINode>(value)?)),
        "CSIDriver" => cluster.csi.push(Object::from(typed::<CSIDriver>(value)?)),
        "CSIStorageCapacity" => {
            let capacity: CSIStorageCapacity = typed(value)?;
            cluster.csi.push(Object::from(capacity));
        }
        "Namespace" => cluster.namespaces.push(typed(value)?),
        "Service" => {
            let service = typed(value)?;
            cluster.selectors.push(Object::Service(Box::new(service)));
        }
        "ReplicationController" => {
            let controller = typed(value)?;
            cluster
                .selectors
                .push(Object::ReplicationController(Box::new(controller)));
        }
        "ReplicaSet" => {
            let set = typed(value)?;
            cluster.selectors.push(Object::ReplicaSet(Box::new(set)));
        }
        "StatefulSet" => {
            let set = typed(value)?;
            cluster.selectors.push(Object::StatefulSet(Box::new(set)));
        }
        "DeviceClass" | "ResourceSlice" | "ResourceClaim" | "ResourceClaimTemplate" => {
            let kind = Kind::named(kind).expect("a kind of the kinds table");
            let object = Object::from_json(kind, value).map_err(|e| e.to_string())?;
            cluster.devices.push(object);
        }
        "PodGroup" => {
            let object = Object::from_json(Kind::PodGroup, value).map_err(|e| e.to_string())?;
            cluster.groups.push(object);
        }
        "PodDisruptionBudget" => {
            let budget: policy::PodDisruptionBudget = typed(value)?;
            cluster.disruption_budgets.push(budget);
        }
        other => *cluster.skipped.entry(other.to_string()).or_default() += 1,
    }
    Ok(())
}

/// Largest object, as JSON: what etcd accepts in one request by default (`--max-request-bytes`,
/// 1.5 MiB), so the API server of a real cluster never holds a larger one. A larger pod would
/// only cost every plugin that reads it time and memory (a 3.4 MB pod made NodeAffinity's
/// `set-pod` miss its deadline).
pub const MAX_OBJECT_BYTES: usize = 1_572_864;

/// The object's size as JSON when it is past [`MAX_OBJECT_BYTES`], counted without building the
/// text and stopping at the limit.
fn oversized(value: &Value) -> Option<usize> {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            if self.0 > MAX_OBJECT_BYTES {
                return Err(std::io::Error::other("too large"));
            }
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    serde_json::to_writer(&mut counter, value)
        .is_err()
        .then_some(counter.0)
}

/// Deserializes a typed object, naming the field that is wrong.
fn typed<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("wasched-input-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_compact_read_keeps_running_pods_as_json_and_gives_back_the_same_objects() {
        let dir = temp_dir("compact");
        let file = write(
            &dir,
            "cluster.yaml",
            "kind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '4'}}\n---\n\
             kind: Pod\nmetadata: {name: running, namespace: a, labels: {app: x}}\n\
             spec: {nodeName: n1, containers: [{name: c, resources: {requests: {cpu: 100m}}}]}\n---\n\
             kind: Pod\nmetadata: {name: pending}\nspec: {containers: [{name: c}]}\n---\n\
             kind: Pod\nmetadata: {name: done}\nspec: {nodeName: n1, containers: [{name: c}]}\n\
             status: {phase: Succeeded}\n",
        );
        let typed = load_files(std::slice::from_ref(&file)).unwrap();
        let compact = load_files_compact(&[file]).unwrap();
        assert_eq!(compact.json_pods.len(), 1);
        assert_eq!(compact.json_pods[0].0, "a/running");
        // Pending and finished pods stay typed.
        let names: Vec<_> = compact
            .pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["pending", "done"]);
        assert_eq!(compact.kept_objects(), typed.kept_objects());
        assert_eq!(
            json_pod(&compact.json_pods[0].1),
            typed.pods[0],
            "the JSON gives back the pod as read"
        );
    }

    #[test]
    fn managed_fields_are_dropped_as_objects_are_read() {
        let managed = "managedFields: [{manager: kubectl, operation: Apply, fieldsType: FieldsV1, \
                       fieldsV1: {'f:metadata': {'f:labels': {'f:app': {}}}}}]";
        let text = format!(
            "kind: Pod\nmetadata: {{name: running, labels: {{app: x}}, {managed}}}\n\
             spec: {{nodeName: n1, containers: [{{name: c}}]}}\n---\n\
             kind: Pod\nmetadata: {{name: pending, {managed}}}\nspec: {{containers: [{{name: c}}]}}\n"
        );
        let file = write(&temp_dir("managed"), "cluster.yaml", &text);
        let compact = load_files_compact(&[file]).unwrap();
        assert!(!compact.json_pods[0].1.contains("managedFields"));
        assert_eq!(
            json_pod(&compact.json_pods[0].1).metadata.labels.unwrap()["app"],
            "x"
        );
        assert_eq!(compact.pods[0].metadata.managed_fields, None);
    }

    #[test]
    fn reads_multi_document_yaml_lists_and_json() {
        let dir = temp_dir("ok");
        let yaml = write(
            &dir,
            "a.yaml",
            "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- kind: Pod\n  apiVersion: v1\n  metadata: {name: p1}\n  spec: {containers: [{name: c}]}\n- kind: Service\n  metadata: {name: s}\n  spec: {selector: {app: web}}\n- kind: ConfigMap\n  metadata: {name: c}\n",
        );
        let json = write(
            &dir,
            "b.json",
            r#"{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"p2"},"spec":{"containers":[]}}]}"#,
        );
        let cluster = load_files(&[yaml, json]).unwrap();
        assert_eq!(cluster.nodes.len(), 1);
        assert_eq!(
            cluster.pods.len(),
            2,
            "the PodList item takes its kind from the list"
        );
        assert_eq!(
            cluster.selectors.len(),
            1,
            "a Service selects pods to spread"
        );
        assert_eq!(cluster.skipped.get("ConfigMap"), Some(&1));
        let warning = cluster.skipped_warning().unwrap();
        assert!(warning.contains("1 ConfigMap"), "{warning}");
        for kind in crate::events::Kind::ALL {
            assert!(warning.contains(kind.name()), "{warning} names {kind:?}");
        }
        assert_eq!(cluster.empty_files_warning(), None);
        let empty = write(&dir, "empty.yaml", "# nothing here\n---\n");
        let cluster = load_files(std::slice::from_ref(&empty)).unwrap();
        assert_eq!(
            cluster.empty_files_warning(),
            Some(format!("warning: no objects in {}", empty.display()))
        );
    }

    /// kubectl writes a List's `items` before its `kind`, an API server's PodList writes `kind`
    /// first and no kind in its items: read an item at a time, each gives the same objects as
    /// the same objects one per document.
    #[test]
    fn a_list_gives_the_objects_of_its_items_whatever_its_fields_order() {
        let node = r#"{"kind":"Node","metadata":{"name":"n1","labels":{"zone":"a"}}}"#;
        let pod = r#"{"metadata":{"name":"p1"},"spec":{"containers":[{"name":"c"}]}}"#;
        let kind_pod = pod.replacen('{', r#"{"kind":"Pod","#, 1);
        let one_per_document = parse_text(
            &format!("{node}\n---\n{kind_pod}\n"),
            false,
            Path::new("docs.yaml"),
        )
        .unwrap();
        let lists = [
            (
                format!(
                    r#"{{"apiVersion":"v1","items":[{node},{kind_pod}],"kind":"List","metadata":{{}}}}"#
                ),
                true,
            ),
            (
                format!("apiVersion: v1\nitems:\n- {node}\n- {kind_pod}\nkind: List\n"),
                false,
            ),
            (
                format!(r#"{{"kind":"List","items":[{node},{kind_pod}]}}"#),
                true,
            ),
        ];
        for (text, json) in &lists {
            let cluster = parse_text(text, *json, Path::new("list")).unwrap();
            assert_eq!(cluster.nodes, one_per_document.nodes, "{text}");
            assert_eq!(cluster.pods, one_per_document.pods, "{text}");
        }
        for (text, json) in [
            (format!(r#"{{"items":[{pod}],"kind":"PodList"}}"#), true),
            (format!("items:\n- {pod}\nkind: PodList\n"), false),
        ] {
            let cluster = parse_text(&text, json, Path::new("list")).unwrap();
            assert_eq!(cluster.pods, one_per_document.pods, "{text}");
        }

        let refused = |text: &str, json: bool| {
            parse_text(text, json, Path::new("list"))
                .unwrap_err()
                .to_string()
        };
        let error = refused(
            &format!(r#"{{"items":[{node},{{"kind":"Pod"}}],"kind":"List"}}"#),
            true,
        );
        assert!(
            error.contains("items[1]") && error.contains("no `metadata.name`"),
            "{error}"
        );
        let error = refused(r#"{"kind":"List","items":5}"#, true);
        assert!(error.contains("`items` is not a list"), "{error}");
        let error = refused(&format!(r#"{{"items":[{node}]}}"#), true);
        assert!(error.contains("no `kind`"), "{error}");
        let error = refused(&format!(r#"{{"items":[{node}],"kind":"List"}} x"#), true);
        assert!(
            error.contains("invalid JSON: trailing characters"),
            "{error}"
        );
        // An object that is not a List keeps `items` as one of its fields.
        let not_a_list =
            format!(r#"{{"kind":"ConfigMap","metadata":{{"name":"c"}},"items":[{node}]}}"#);
        let cluster = parse_text(&not_a_list, true, Path::new("list")).unwrap();
        assert!(cluster.nodes.is_empty());
        assert_eq!(cluster.skipped.get("ConfigMap"), Some(&1));
    }

    /// Every document of `text` read whole, as the deserializer reads a stream.
    fn yaml_documents_read_whole(text: &str) -> Result<Vec<Value>, String> {
        yaml_documents_read(text, false)
    }

    #[test]
    fn a_yaml_list_read_an_item_at_a_time_reads_as_the_whole_document() {
        let kubectl = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n1\n    labels: {zone: a, \"quoted key\": 'x'}\n    annotations:\n      literal: |\n        line one\n          indented\n\n        after a blank line\n      kept: |+\n        trailing\n\n      stripped: >-\n        folded\n        text\n      multiline: \"first\n        second\"\n      plain: a long\n        plain scalar\n  status:\n    allocatable: {cpu: '64', memory: 256Gi}\n# a comment between items\n-   kind: Pod\n    metadata:\n      name: p1\n    spec:\n      containers:\n      - name: c\n        args: [--x, \"1\"]\n        ports:\n        - containerPort: 80\n      priority: 1e3\n      flags: [yes, no, ~, 0x1F, .inf, 010, +5]\n-\n- just a scalar\n- - nested\n  - sequence\n- {kind: Pod, metadata: {name: flow}}\n- kind: Pod\n  metadata:\n    name: \u{3b1}\u{3b2}\n    labels:\n      \u{3ba}\u{3bb}\u{3b5}\u{3b9}\u{3b4}\u{3af}: \u{3c4}\u{3b9}\u{3bc}\u{3ae}\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
        let indented =
            "kind: PodList\nitems:\n  - metadata: {name: a}\n  - metadata:\n      name: b\n";
        let stream = format!(
            "kind: Node\nmetadata: {{name: n0}}\n---\n{kubectl}...\n---\n---\n# only a comment\n---\n{indented}"
        );
        let many = format!(
            "kind: List\nitems:\n-\n{}- last\n",
            (0..3000)
                .map(|i| format!(
                    "- kind: Pod\n  metadata:\n    name: p{i}\n  spec: {{nodeName: n{}}}\n",
                    i % 7
                ))
                .collect::<String>()
        );
        let crlf = kubectl.replace('\n', "\r\n");
        for text in [
            kubectl,
            indented,
            stream.as_str(),
            many.as_str(),
            crlf.as_str(),
        ] {
            let outline = yaml_outline::outline(text).expect("outlined");
            assert!(
                outline
                    .iter()
                    .any(|d| matches!(d, yaml_outline::DocumentOutline::List { .. })),
                "{text}"
            );
            assert_eq!(
                yaml_documents(text),
                yaml_documents_read_whole(text),
                "{text}"
            );
        }
        let documents = yaml_documents(&stream).unwrap();
        assert_eq!(documents.len(), 5);
        assert_eq!(documents[1]["items"].as_array().unwrap().len(), 7);
        assert_eq!(
            documents[1]["items"][0]["metadata"]["annotations"]["literal"],
            "line one\n  indented\n\nafter a blank line\n"
        );

        // What refers outside an item, or cannot be cut out by lines, is read whole, with the
        // same result; so is anything that is not valid YAML, with the same error.
        for text in [
            "kind: List\nitems:\n- &shared {kind: Pod, metadata: {name: a}}\n- *shared\n",
            "kind: List\nitems:\n- !!map {kind: Pod}\n",
            "%YAML 1.1\n---\nkind: List\nitems:\n- {kind: Pod}\n",
            "kind: List\nitems: [{kind: Pod}, {kind: Node}]\n",
            "{kind: List, items: [{kind: Pod}]}\n",
            "kind: List\n? [complex, key]\n: 1\nitems:\n- {kind: Pod}\n",
            "kind: List\nitems:\n- {kind: Pod}\nitems:\n- {kind: Node}\n",
            "kind: List\nitems:\n- kind: Pod\n   bad: indent\n",
            "kind: List\nitems:\n- {kind: Pod}\n---\n- [unclosed\n",
        ] {
            assert!(
                !yaml_outline::outline(text).is_some_and(|outline| outline
                    .iter()
                    .any(|d| matches!(d, yaml_outline::DocumentOutline::List { .. }))),
                "{text}"
            );
            assert_eq!(
                yaml_documents(text),
                yaml_documents_read_whole(text),
                "{text}"
            );
        }
        // An item the deserializer refuses though it parses names the item's line in the file.
        let duplicate = "kind: PodList\nitems:\n- metadata: {name: a}\n- metadata: {name: b}\n  spec: {}\n  spec: {}\n";
        let error = parse_text(duplicate, false, Path::new("list.yaml"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            Err(error.trim_start_matches("list.yaml: ").to_string()),
            yaml_documents_read_whole(duplicate),
        );
        assert!(
            error.contains("items[1]") && error.contains("line 4"),
            "{error}"
        );
        let deep = format!(
            "kind: List\nitems:\n- {}x\n",
            (1..120)
                .map(|depth| format!("k{depth}:\n{}", "  ".repeat(depth + 1)))
                .collect::<String>()
        );
        assert_eq!(yaml_documents(&deep), yaml_documents_read_whole(&deep));
    }

    #[test]
    fn errors_name_the_file_document_object_and_field() {
        let dir = temp_dir("bad");
        let cases = [
            (
                "quantity",
                "kind: Node\nmetadata: {name: n1}\n---\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources: {requests: {cpu: lots}}\n",
                vec!["document 2 (Pod p)", "spec.containers[0].resources.requests.cpu", "\"lots\""],
            ),
            (
                "type",
                "kind: Node\nmetadata: {name: n1}\nspec: {unschedulable: maybe}\n",
                vec!["document 1 (Node n1)", "spec.unschedulable"],
            ),
            ("no kind", "metadata: {name: x}\n", vec!["document 1", "no `kind`"]),
            ("yaml", "kind: [\n", vec!["invalid YAML"]),
            (
                "list item",
                "kind: List\nitems:\n- kind: Pod\n  metadata: {}\n",
                vec!["items[0]", "no `metadata.name`"],
            ),
        ];
        for (name, text, expected) in cases {
            let path = write(&dir, &format!("{}.yaml", name.replace(' ', "-")), text);
            let error = load_files(&[path]).unwrap_err().to_string();
            for fragment in expected {
                assert!(
                    error.contains(fragment),
                    "{name}: {error:?} lacks {fragment:?}"
                );
            }
        }
    }

    #[test]
    fn a_byte_order_mark_before_yaml_or_json_is_read_past() {
        let yaml = parse_text(
            "\u{feff}kind: Node\nmetadata: {name: n1}\n",
            false,
            Path::new("bom.yaml"),
        )
        .unwrap();
        assert_eq!(yaml.nodes.len(), 1);
        let json = parse_text(
            "\u{feff}{\"kind\":\"Node\",\"metadata\":{\"name\":\"n1\"}}",
            true,
            Path::new("bom.json"),
        )
        .unwrap();
        assert_eq!(json.nodes.len(), 1);
    }

    #[test]
    fn nesting_past_the_limit_is_refused_before_parsing_and_at_the_limit_is_parsed() {
        let deep = "[".repeat(100_000);
        let error = parse_text(
            &format!("kind: Node\nx: {deep}"),
            false,
            Path::new("deep.yaml"),
        )
        .unwrap_err();
        assert_eq!(
            error.message,
            format!("line 2: collections nested deeper than {MAX_YAML_NESTING} levels")
        );
        // The parser's own refusal would say "recursion limit exceeded", after 26 s.
        let nested = format!(
            "kind: Node\nmetadata: {{name: n1, annotations: {{a: '{}{}'}}}}\n",
            "[".repeat(MAX_YAML_NESTING - 2),
            "]".repeat(MAX_YAML_NESTING - 2)
        );
        let cluster = parse_text(&nested, false, Path::new("ok.yaml")).unwrap();
        assert_eq!(
            cluster.nodes.len(),
            1,
            "brackets in a string count, within the limit"
        );
        let balanced = "{\"a\": [1]} ".repeat(10_000);
        assert!(check_nesting(&balanced).is_ok(), "depth, not count");
    }

    #[test]
    fn an_object_larger_than_an_api_server_accepts_is_refused() {
        let expressions: Vec<String> = (0..40_000)
            .map(|i| format!("{{\"key\":\"k{i}\",\"operator\":\"In\",\"values\":[\"v\"]}}"))
            .collect();
        let pod = format!(
            "{{\"kind\":\"Pod\",\"metadata\":{{\"name\":\"huge\"}},\"spec\":{{\"containers\":[],\"affinity\":{{\"nodeAffinity\":{{\"requiredDuringSchedulingIgnoredDuringExecution\":{{\"nodeSelectorTerms\":[{{\"matchExpressions\":[{}]}}]}}}}}}}}}}",
            expressions.join(",")
        );
        assert!(pod.len() > MAX_OBJECT_BYTES);
        let error = parse_text(&pod, true, Path::new("huge.json")).unwrap_err();
        assert_eq!(error.location, "huge.json: document 1 (Pod huge)");
        assert!(error.message.contains("past the 1572864 bytes"), "{error}");
        let fits: Vec<String> = expressions[..1000].to_vec();
        let pod = pod.replace(&expressions.join(","), &fits.join(","));
        assert_eq!(
            parse_text(&pod, true, Path::new("ok.json"))
                .unwrap()
                .pods
                .len(),
            1
        );
    }

    #[test]
    fn names_the_api_server_refuses_are_refused_with_their_field() {
        for (name, shown) in [
            ("../../etc/passwd", "../../etc/passwd"),
            ("x/y", "x/y"),
            ("a\nb", "a\\nb"),
            ("Upper", "Upper"),
        ] {
            let text = format!(
                "{{\"kind\":\"Node\",\"metadata\":{{\"name\":{}}}}}",
                serde_json::to_string(name).unwrap()
            );
            let error = parse_text(&text, true, Path::new("n.json")).unwrap_err();
            assert_eq!(error.location, format!("n.json: document 1 (Node {shown})"));
            assert!(
                error.message.starts_with("metadata.name: Invalid value"),
                "{error}"
            );
            assert!(!error.to_string().contains('\n'), "{error}");
        }
        let namespaced = "kind: Pod\nmetadata: {name: p, namespace: x/y}\nspec: {containers: []}\n";
        let error = parse_text(namespaced, false, Path::new("p.yaml")).unwrap_err();
        assert!(
            error
                .message
                .starts_with("metadata.namespace: Invalid value: \"x/y\""),
            "{error}"
        );
    }

    proptest::proptest! {
        /// Any name and cpu quantity either round-trips exactly through a file or is refused
        /// with an error naming its field.
        #[test]
        fn names_and_quantities_round_trip_or_are_refused_by_field(
            name in "[a-zA-Z0-9./_\n-]{0,70}",
            cores in proptest::prop_oneof![0i64..1_000_000, proptest::num::i64::ANY],
            unit in proptest::sample::select(vec!["", "m", "k", "M", "Ki", "e3", "E"]),
        ) {
            let node = serde_json::json!({
                "kind": "Node",
                "metadata": {"name": name},
                "status": {"allocatable": {"cpu": format!("{cores}{unit}")}},
            });
            let result = parse_text(&node.to_string(), true, Path::new("p.json"));
            let scale: i128 = match unit {
                "" => 1_000, "m" => 1, "k" => 1_000_000, "M" => 1_000_000_000,
                "Ki" => 1_024_000, "e3" => 1_000_000, _ => 1_000_000_000_000_000_000_000,
            };
            let milli = i128::from(cores).checked_mul(scale);
            let fits = milli.is_some_and(|m| (0..=i128::from(i64::MAX)).contains(&m));
            let name_ok = crate::k8s::validation::dns1123_subdomain("metadata.name", &name).is_ok();
            match result {
                Ok(cluster) => {
                    proptest::prop_assert!(name_ok && fits);
                    let info = crate::k8s::node_info(&cluster.nodes[0]).unwrap();
                    proptest::prop_assert_eq!(&info.name, &name);
                    proptest::prop_assert_eq!(Some(i128::from(info.allocatable.milli_cpu)), milli);
                }
                Err(error) => {
                    let field = if !name.is_empty() && !name_ok {
                        "metadata.name"
                    } else {
                        "status.allocatable.cpu"
                    };
                    proptest::prop_assert!(
                        error.message.starts_with(field) || (name.is_empty() && error.message.contains("metadata.name")),
                        "{} for {:?} {}{}", error, name, cores, unit
                    );
                }
            }
        }
    }

    /// Pieces of Kubernetes YAML and JSON, and the odd bytes hostile documents are made of.
    fn fragment() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::strategy::Strategy;
        let pieces = vec![
            "kind: Node\n",
            "kind: Pod\n",
            "kind: List\nitems:\n",
            "metadata:\n",
            "  name: n1\n",
            "  namespace: a/b\n",
            "spec: {containers: [{name: c}]}\n",
            "status: {allocatable: {cpu: ",
            "1e30",
            "-1",
            "9Ei",
            "'",
            "\"",
            "[",
            "]",
            "{",
            "}",
            "- ",
            ": ",
            "---\n",
            "&a ",
            "*a ",
            "!!binary ",
            "<<: *a\n",
            "\u{feff}",
            "\0",
            "\t",
            "\n",
            "  ",
            "~",
            "null",
            "{\"kind\":",
            "\"Pod\"",
            ",",
            "é",
            "\u{202e}",
        ];
        proptest::collection::vec(proptest::sample::select(pieces), 0..60).prop_map(|p| p.concat())
    }

    /// The committed seeds of the object parser's mutation fuzzing.
    const OBJECT_SEEDS: &[&str] = &[
        include_str!("../../../examples/clusters/demo.yaml"),
        include_str!("../../../examples/clusters/gpu-models.yaml"),
        include_str!("../../../examples/clusters/maintenance.yaml"),
        include_str!("../../../examples/clusters/racks.yaml"),
        include_str!("../../../examples/clusters/teams.yaml"),
        include_str!("../../../tests/fuzz-corpus/aliases.yaml"),
        include_str!("../../../tests/fuzz-corpus/list.json"),
        include_str!("../../../tests/fuzz-corpus/tricky.yaml"),
    ];

    #[test]
    fn the_object_seeds_are_read() {
        let seeds = &OBJECT_SEEDS[..5];
        for seed in seeds {
            parse_text(seed, false, Path::new("seed.yaml")).unwrap();
        }
        let list = parse_text(OBJECT_SEEDS[6], true, Path::new("list.json")).unwrap();
        assert_eq!(list.kept_objects(), 5, "one of each kind");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// Realistic documents cut and spliced (see tests/fuzz-corpus/README.md) are read, as
        /// YAML and as JSON, to an answer or an error, never a panic.
        #[test]
        fn mutated_documents_are_read_or_refused_without_a_panic(
            text in crate::util::fuzz::mutated(OBJECT_SEEDS)
        ) {
            let _ = parse_text(&text, false, Path::new("fuzz.yaml"));
            let _ = parse_text(&text, true, Path::new("fuzz.json"));
        }
    }

    /// A YAML List as kubectl writes it, cut and spliced into itself: splices from the other
    /// seeds left one mutated text in ten a List that still parses.
    const LIST_SEEDS: &[&str] = &[include_str!("../../../tests/fuzz-corpus/list.yaml")];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]
        /// A YAML List cut and spliced reads the same an item at a time as whole: the same
        /// documents, or the same error.
        #[test]
        fn a_mutated_yaml_list_reads_the_same_an_item_at_a_time_as_whole(
            text in crate::util::fuzz::mutated(LIST_SEEDS)
        ) {
            proptest::prop_assert_eq!(yaml_documents(&text), yaml_documents_read_whole(&text));
        }
    }

    proptest::proptest! {
        /// The corpus of this fuzz test is its generator: any mix of the pieces above is read,
        /// as YAML and as JSON, to an answer or an error, never a panic (regressions are kept in
        /// host/core/proptest-regressions).
        #[test]
        fn any_document_is_read_or_refused_without_a_panic(text in fragment()) {
            let _ = parse_text(&text, false, Path::new("fuzz.yaml"));
            let _ = parse_text(&text, true, Path::new("fuzz.json"));
            let _ = yaml_documents(&text);
        }
    }
}
