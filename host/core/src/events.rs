//! The ordered event pipeline between the sources of cluster changes (watches, the API, replays)
//! and the scheduler.
//!
//! Producers on any thread [`EventPipeline::submit`]; the scheduler thread
//! [`EventPipeline::drain`]s between cycles and applies what it gets. Per object, at most one event
//! waits at a time: a newer one replaces it (a burst collapses to its last event), an older one
//! than what is waiting or was applied is dropped. Since one thread applies everything it drains,
//! events for one object are applied in version order and never concurrently, while different
//! objects never wait on each other.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1 as apps;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::policy::v1 as policy;
use k8s_openapi::api::resource::v1 as resource;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// Defines [`Kind`], [`Object`] and everything that differs between kinds only by the kind's
/// name, type and path, from one table: a new kind is one line of [`object_kinds!`]'s call and one
/// entry of [`Kind::ALL`] (and what the cache does with it; Kubernetes mode watches every kind
/// through [`Kind::visit_all`]).
macro_rules! object_kinds {
    ($($kind:ident($ty:ty): $api_version:literal, $resource:literal, namespaced: $namespaced:literal;)+) => {
        /// The kinds of object the scheduler follows.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum Kind {
            $($kind,)+
        }

        /// A Kubernetes object the scheduler follows, one variant per [`Kind`].
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum Object {
            $($kind(Box<$ty>),)+
        }

        impl Kind {
            /// The kind's name in Kubernetes (`kind:` of its objects).
            pub fn name(self) -> &'static str {
                match self {
                    $(Kind::$kind => stringify!($kind),)+
                }
            }

            /// The `apiVersion` of its objects.
            pub fn api_version(self) -> &'static str {
                match self {
                    $(Kind::$kind => $api_version,)+
                }
            }

            /// Its resource's name in API paths (`persistentvolumes`).
            pub fn resource(self) -> &'static str {
                match self {
                    $(Kind::$kind => $resource,)+
                }
            }

            /// Whether its objects live in a namespace.
            pub fn is_namespaced(self) -> bool {
                match self {
                    $(Kind::$kind => $namespaced,)+
                }
            }
        }

        impl Object {
            /// The object's metadata.
            pub fn metadata(&self) -> &ObjectMeta {
                match self {
                    $(Object::$kind(o) => &o.metadata,)+
                }
            }

            /// The object's metadata, to change.
            pub fn metadata_mut(&mut self) -> &mut ObjectMeta {
                match self {
                    $(Object::$kind(o) => &mut o.metadata,)+
                }
            }

            /// The object's kind.
            pub fn kind(&self) -> Kind {
                match self {
                    $(Object::$kind(_) => Kind::$kind,)+
                }
            }

            /// An object of `kind` parsed from its JSON.
            ///
            /// # Errors
            /// The JSON does not fit the kind.
            pub fn from_json(
                kind: Kind,
                value: serde_json::Value,
            ) -> Result<Object, serde_json::Error> {
                Ok(match kind {
                    $(Kind::$kind => Object::$kind(Box::new(serde_json::from_value(value)?)),)+
                })
            }

            /// An object of `kind` read from its JSON text.
            ///
            /// # Errors
            /// The JSON does not fit the kind.
            pub fn from_json_slice(kind: Kind, json: &[u8]) -> Result<Object, serde_json::Error> {
                Ok(match kind {
                    $(Kind::$kind => Object::$kind(Box::new(serde_json::from_slice(json)?)),)+
                })
            }

            /// The object as JSON.
            pub fn to_json(&self) -> serde_json::Value {
                let value = match self {
                    $(Object::$kind(o) => serde_json::to_value(o),)+
                };
                value.expect("Kubernetes objects serialize")
            }
        }

        impl Kind {
            /// Calls `visitor` once per kind, with the kind's object type.
            pub fn visit_all(visitor: &mut impl KindVisitor) {
                $(visitor.visit::<$ty>(Kind::$kind);)+
            }
        }

        $(impl From<$ty> for Object {
            fn from(object: $ty) -> Object {
                Object::$kind(Box::new(object))
            }
        })+
    };
}

