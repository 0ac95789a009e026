//! The Services and controllers by which kube-scheduler's default topology spreading selects a
//! pod's peers (`helper.DefaultSelector`), and the selector they give a pod.

use std::collections::{BTreeMap, HashMap};

use wasched_sdk as sdk;

use crate::events::{Kind, Object, ObjectKey};

/// A controller's pod selector.
#[derive(Debug, Clone)]
enum ControllerSelector {
    /// A ReplicationController's `spec.selector` map.
    Set(BTreeMap<String, String>),
    /// A ReplicaSet's or StatefulSet's `spec.selector`.
    Selector(sdk::LabelSelector),
}

/// The selectors of the Services, ReplicationControllers, ReplicaSets and StatefulSets known.
#[derive(Debug, Default)]
pub struct SpreadSelectors {
    /// Namespace → Service name → `spec.selector` (a Service without one selects no pod and is
    /// not kept).
    services: HashMap<String, HashMap<String, BTreeMap<String, String>>>,
    /// `kind/namespace/name` → selector (a controller without one is not kept).
    controllers: HashMap<String, ControllerSelector>,
}

fn controller_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

impl SpreadSelectors {
    /// Takes in a Service or controller; false for objects of other kinds.
    pub fn upsert(&mut self, object: &Object) -> bool {
        let meta = object.metadata();
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".into());
        let name = meta.name.clone().unwrap_or_default();
        let controller = match object {
            Object::Service(service) => {
                let selector = service.spec.as_ref().and_then(|s| s.selector.clone());
                let services = self.services.entry(namespace.clone()).or_default();
                match selector {
                    Some(selector) => services.insert(name, selector),
                    None => services.remove(&name),
                };
                if services.is_empty() {
                    self.services.remove(&namespace);
                }
                return true;
            }
            Object::ReplicationController(rc) => rc
                .spec
                .as_ref()
                .and_then(|s| s.selector.clone())
                .map(ControllerSelector::Set),
            Object::ReplicaSet(rs) => rs
                .spec
                .as_ref()
                .map(|s| ControllerSelector::Selector(crate::k8s::label_selector(&s.selector))),
            Object::StatefulSet(ss) => ss
                .spec
                .as_ref()
                .map(|s| ControllerSelector::Selector(crate::k8s::label_selector(&s.selector))),
            _ => return false,
        };
        let key = controller_key(object.kind().name(), &namespace, &name);
        match controller {
            Some(selector) => self.controllers.insert(key, selector),
            None => self.controllers.remove(&key),
        };
        true
    }

    /// Forgets a Service or controller; false for keys of other kinds.
    pub fn remove(&mut self, key: &ObjectKey) -> bool {
        match key.kind {
            Kind::Service => {
                if let Some(services) = self.services.get_mut(&key.namespace) {
                    services.remove(&key.name);
                    if services.is_empty() {
                        self.services.remove(&key.namespace);
                    }
                }
                true
            }
            Kind::ReplicationController | Kind::ReplicaSet | Kind::StatefulSet => {
                let key = controller_key(key.kind.name(), &key.namespace, &key.name);
                self.controllers.remove(&key);
                true
            }
            _ => false,
        }
    }