object_kinds! {
    Node(core::Node): "v1", "nodes", namespaced: false;
    Pod(core::Pod): "v1", "pods", namespaced: true;
    PersistentVolume(core::PersistentVolume): "v1", "persistentvolumes", namespaced: false;
    PersistentVolumeClaim(core::PersistentVolumeClaim): "v1", "persistentvolumeclaims", namespaced: true;
    StorageClass(StorageClass): "storage.k8s.io/v1", "storageclasses", namespaced: false;
    CSINode(CSINode): "storage.k8s.io/v1", "csinodes", namespaced: false;
    CSIDriver(CSIDriver): "storage.k8s.io/v1", "csidrivers", namespaced: false;
    CSIStorageCapacity(CSIStorageCapacity): "storage.k8s.io/v1", "csistoragecapacities", namespaced: true;
    Namespace(core::Namespace): "v1", "namespaces", namespaced: false;
    Service(core::Service): "v1", "services", namespaced: true;
    ReplicationController(core::ReplicationController): "v1", "replicationcontrollers", namespaced: true;
    ReplicaSet(apps::ReplicaSet): "apps/v1", "replicasets", namespaced: true;
    StatefulSet(apps::StatefulSet): "apps/v1", "statefulsets", namespaced: true;
    PodDisruptionBudget(policy::PodDisruptionBudget): "policy/v1", "poddisruptionbudgets", namespaced: true;
    DeviceClass(resource::DeviceClass): "resource.k8s.io/v1", "deviceclasses", namespaced: false;
    ResourceSlice(resource::ResourceSlice): "resource.k8s.io/v1", "resourceslices", namespaced: false;
    ResourceClaim(resource::ResourceClaim): "resource.k8s.io/v1", "resourceclaims", namespaced: true;
    ResourceClaimTemplate(resource::ResourceClaimTemplate): "resource.k8s.io/v1", "resourceclaimtemplates", namespaced: true;
    PodGroup(crate::k8s::podgroup::PodGroup): "scheduling.x-k8s.io/v1alpha1", "podgroups", namespaced: true;
    Workload(k8s_openapi::api::scheduling::v1alpha1::Workload): "scheduling.k8s.io/v1alpha1", "workloads", namespaced: true;
}

/// Work done once per kind with the kind's object type ([`Kind::visit_all`]): how code that
/// needs each kind's Rust type (a typed watch per kind, in Kubernetes mode) follows the table
/// instead of naming every kind.
pub trait KindVisitor {
    /// Called with `kind`, whose objects are `K`.
    fn visit<K: KindType>(&mut self, kind: Kind);
}

/// The Rust type of a kind's objects, as [`KindVisitor::visit`] gets it: a Kubernetes resource
/// that decodes from JSON and becomes an [`Object`].
pub trait KindType:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + serde::de::DeserializeOwned
    + Clone
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The object as the pipeline carries it.
    fn into_object(self) -> Object;
}

impl<K> KindType for K
where
    K: k8s_openapi::Resource
        + k8s_openapi::Metadata<Ty = ObjectMeta>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    Object: From<K>,
{
    fn into_object(self) -> Object {
        Object::from(self)
    }
}

impl Kind {
    /// Every kind, in the order a cluster is best loaded (what pods refer to first).
    pub const ALL: [Kind; 20] = [
        Kind::Namespace,
        Kind::DeviceClass,
        Kind::ResourceClaimTemplate,
        Kind::ResourceClaim,
        Kind::StorageClass,
        Kind::CSIDriver,
        Kind::CSIStorageCapacity,
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::Service,
        Kind::ReplicationController,
        Kind::ReplicaSet,
        Kind::StatefulSet,
        Kind::PodDisruptionBudget,
        Kind::CSINode,
        Kind::ResourceSlice,
        Kind::PodGroup,
        Kind::Workload,
        Kind::Node,
        Kind::Pod,
    ];

    /// Whether a cluster may not serve the kind at all: a CustomResourceDefinition's kind
    /// (PodGroup), or an alpha API a cluster serves only when enabled (Workload), which a
    /// Kubernetes-mode scheduler does without until it is served.
    pub fn is_optional(self) -> bool {
        matches!(self, Kind::PodGroup | Kind::Workload)
    }

    /// The kind named `name`, if wasched follows it.
    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Identifies an object: kind, namespace (empty for cluster-scoped kinds) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// The object's kind.
    pub kind: Kind,
    /// Its namespace; empty for a kind outside namespaces.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Object {
    /// A stand-in carrying only `key`'s namespace and name, for a deletion.
    pub fn stub(key: &ObjectKey) -> Object {
        let metadata = serde_json::json!({
            "name": key.name,
            "namespace": key.kind.is_namespaced().then_some(&key.namespace),
        });
        Object::from_json(key.kind, serde_json::json!({ "metadata": metadata }))
            .expect("every kind accepts bare metadata")
    }

    /// The object's key; a namespaced object without a namespace is in `default`.
    pub fn key(&self) -> ObjectKey {
        let meta = self.metadata();
        let namespaced = self.kind().is_namespaced();
        ObjectKey {
            kind: self.kind(),
            namespace: if namespaced {
                meta.namespace.clone().unwrap_or_else(|| "default".into())
            } else {
                String::new()
            },
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// `metadata.resourceVersion` as a number, when it is one (as etcd's are).
    pub fn resource_version(&self) -> Option<u64> {
        self.metadata().resource_version.as_deref()?.parse().ok()
    }
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Created or updated.
    Upsert,
    /// Deleted.
    Delete,
}

/// One change, tagged with the object's version: a higher version is newer.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// What happened.
    pub action: Action,
    /// The object as it is now (for a deletion, as it was last).
    pub object: Object,
    /// The object's version.
    pub version: u64,
}

impl Event {
    /// An event versioned by the object's `resourceVersion`.
    ///
    /// # Errors
    /// The object has no numeric `resourceVersion`; use [`Event::with_version`] with a sequence
    /// number instead.
    pub fn new(action: Action, object: Object) -> Result<Event, String> {
        let version = object.resource_version().ok_or_else(|| {
            let key = object.key();
            format!(
                "{:?} {}: metadata.resourceVersion is missing or not a number",
                key.kind, key.name
            )
        })?;
        Ok(Event {
            action,
            object,
            version,
        })
    }

    /// An event versioned by the caller's sequence number.
    pub fn with_version(action: Action, object: Object, version: u64) -> Event {
        Event {
            action,
            object,
            version,
        }
    }
}

/// What became of a submitted event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    /// Waiting to be applied.
    Queued,
    /// Replaced an older waiting event of the same object.
    Collapsed,
    /// Older than (or as old as) what is waiting or applied: dropped.
    Stale,
}

/// Counters of the pipeline, for metrics.
#[derive(Debug, Default)]
pub struct PipelineStats {
    /// Events submitted.
    pub submitted: AtomicU64,
    /// Events drained by the scheduling thread.
    pub drained: AtomicU64,
    /// Events replaced by a newer one for the same object before they were drained.
    pub collapsed: AtomicU64,
    /// Events dropped because a newer version of the object was drained already.
    pub stale: AtomicU64,
}

/// An event as it waits: typed, or as its object's JSON until it is drained. A write of many
/// objects (a 440,000-pod List) submits them all at once, and typed they take several times
/// their JSON.
#[derive(Debug)]
enum Waiting {
    Typed(Event),
    Json {
        action: Action,
        kind: Kind,
        json: Arc<[u8]>,
        version: u64,
    },
}

impl Waiting {
    fn version(&self) -> u64 {
        match self {
            Waiting::Typed(event) => event.version,
            Waiting::Json { version, .. } => *version,
        }
    }

    /// The event, typed. JSON the pipeline was given is what a typed object was written as, so
    /// it reads back; if it did not, the event is dropped and said.
    fn into_event(self) -> Option<Event> {
        match self {
            Waiting::Typed(event) => Some(event),
            Waiting::Json {
                action,
                kind,
                json,
                version,
            } => match Object::from_json_slice(kind, &json) {
                Ok(mut object) => {
                    object.metadata_mut().managed_fields = None;
                    Some(Event {
                        action,
                        object,
                        version,
                    })
                }
                Err(e) => {
                    tracing::error!(kind = ?kind, version, "event dropped: its JSON does not read as the kind: {e}");
                    None
                }
            },
        }
    }
}

#[derive(Default)]
struct Inner {
    waiting: HashMap<ObjectKey, Waiting>,
    /// Keys with a waiting event, in the order their first waiting event arrived.
    order: VecDeque<ObjectKey>,
    /// The newest version drained per object (deleted objects included, so a late update of a
    /// deleted object is recognised as stale).
    drained: HashMap<ObjectKey, u64>,
}

/// The pipeline; share it with `Arc` between producers and the scheduler.
#[derive(Default)]
pub struct EventPipeline {
    inner: Mutex<Inner>,
    /// Signalled on every submission, for a scheduler thread waiting for work.
    arrived: Condvar,
    /// Its counters.
    pub stats: PipelineStats,
}

/// The events [`EventPipeline::drain`] took, oldest arrival first, each typed as it is reached.
pub struct Drained {
    events: std::vec::IntoIter<Waiting>,
}