    /// kube-scheduler's default selector for `pod`: the selectors of the Services of its
    /// namespace that select it, merged, and its controller's selector when the controller is a
    /// `v1` ReplicationController or an `apps/v1` ReplicaSet or StatefulSet the cache knows.
    /// `None` when that selects nothing in particular (no requirement at all).
    pub fn default_selector(&self, pod: &sdk::Pod) -> Option<sdk::LabelSelector> {
        let mut set: BTreeMap<String, String> = BTreeMap::new();
        let selects_pod = |selector: &BTreeMap<String, String>| {
            selector
                .iter()
                .all(|(key, value)| pod.labels.get(key) == Some(value.as_str()))
        };
        for selector in self
            .services
            .get(&pod.namespace)
            .into_iter()
            .flat_map(HashMap::values)
        {
            if selects_pod(selector) {
                set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        let mut expressions = Vec::new();
        if let Some(owner) = &pod.controller {
            let known = matches!(
                (owner.api_version.as_str(), owner.kind.as_str()),
                ("v1", "ReplicationController") | ("apps/v1", "ReplicaSet" | "StatefulSet")
            );
            let key = controller_key(&owner.kind, &pod.namespace, &owner.name);
            match self.controllers.get(&key).filter(|_| known) {
                Some(ControllerSelector::Set(selector)) => {
                    set.extend(selector.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
                // Its requirements are added to the Services' as they are: a pair in both is
                // required twice, never merged away.
                Some(ControllerSelector::Selector(selector)) => {
                    expressions.extend(selector.match_labels.iter().map(|(key, value)| {
                        sdk::LabelSelectorRequirement {
                            key: key.to_string(),
                            operator: "In".into(),
                            values: vec![value.to_string()],
                        }
                    }));
                    expressions.extend(selector.match_expressions.iter().cloned());
                }
                None => {}
            }
        }
        if set.is_empty() && expressions.is_empty() {
            return None;
        }
        Some(sdk::LabelSelector {
            match_labels: sdk::Labels::new(set),
            match_expressions: expressions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(kind: Kind, value: serde_json::Value) -> Object {
        Object::from_json(kind, value).expect("a valid object")
    }

    fn pod(labels: &[(&str, &str)], owner: Option<(&str, &str, &str)>) -> sdk::Pod {
        sdk::Pod {
            namespace: "team".into(),
            labels: labels.iter().copied().collect(),
            controller: owner.map(|(api_version, kind, name)| sdk::ControllerRef {
                api_version: api_version.into(),
                kind: kind.into(),
                name: name.into(),
            }),
            ..sdk::Pod::default()
        }
    }

    fn service(name: &str, namespace: &str, selector: serde_json::Value) -> Object {
        object(
            Kind::Service,
            serde_json::json!({"metadata": {"name": name, "namespace": namespace},
                "spec": {"selector": selector}}),
        )
    }

    #[test]
    fn services_of_the_pods_namespace_that_select_it_are_merged() {
        let mut selectors = SpreadSelectors::default();
        selectors.upsert(&service("web", "team", serde_json::json!({"app": "web"})));
        selectors.upsert(&service(
            "tier",
            "team",
            serde_json::json!({"tier": "front"}),
        ));
        selectors.upsert(&service("db", "team", serde_json::json!({"app": "db"})));
        selectors.upsert(&service(
            "elsewhere",
            "other",
            serde_json::json!({"app": "web"}),
        ));
        let web = pod(&[("app", "web"), ("tier", "front")], None);
        let selector = selectors
            .default_selector(&web)
            .expect("two Services select it");
        assert_eq!(
            selector.match_labels,
            [("app", "web"), ("tier", "front")].into_iter().collect()
        );
        assert!(selector.match_expressions.is_empty());
        assert_eq!(
            selectors.default_selector(&pod(&[("app", "cache")], None)),
            None
        );
        selectors.remove(&ObjectKey {
            kind: Kind::Service,
            namespace: "team".into(),
            name: "tier".into(),
        });
        let selector = selectors.default_selector(&web).expect("one Service left");
        assert_eq!(
            selector.match_labels,
            [("app", "web")].into_iter().collect()
        );
    }

    #[test]
    fn a_known_controller_adds_its_selector() {
        let mut selectors = SpreadSelectors::default();
        selectors.upsert(&object(
            Kind::ReplicaSet,
            serde_json::json!({"metadata": {"name": "web-1", "namespace": "team"},
                "spec": {"selector": {"matchLabels": {"app": "web", "rev": "1"}}}}),
        ));
        selectors.upsert(&object(
            Kind::ReplicationController,
            serde_json::json!({"metadata": {"name": "old", "namespace": "team"},
                "spec": {"selector": {"legacy": "yes"}}}),
        ));
        let owned = pod(
            &[("app", "web"), ("rev", "1")],
            Some(("apps/v1", "ReplicaSet", "web-1")),
        );
        let selector = selectors
            .default_selector(&owned)
            .expect("its ReplicaSet selects it");
        let keys: Vec<(&str, &str, &[String])> = selector
            .match_expressions
            .iter()
            .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_slice()))
            .collect();
        assert_eq!(
            keys,
            [
                ("app", "In", &["web".to_string()][..]),
                ("rev", "In", &["1".to_string()][..])
            ]
        );
        let legacy = pod(
            &[("legacy", "yes")],
            Some(("v1", "ReplicationController", "old")),
        );
        let selector = selectors
            .default_selector(&legacy)
            .expect("its controller selects it");
        assert_eq!(
            selector.match_labels,
            [("legacy", "yes")].into_iter().collect()
        );
        for (api_version, kind, name) in [
            ("apps/v1", "ReplicaSet", "missing"),
            ("apps/v1beta2", "ReplicaSet", "web-1"),
            ("batch/v1", "Job", "web-1"),
        ] {
            let other = pod(&[("app", "web")], Some((api_version, kind, name)));
            assert_eq!(
                selectors.default_selector(&other),
                None,
                "{api_version} {kind} {name}"
            );
        }
    }
}