impl Iterator for Drained {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        self.events.by_ref().find_map(Waiting::into_event)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.events.len()))
    }
}

impl EventPipeline {
    /// Offers an event. Never blocks for long: it only takes a short lock.
    ///
    /// The object's `managedFields` are dropped here, as kube's controllers' informers drop them:
    /// nothing schedules by them, and an API server's list or watch carries them for every
    /// object, often as much as the rest of a pod.
    pub fn submit(&self, mut event: Event) -> Submitted {
        event.object.metadata_mut().managed_fields = None;
        let key = event.object.key();
        self.offer(key, Waiting::Typed(event))
    }

    /// Offers an event whose object is `json`, the JSON of an object of `key.kind` (as a store
    /// wrote it); it is typed only when drained. As [`EventPipeline::submit`] otherwise.
    pub fn submit_json(
        &self,
        action: Action,
        key: ObjectKey,
        json: Arc<[u8]>,
        version: u64,
    ) -> Submitted {
        let kind = key.kind;
        self.offer(
            key,
            Waiting::Json {
                action,
                kind,
                json,
                version,
            },
        )
    }

    fn offer(&self, key: ObjectKey, event: Waiting) -> Submitted {
        self.stats.submitted.fetch_add(1, Ordering::Relaxed);
        let version = event.version();
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.drained.get(&key).is_some_and(|&v| v >= version) {
            self.stats.stale.fetch_add(1, Ordering::Relaxed);
            return Submitted::Stale;
        }
        match inner.waiting.get_mut(&key) {
            Some(waiting) if waiting.version() >= version => {
                self.stats.stale.fetch_add(1, Ordering::Relaxed);
                Submitted::Stale
            }
            Some(waiting) => {
                *waiting = event;
                self.stats.collapsed.fetch_add(1, Ordering::Relaxed);
                Submitted::Collapsed
            }
            None => {
                inner.waiting.insert(key.clone(), event);
                inner.order.push_back(key);
                drop(inner);
                self.arrived.notify_all();
                Submitted::Queued
            }
        }
    }

    /// Blocks until an event is waiting, [`EventPipeline::wake`] is called, or `timeout` passes.
    pub fn wait(&self, timeout: Duration) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.order.is_empty() {
            let _ = self.arrived.wait_timeout(inner, timeout);
        }
    }

    /// Wakes a thread blocked in [`EventPipeline::wait`] (for work that is not an event).
    pub fn wake(&self) {
        let _guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        self.arrived.notify_all();
    }

    /// Takes every waiting event, oldest arrival first, one per object. Events submitted as
    /// JSON are typed one at a time as the iterator reaches them.
    pub fn drain(&self) -> Drained {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut events = Vec::with_capacity(inner.order.len());
        while let Some(key) = inner.order.pop_front() {
            if let Some(event) = inner.waiting.remove(&key) {
                inner.drained.insert(key, event.version());
                events.push(event);
            }
        }
        self.stats
            .drained
            .fetch_add(events.len() as u64, Ordering::Relaxed);
        Drained {
            events: events.into_iter(),
        }
    }

    /// The newest version drained for an object.
    pub fn drained_version(&self, key: &ObjectKey) -> Option<u64> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.drained.get(key).copied()
    }

    /// Number of events waiting.
    pub fn waiting(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node_event(name: &str, version: u64) -> Event {
        let node: core::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        Event::with_version(Action::Upsert, Object::Node(Box::new(node)), version)
    }

    fn names_and_versions(events: &[Event]) -> Vec<(String, u64)> {
        events
            .iter()
            .map(|e| (e.object.key().name, e.version))
            .collect()
    }

    /// Records the kinds it visits, and checks that each type's objects are of its kind.
    struct Visited(Vec<Kind>);

    impl KindVisitor for Visited {
        fn visit<K: KindType>(&mut self, kind: Kind) {
            assert_eq!(K::KIND, kind.name());
            assert_eq!(K::API_VERSION, kind.api_version());
            assert_eq!(K::URL_PATH_SEGMENT, kind.resource());
            let bare: K = serde_json::from_value(serde_json::json!({"metadata": {}})).unwrap();
            assert_eq!(bare.into_object().kind(), kind);
            self.0.push(kind);
        }
    }

    /// Kubernetes mode starts one watch per visited kind and is ready once `Kind::ALL.len()` of
    /// them listed: a kind in one list and not the other would keep it unready (or ready early).
    #[test]
    fn every_kind_is_visited_once_with_its_own_type() {
        let mut visited = Visited(Vec::new());
        Kind::visit_all(&mut visited);
        let mut visited = visited.0;
        visited.sort();
        let mut all = Kind::ALL.to_vec();
        all.sort();
        assert_eq!(visited, all);
    }

    #[test]
    fn managed_fields_are_not_kept() {
        let pod: core::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "web"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply",
                    "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]},
        }))
        .unwrap();
        let pipeline = EventPipeline::default();
        pipeline.submit(Event::with_version(
            Action::Upsert,
            Object::Pod(Box::new(pod)),
            1,
        ));
        let drained = pipeline.drain().collect::<Vec<_>>();
        let metadata = drained[0].object.metadata();
        assert_eq!(metadata.managed_fields, None);
        assert_eq!(metadata.labels.as_ref().unwrap()["app"], "web");
    }

    #[test]
    fn a_burst_collapses_and_older_events_are_dropped() {
        let pipeline = EventPipeline::default();
        assert_eq!(pipeline.submit(node_event("a", 1)), Submitted::Queued);
        assert_eq!(pipeline.submit(node_event("b", 1)), Submitted::Queued);
        assert_eq!(pipeline.submit(node_event("a", 3)), Submitted::Collapsed);
        assert_eq!(
            pipeline.submit(node_event("a", 2)),
            Submitted::Stale,
            "older than the waiting one"
        );
        assert_eq!(
            names_and_versions(&pipeline.drain().collect::<Vec<_>>()),
            vec![("a".into(), 3), ("b".into(), 1)],
            "first-arrival order, newest version"
        );
        assert_eq!(
            pipeline.submit(node_event("a", 3)),
            Submitted::Stale,
            "already applied"
        );
        assert_eq!(pipeline.submit(node_event("a", 4)), Submitted::Queued);
        assert_eq!(pipeline.stats.stale.load(Ordering::Relaxed), 2);
        assert_eq!(pipeline.stats.collapsed.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn events_offered_as_json_are_typed_when_drained_and_ordered_with_typed_ones() {
        let pipeline = EventPipeline::default();
        let json = |name: &str| -> Arc<[u8]> {
            Arc::from(
                serde_json::to_vec(&serde_json::json!({"metadata": {"name": name,
                    "labels": {"zone": "a"},
                    "managedFields": [{"manager": "kubectl", "operation": "Apply"}]}}))
                .unwrap(),
            )
        };
        let key = |name: &str| node_event(name, 0).object.key();
        assert_eq!(
            pipeline.submit_json(Action::Upsert, key("a"), json("a"), 2),
            Submitted::Queued
        );
        assert_eq!(pipeline.submit(node_event("b", 1)), Submitted::Queued);
        assert_eq!(
            pipeline.submit(node_event("a", 1)),
            Submitted::Stale,
            "older than the JSON waiting"
        );
        assert_eq!(
            pipeline.submit_json(Action::Upsert, key("b"), json("b"), 5),
            Submitted::Collapsed
        );
        let unreadable: Arc<[u8]> = Arc::from(&b"{\"metadata\": 7}"[..]);
        pipeline.submit_json(Action::Upsert, key("c"), unreadable, 1);
        assert_eq!(pipeline.submit(node_event("d", 1)), Submitted::Queued);
        let drained: Vec<Event> = pipeline.drain().collect();
        assert_eq!(
            names_and_versions(&drained),
            vec![("a".into(), 2), ("b".into(), 5), ("d".into(), 1)],
            "arrival order; what does not read as a Node is dropped, not the rest"
        );
        let metadata = drained[1].object.metadata();
        assert_eq!(metadata.managed_fields, None);
        assert_eq!(metadata.labels.as_ref().unwrap()["zone"], "a");
        assert_eq!(
            pipeline.submit_json(Action::Upsert, key("b"), json("b"), 5),
            Submitted::Stale,
            "already drained"
        );
    }

    #[test]
    fn resource_versions_come_from_metadata() {
        let node: core::Node = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "n", "resourceVersion": "42"}}),
        )
        .unwrap();
        let event = Event::new(Action::Upsert, Object::Node(Box::new(node))).unwrap();
        assert_eq!(event.version, 42);
        let unversioned: core::Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}})).unwrap();
        assert!(Event::new(Action::Upsert, Object::Node(Box::new(unversioned))).is_err());
    }
}
